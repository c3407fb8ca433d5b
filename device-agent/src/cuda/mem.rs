//! Owned device and page-locked host allocations, freed on drop.
//!
//! The backend uses cudarc's raw `result` layer for memory rather than its
//! safe `CudaSlice`: the safe layer records events around every use once a
//! context has several streams, which would add work to the very launches
//! that the agent times.

use std::sync::Arc;

use cudarc::driver::{CudaContext, result, sys};

use super::At;
use crate::Result;

/// Device memory from `cuMemAlloc`.
pub(super) struct DeviceBuf {
    ctx: Arc<CudaContext>,
    ptr: sys::CUdeviceptr,
    bytes: usize,
}

impl DeviceBuf {
    /// Allocates `bytes` (at least one) of device memory.
    pub(super) fn new(ctx: &Arc<CudaContext>, bytes: usize, id: &str) -> Result<DeviceBuf> {
        ctx.bind_to_thread().at(id, "cuCtxSetCurrent")?;
        // SAFETY: the context is current; the size is positive.
        let ptr = unsafe { result::malloc_sync(bytes.max(1)) }
            .at(id, &format!("cuMemAlloc({bytes} bytes)"))?;
        Ok(DeviceBuf {
            ctx: ctx.clone(),
            ptr,
            bytes,
        })
    }

    /// The device address.
    pub(super) fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// Size in bytes.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for DeviceBuf {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated by `cuMemAlloc` in this context, freed once.
            // Errors cannot be reported from drop; the context records them.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

/// Page-locked host memory from `cuMemHostAlloc`.
pub(super) struct PinnedBuf {
    ctx: Arc<CudaContext>,
    ptr: *mut u8,
    bytes: usize,
}

// SAFETY: the allocation is owned by this value alone; moving it between
// threads moves the only access to it.
unsafe impl Send for PinnedBuf {}

impl PinnedBuf {
    /// Allocates `bytes` (at least one) of page-locked memory with
    /// `cuMemHostAlloc` flags (`CU_MEMHOSTALLOC_*`).
    pub(super) fn new(
        ctx: &Arc<CudaContext>,
        bytes: usize,
        flags: u32,
        id: &str,
    ) -> Result<PinnedBuf> {
        ctx.bind_to_thread().at(id, "cuCtxSetCurrent")?;
        // SAFETY: the context is current; the size is positive.
        let ptr = unsafe { result::malloc_host(bytes.max(1), flags) }
            .at(id, &format!("cuMemHostAlloc({bytes} bytes)"))?;
        // Page-locked memory is page aligned; zero it so that no read ever
        // sees uninitialised bytes.
        // SAFETY: `ptr` points to at least `bytes` writable bytes.
        unsafe { std::ptr::write_bytes(ptr as *mut u8, 0, bytes.max(1)) };
        Ok(PinnedBuf {
            ctx: ctx.clone(),
            ptr: ptr as *mut u8,
            bytes,
        })
    }

    /// The host address.
    pub(super) fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The whole buffer as elements of `T` (`f32`, `f16`, `bf16`, `u8`).
    pub(super) fn as_slice<T: Pod>(&self) -> &[T] {
        debug_assert_eq!(self.ptr as usize % align_of::<T>(), 0);
        // SAFETY: the allocation is page aligned, initialised (zeroed at
        // allocation), and `T` is plain data valid for any bits.
        unsafe { std::slice::from_raw_parts(self.ptr as *const T, self.bytes / size_of::<T>()) }
    }

    /// The whole buffer as mutable elements of `T`.
    pub(super) fn as_mut_slice<T: Pod>(&mut self) -> &mut [T] {
        debug_assert_eq!(self.ptr as usize % align_of::<T>(), 0);
        // SAFETY: as in `as_slice`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut T, self.bytes / size_of::<T>()) }
    }
}

impl Drop for PinnedBuf {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated by `cuMemHostAlloc`, freed once.
            let _ = unsafe { result::free_host(self.ptr as *mut std::ffi::c_void) };
        }
    }
}

/// Page-locked host memory handed to callers as [`HostMem`](crate::HostMem):
/// portable (page-locked for every context), cached (the host reads it).
pub(super) struct PinnedHost {
    buf: PinnedBuf,
    len: usize,
}

impl PinnedHost {
    /// `len` zeroed f32 values.
    pub(super) fn new(ctx: &Arc<CudaContext>, len: usize, id: &str) -> Result<PinnedHost> {
        let buf = PinnedBuf::new(ctx, len * 4, sys::CU_MEMHOSTALLOC_PORTABLE, id)?;
        Ok(PinnedHost { buf, len })
    }
}

impl crate::HostMem for PinnedHost {
    fn as_slice(&self) -> &[f32] {
        &self.buf.as_slice::<f32>()[..self.len]
    }
    fn as_mut_slice(&mut self) -> &mut [f32] {
        let len = self.len;
        &mut self.buf.as_mut_slice::<f32>()[..len]
    }
}

/// Plain-old-data element types that any bit pattern makes valid.
///
/// # Safety
/// Implement only for types with no padding and no invalid bit patterns.
pub(super) unsafe trait Pod: Copy {}
// SAFETY: primitive numbers and the `half` types are valid for any bits.
unsafe impl Pod for u8 {}
// SAFETY: as above.
unsafe impl Pod for u32 {}
// SAFETY: as above.
unsafe impl Pod for f32 {}
// SAFETY: as above.
unsafe impl Pod for half::f16 {}
// SAFETY: as above.
unsafe impl Pod for half::bf16 {}

/// Page-locked host memory that the device reads and writes in place
/// (`CU_MEMHOSTALLOC_DEVICEMAP`), at the address [`MappedBuf::device_ptr`]:
/// a kernel's loads and stores cross PCIe, with no copy engine involved.
pub(super) struct MappedBuf {
    host: PinnedBuf,
    dptr: sys::CUdeviceptr,
}

impl MappedBuf {
    /// Allocates `bytes` of mapped memory, zeroed; `write_combined` where
    /// the host only writes it (faster for the device to read, very slow
    /// for the host to).
    pub(super) fn new(
        ctx: &Arc<CudaContext>,
        bytes: usize,
        write_combined: bool,
        id: &str,
    ) -> Result<MappedBuf> {
        let mut flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        if write_combined {
            flags |= sys::CU_MEMHOSTALLOC_WRITECOMBINED;
        }
        let host = PinnedBuf::new(ctx, bytes, flags, id)?;
        let mut dptr: sys::CUdeviceptr = 0;
        // SAFETY: `host` was allocated with DEVICEMAP in the current context.
        unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut dptr, host.as_ptr() as *mut _, 0)
                .result()
                .at(id, "cuMemHostGetDevicePointer")?;
        }
        Ok(MappedBuf { host, dptr })
    }

    /// The device address of the buffer.
    pub(super) fn device_ptr(&self) -> sys::CUdeviceptr {
        self.dptr
    }

    /// The host side, as elements of `T`.
    pub(super) fn as_slice<T: Pod>(&self) -> &[T] {
        self.host.as_slice()
    }

    /// The host side, mutable.
    pub(super) fn as_mut_slice<T: Pod>(&mut self) -> &mut [T] {
        self.host.as_mut_slice()
    }
}

/// A 32-bit completion flag in page-locked host memory that the device can
/// write (`CU_MEMHOSTALLOC_DEVICEMAP`): the device writes a sequence number
/// after a kernel, the host spins on it.
pub(super) struct MappedFlag {
    buf: MappedBuf,
}

impl MappedFlag {
    /// Allocates a mapped flag, initially zero.
    pub(super) fn new(ctx: &Arc<CudaContext>, id: &str) -> Result<MappedFlag> {
        Ok(MappedFlag {
            buf: MappedBuf::new(ctx, 64, false, id)?,
        })
    }

    /// The device address of the flag.
    pub(super) fn device_ptr(&self) -> sys::CUdeviceptr {
        self.buf.device_ptr()
    }

    /// Writes the flag from the host, for the device to read (a stream
    /// waiting on it with `cuStreamWaitValue32`).
    #[inline]
    pub(super) fn store(&self, value: u32) {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        // SAFETY: the flag is 4 aligned bytes inside a live allocation; the
        // device reads it concurrently, hence the volatile write.
        unsafe { std::ptr::write_volatile(self.buf.host.as_ptr() as *mut u32, value) }
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }

    /// Reads the flag as the device last wrote it.
    #[inline]
    pub(super) fn load(&self) -> u32 {
        // SAFETY: the flag is 4 aligned bytes inside a live allocation; the
        // device writes it concurrently, hence the volatile read.
        unsafe { std::ptr::read_volatile(self.buf.host.as_ptr() as *const u32) }
    }
}
