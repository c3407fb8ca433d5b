//! Shared buffers: whether this machine offers rpcmem.
//!
//! On a Snapdragon phone, `libcdsprpc.so` (FastRPC) allocates ION/DMA-BUF
//! memory that both the CPU and the HTP map (`rpcmem_alloc`,
//! `rpcmem_to_fd`, `rpcmem_free`); registered with `QnnMem_register` as a
//! memory handle, a tensor in such memory is read by the HTP in place. With
//! ordinary client buffers (what the backend passes today) the HTP backend
//! copies every input into its own rpcmem buffers before a run and every
//! output out after it.
//!
//! [`detect`] does what the QNN HTP shared-buffer tutorial describes: open
//! `libcdsprpc.so` and resolve the three functions. The x86-64 emulator has
//! no FastRPC, so detection fails there and the backend stays on client
//! buffers; the processor's extensions say which (`shared_buffers:...`).
//! Registering the buffers (`QnnMem_register` and `MEMHANDLE` tensors) is
//! for a phone to confirm and is not done yet: see `docs/phone.md`.

use std::ffi::c_void;
use std::sync::OnceLock;

/// The FastRPC library that offers rpcmem.
pub const LIBRARY: &str = "libcdsprpc.so";

/// The functions a shared buffer needs: allocate, map to a file
/// descriptor for `QnnMem_register`, free.
const SYMBOLS: [&str; 3] = ["rpcmem_alloc", "rpcmem_free", "rpcmem_to_fd"];

/// A loaded `libcdsprpc.so` that has every function of [`SYMBOLS`].
pub(crate) struct RpcMem {
    _lib: libloading::Library,
}

/// Loads `libcdsprpc.so` by name (the dynamic linker's search: on Android
/// `/vendor/lib64` holds it) and looks up the rpcmem functions, once per
/// process. `Err` says why there are no shared buffers.
pub(crate) fn detect() -> Result<&'static RpcMem, String> {
    static FOUND: OnceLock<Result<RpcMem, String>> = OnceLock::new();
    FOUND.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<RpcMem, String> {
    // SAFETY: loading a vendor library runs its initialisers; FastRPC's are
    // those of any QNN or Hexagon client on the phone.
    let lib = unsafe { libloading::Library::new(LIBRARY) }
        .map_err(|e| format!("{LIBRARY} did not load: {e}"))?;
    for name in SYMBOLS {
        let c = format!("{name}\0");
        // SAFETY: only the symbol's presence is checked; nothing is called.
        unsafe { lib.get::<*const c_void>(c.as_bytes()) }
            .map_err(|e| format!("{LIBRARY} has no {name}: {e}"))?;
    }
    Ok(RpcMem { _lib: lib })
}

/// The processor extension that states the buffers' kind.
pub(crate) fn extension() -> String {
    match detect() {
        Ok(_) => format!(
            "shared_buffers:rpcmem available ({LIBRARY}); tensors use client buffers (copied)"
        ),
        Err(why) => format!("shared_buffers:none ({why}); tensors use client buffers (copied)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Detection answers the same every time and, on x86-64 (the emulator,
    /// no FastRPC), says why there is no rpcmem.
    #[test]
    fn detection_is_stable_and_absent_off_the_phone() {
        let a = detect().map(|_| ());
        assert_eq!(a, detect().map(|_| ()));
        if cfg!(target_arch = "x86_64") {
            let why = a.unwrap_err();
            assert!(why.contains(LIBRARY), "{why}");
            assert!(extension().starts_with("shared_buffers:none"));
        }
    }
}
