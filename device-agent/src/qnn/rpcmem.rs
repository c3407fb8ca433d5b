//! Shared buffers: rpcmem memory registered with the HTP.
//!
//! On a Snapdragon phone, `libcdsprpc.so` (FastRPC) allocates ION/DMA-BUF
//! memory that both the CPU and the HTP map (`rpcmem_alloc`,
//! `rpcmem_to_fd`, `rpcmem_free`). Registered with `QnnMem_register` as an
//! ION memory descriptor, it becomes a memory handle; a graph tensor whose
//! `memType` is `MEMHANDLE` is then read and written by the HTP in place.
//! With ordinary client buffers the HTP backend copies every input into its
//! own rpcmem before a run and every output out after it.
//!
//! [`detect`] opens `libcdsprpc.so` and resolves the three functions, as
//! the QNN HTP shared-buffer tutorial does; [`Runtime::open`] then probes
//! one registration. Each prepared graph allocates and registers its input
//! and output tensors ([`SharedBuf::register`]) and falls back to client
//! buffers, saying why, wherever a step is refused. The x86-64 emulator
//! has no FastRPC: there detection fails and every tensor is a client
//! buffer.
//!
//! [`Runtime::open`]: super::runtime::Runtime::open

use std::ffi::{OsStr, c_void};
use std::ptr;
use std::sync::OnceLock;

use super::ffi::{self, Handle};
use super::runtime::QnnLib;

/// The FastRPC library that offers rpcmem.
pub const LIBRARY: &str = "libcdsprpc.so";

/// `RPCMEM_HEAP_ID_SYSTEM`: the system heap, which the HTP can map.
const HEAP_ID_SYSTEM: i32 = 25;
/// `RPCMEM_DEFAULT_FLAGS`: cached memory.
const DEFAULT_FLAGS: u32 = 1;

type AllocFn = unsafe extern "C" fn(heap_id: i32, flags: u32, size: i32) -> *mut c_void;
type FreeFn = unsafe extern "C" fn(p: *mut c_void);
type ToFdFn = unsafe extern "C" fn(p: *mut c_void) -> i32;

/// A loaded rpcmem library with its three functions.
pub(crate) struct RpcMem {
    _lib: libloading::Library,
    alloc: AllocFn,
    free: FreeFn,
    to_fd: ToFdFn,
    /// What was loaded (a name for the linker's search, or a path).
    pub name: String,
}

// SAFETY: plain function pointers into a library that is never unloaded
// (every RpcMem is 'static); rpcmem's functions are thread-safe.
unsafe impl Send for RpcMem {}
unsafe impl Sync for RpcMem {}

/// Loads `libcdsprpc.so` by name (the dynamic linker's search: on Android
/// `/vendor/lib64` holds it) and looks up the rpcmem functions, once per
/// process. `Err` says why there are no shared buffers.
pub(crate) fn detect() -> Result<&'static RpcMem, String> {
    static FOUND: OnceLock<Result<RpcMem, String>> = OnceLock::new();
    FOUND
        .get_or_init(|| load(OsStr::new(LIBRARY)))
        .as_ref()
        .map_err(Clone::clone)
}

/// Loads an rpcmem library from `path` (a name or a path) and keeps it
/// for the life of the process (tests load a stand-in library).
#[cfg(test)]
pub(crate) fn load_leaked(path: &OsStr) -> Result<&'static RpcMem, String> {
    load(path).map(|r| &*Box::leak(Box::new(r)))
}

fn load(path: &OsStr) -> Result<RpcMem, String> {
    let name = path.to_string_lossy().into_owned();
    // SAFETY: loading a vendor library runs its initialisers; FastRPC's are
    // those of any QNN or Hexagon client on the phone.
    let lib = unsafe { libloading::Library::new(path) }
        .map_err(|e| format!("{name} did not load: {e}"))?;
    // SAFETY: the symbols have rpcmem's documented signatures.
    let (alloc, free, to_fd) = unsafe {
        let sym = |s: &str| format!("{name} has no {s}");
        (
            *lib.get::<AllocFn>(b"rpcmem_alloc\0")
                .map_err(|e| format!("{}: {e}", sym("rpcmem_alloc")))?,
            *lib.get::<FreeFn>(b"rpcmem_free\0")
                .map_err(|e| format!("{}: {e}", sym("rpcmem_free")))?,
            *lib.get::<ToFdFn>(b"rpcmem_to_fd\0")
                .map_err(|e| format!("{}: {e}", sym("rpcmem_to_fd")))?,
        )
    };
    Ok(RpcMem {
        _lib: lib,
        alloc,
        free,
        to_fd,
        name,
    })
}

/// One rpcmem allocation registered with a context: the bytes of one
/// tensor, which the HTP reads or writes in place.
pub(crate) struct SharedBuf {
    ptr: *mut u8,
    len: usize,
    rpc: &'static RpcMem,
    lib: &'static QnnLib,
    /// The memory handle `QnnMem_register` returned.
    pub handle: Handle,
}

// SAFETY: owned memory and a handle that is not bound to a thread; only
// one owner touches the bytes at a time.
unsafe impl Send for SharedBuf {}

impl SharedBuf {
    /// Allocates `len` bytes of rpcmem and registers them with `context` as
    /// an ION tensor of `dims` and `data_type`. `Err` says which step was
    /// refused; nothing is left allocated then.
    pub fn register(
        rpc: &'static RpcMem,
        lib: &'static QnnLib,
        context: Handle,
        dims: &[u32],
        data_type: u32,
        len: usize,
    ) -> Result<SharedBuf, String> {
        let size = i32::try_from(len).map_err(|_| format!("{len} bytes is over rpcmem's 2 GiB"))?;
        let register = lib
            .api()
            .mem_register
            .ok_or("the library has no memRegister")?;
        // SAFETY: rpcmem_alloc returns null or `size` bytes.
        let p = unsafe { (rpc.alloc)(HEAP_ID_SYSTEM, DEFAULT_FLAGS, size) };
        if p.is_null() {
            return Err(format!("rpcmem_alloc({len}) returned null"));
        }
        // From here on dropping `buf` frees the allocation (and deregisters
        // a handle once there is one).
        let mut buf = SharedBuf {
            ptr: p.cast(),
            len,
            rpc,
            lib,
            handle: ptr::null_mut(),
        };
        // SAFETY: `p` came from rpcmem_alloc.
        let fd = unsafe { (rpc.to_fd)(p) };
        if fd < 0 {
            return Err(format!("rpcmem_to_fd returned {fd}"));
        }
        let mut dims = dims.to_vec();
        let desc = ffi::MemDescriptor::ion(fd, &mut dims, data_type);
        let mut handle: Handle = ptr::null_mut();
        // SAFETY: one descriptor whose shape outlives the call; one handle slot.
        let err = unsafe { register(context, &desc, 1, &mut handle) };
        if err != ffi::QNN_SUCCESS {
            return Err(lib.describe("memRegister", err));
        }
        buf.handle = handle;
        // SAFETY: `len` bytes owned by `buf`; zeroed like a fresh Vec.
        unsafe { ptr::write_bytes(buf.ptr, 0, len) };
        Ok(buf)
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes owned by self, alive until drop.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `bytes`, and `&mut self` is the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for SharedBuf {
    /// Deregisters the handle (before its context is freed: the owner
    /// drops its buffers first), then frees the memory.
    fn drop(&mut self) {
        if !self.handle.is_null() {
            if let Some(dereg) = self.lib.api().mem_de_register {
                // SAFETY: a handle from memRegister, deregistered once.
                unsafe { dereg(&self.handle, 1) };
            }
        }
        // SAFETY: allocated by this library's rpcmem_alloc, freed once.
        unsafe { (self.rpc.free)(self.ptr.cast()) };
    }
}

/// The processor extension that states the buffers' kind.
pub(crate) fn extension(shared: &Result<&'static RpcMem, String>) -> String {
    match shared {
        Ok(r) => format!(
            "shared_buffers:rpcmem ({}); graph inputs and outputs are registered memory \
             handles, not copied",
            r.name
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
            assert!(extension(&Err(why)).starts_with("shared_buffers:none"));
        }
    }

    #[test]
    fn a_library_without_rpcmem_is_refused_by_symbol() {
        // The C library is loaded in every test process and has no rpcmem.
        let why = load(OsStr::new("libc.so.6")).err().unwrap();
        assert!(why.contains("has no rpcmem_alloc"), "{why}");
    }

    /// The ION descriptor carries the fd, shape and data type where
    /// `QnnMem_register` reads them.
    #[test]
    fn ion_descriptor_is_built_from_the_tensor() {
        let mut dims = vec![3u32, 5];
        let d = ffi::MemDescriptor::ion(17, &mut dims, ffi::DT_FLOAT_16);
        assert_eq!(d.mem_type, ffi::MEM_TYPE_ION);
        assert_eq!(d.info.fd, 17);
        assert_eq!(d.data_type, ffi::DT_FLOAT_16);
        assert_eq!(d.shape.num_dim, 2);
        // SAFETY: points at `dims`, alive here.
        let shape = unsafe { std::slice::from_raw_parts(d.shape.dim_size, 2) };
        assert_eq!(shape, &[3, 5]);
        assert!(d.shape.shape_config.is_null());
    }
}
