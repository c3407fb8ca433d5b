//! Three tiny kernels, written in PTX so that no compiler (nvcc, NVRTC) is
//! needed: the driver compiles PTX itself when the module loads.
//!
//! - `hetero_empty`: does nothing; the unit of launch and sync latency.
//! - `hetero_write_flag`: one thread stores a value into host-mapped memory,
//!   the fallback flag writer where `cuStreamWriteValue32` is refused.
//! - `hetero_spin`: one thread spins on `%globaltimer` for a given number of
//!   nanoseconds, to make a queue busy.

use std::ffi::{CString, c_void};
use std::sync::Arc;

use cudarc::driver::{CudaContext, result, sys};

use super::At;
use crate::Result;

/// The PTX of the three kernels. PTX 7.0 for `sm_70` and newer; the driver
/// JIT-compiles it for the device at module load.
pub(super) const PTX: &str = r#"
.version 7.0
.target sm_70
.address_size 64

.visible .entry hetero_empty()
{
	ret;
}

.visible .entry hetero_write_flag(
	.param .u64 hetero_write_flag_param_0,
	.param .u32 hetero_write_flag_param_1
)
{
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<2>;

	ld.param.u64 	%rd1, [hetero_write_flag_param_0];
	ld.param.u32 	%r1, [hetero_write_flag_param_1];
	membar.sys;
	st.volatile.global.u32 	[%rd1], %r1;
	membar.sys;
	ret;
}

.visible .entry hetero_spin(
	.param .u64 hetero_spin_param_0
)
{
	.reg .pred 	%p<2>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [hetero_spin_param_0];
	mov.u64 	%rd2, %globaltimer;
$L_spin:
	mov.u64 	%rd3, %globaltimer;
	sub.s64 	%rd4, %rd3, %rd2;
	setp.lt.u64 	%p1, %rd4, %rd1;
	@%p1 bra 	$L_spin;
	ret;
}
"#;

/// The loaded module and its functions.
pub(super) struct Kernels {
    ctx: Arc<CudaContext>,
    module: sys::CUmodule,
    empty: sys::CUfunction,
    write_flag: sys::CUfunction,
    spin: sys::CUfunction,
}

// SAFETY: module and function handles are context-wide and may be used from
// any thread that makes the context current (every launch does).
unsafe impl Send for Kernels {}
// SAFETY: launching through a shared handle is thread-safe in the driver.
unsafe impl Sync for Kernels {}

impl Kernels {
    /// Loads [`PTX`] into the context.
    pub(super) fn load(ctx: &Arc<CudaContext>, id: &str) -> Result<Kernels> {
        ctx.bind_to_thread().at(id, "cuCtxSetCurrent")?;
        let ptx = CString::new(PTX).expect("PTX has no NUL byte");
        // SAFETY: `ptx` is a NUL-terminated PTX image that outlives the call.
        let module = unsafe { result::module::load_data(ptx.as_ptr() as *const c_void) }
            .at(id, "cuModuleLoadData(PTX of the helper kernels)")?;
        let get = |name: &str| {
            let cname = CString::new(name).expect("no NUL");
            // SAFETY: `module` was just loaded and is not unloaded here.
            unsafe { result::module::get_function(module, cname) }
                .at(id, &format!("cuModuleGetFunction({name})"))
        };
        let loaded = (|| {
            Ok((
                get("hetero_empty")?,
                get("hetero_write_flag")?,
                get("hetero_spin")?,
            ))
        })();
        match loaded {
            Ok((empty, write_flag, spin)) => Ok(Kernels {
                ctx: ctx.clone(),
                module,
                empty,
                write_flag,
                spin,
            }),
            Err(e) => {
                // SAFETY: loaded above, unloaded once.
                let _ = unsafe { result::module::unload(module) };
                Err(e)
            }
        }
    }

    /// Launches the empty kernel (one thread).
    pub(super) fn empty(&self, stream: sys::CUstream, id: &str) -> Result<()> {
        // SAFETY: a kernel without parameters, launched on a live stream.
        unsafe { result::launch_kernel(self.empty, (1, 1, 1), (1, 1, 1), 0, stream, &mut []) }
            .at(id, "cuLaunchKernel(hetero_empty)")
    }

    /// Launches one thread that writes `value` to the 32-bit word at `dptr`.
    pub(super) fn write_flag(
        &self,
        stream: sys::CUstream,
        dptr: sys::CUdeviceptr,
        value: u32,
        id: &str,
    ) -> Result<()> {
        let mut addr = dptr;
        let mut value = value;
        let mut params = [
            &mut addr as *mut sys::CUdeviceptr as *mut c_void,
            &mut value as *mut u32 as *mut c_void,
        ];
        // SAFETY: the parameters match the kernel's (u64, u32) signature and
        // are copied by the driver at launch; `dptr` is device-accessible.
        unsafe {
            result::launch_kernel(
                self.write_flag,
                (1, 1, 1),
                (1, 1, 1),
                0,
                stream,
                &mut params,
            )
        }
        .at(id, "cuLaunchKernel(hetero_write_flag)")
    }

    /// Launches one thread that spins for `ns` nanoseconds.
    pub(super) fn spin(&self, stream: sys::CUstream, ns: u64, id: &str) -> Result<()> {
        let mut ns = ns;
        let mut params = [&mut ns as *mut u64 as *mut c_void];
        // SAFETY: the parameter matches the kernel's (u64) signature.
        unsafe { result::launch_kernel(self.spin, (1, 1, 1), (1, 1, 1), 0, stream, &mut params) }
            .at(id, "cuLaunchKernel(hetero_spin)")
    }
}

impl Drop for Kernels {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: loaded in this context, unloaded once.
            let _ = unsafe { result::module::unload(self.module) };
        }
    }
}
