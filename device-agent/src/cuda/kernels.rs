//! Small kernels, written in PTX so that no compiler (nvcc, NVRTC) is
//! needed: the driver compiles PTX itself when the module loads.
//!
//! - `hetero_empty`: does nothing; the unit of launch and sync latency.
//! - `hetero_write_flag`: one thread stores a value into host-mapped memory,
//!   the fallback flag writer where `cuStreamWriteValue32` is refused.
//! - `hetero_spin`: one thread spins on `%globaltimer` for a given number of
//!   nanoseconds, to make a queue busy.
//! - `hetero_touch`: reads a buffer in a grid-stride loop, so that the L2
//!   holds its clean lines and nothing a GEMM read before (a cold-cache
//!   timed run; a write would leave dirty lines for the GEMM to write back).
//! - `hetero_f32_to_f16`, `hetero_f32_to_bf16`: convert `n` values, round to
//!   nearest even, in a grid-stride loop: a GEMM's input arrives as f32 (the
//!   [`Gemm`](crate::Gemm) interface) and is converted on the device, not on
//!   one host thread. bf16 is rounded with integer arithmetic, as `half`
//!   does it (a NaN stays a quiet NaN), because `cvt.rn.bf16.f32` needs
//!   `sm_80` and the module targets `sm_70`.
//!
//! No test here checks the PTX with `ptxas` (a machine without CUDA builds
//! and tests this crate too); `cuModuleLoadData` compiles it on every GPU
//! host, and the cuda tests there exercise each kernel.

use std::ffi::{CString, c_void};
use std::sync::Arc;

use cudarc::driver::{CudaContext, result, sys};

use super::At;
use crate::Result;

/// The PTX of a grid-stride kernel `NAME(src, dst, n)` that converts the
/// `n` f32 values at `src` into 16-bit values at `dst`: `$regs` declares
/// its registers, `$convert` turns the f32 at `[%rd8]` into the 16 bits in
/// `%rs1`, and `$tag` keeps its labels apart from the other kernels'.
macro_rules! f32_to_16bit_kernel {
    ($name:literal, $tag:literal, $regs:literal, $convert:literal $(,)?) => {
        concat!(
            ".visible .entry ",
            $name,
            "(
	.param .u64 ",
            $name,
            "_param_0,
	.param .u64 ",
            $name,
            "_param_1,
	.param .u64 ",
            $name,
            "_param_2
)
{
",
            $regs,
            "

	ld.param.u64 	%rd1, [",
            $name,
            "_param_0];
	ld.param.u64 	%rd2, [",
            $name,
            "_param_1];
	ld.param.u64 	%rd3, [",
            $name,
            "_param_2];
	cvta.to.global.u64 	%rd1, %rd1;
	cvta.to.global.u64 	%rd2, %rd2;
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %ntid.x;
	mov.u32 	%r3, %tid.x;
	mul.wide.u32 	%rd4, %r1, %r2;
	cvt.u64.u32 	%rd5, %r3;
	add.s64 	%rd4, %rd4, %rd5;
	mov.u32 	%r4, %nctaid.x;
	mul.wide.u32 	%rd6, %r4, %r2;
$L_",
            $tag,
            "_loop:
	setp.ge.u64 	%p1, %rd4, %rd3;
	@%p1 bra 	$L_",
            $tag,
            "_done;
	shl.b64 	%rd7, %rd4, 2;
	add.s64 	%rd8, %rd1, %rd7;
",
            $convert,
            "	shl.b64 	%rd9, %rd4, 1;
	add.s64 	%rd10, %rd2, %rd9;
	st.global.b16 	[%rd10], %rs1;
	add.s64 	%rd4, %rd4, %rd6;
	bra.uni 	$L_",
            $tag,
            "_loop;
$L_",
            $tag,
            "_done:
	ret;
}

"
        )
    };
}

/// The PTX of the kernels. PTX 7.0 for `sm_70` and newer; the driver
/// JIT-compiles it for the device at module load.
pub(super) const PTX: &str = concat!(
    r#"
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

"#,
    f32_to_16bit_kernel!(
        "hetero_f32_to_f16",
        "h",
        "	.reg .pred 	%p<2>;
	.reg .b16 	%rs<2>;
	.reg .f32 	%f<2>;
	.reg .b32 	%r<5>;
	.reg .b64 	%rd<11>;",
        "	ld.global.f32 	%f1, [%rd8];
	cvt.rn.f16.f32 	%rs1, %f1;
",
    ),
    f32_to_16bit_kernel!(
        "hetero_f32_to_bf16",
        "b",
        "	.reg .pred 	%p<3>;
	.reg .b16 	%rs<2>;
	.reg .b32 	%r<11>;
	.reg .b64 	%rd<11>;",
        "	ld.global.u32 	%r5, [%rd8];
	// NaN (exponent all ones, mantissa not zero): the high half, quieted.
	and.b32 	%r6, %r5, 2147483647;
	setp.gt.u32 	%p2, %r6, 2139095040;
	shr.u32 	%r7, %r5, 16;
	or.b32 	%r8, %r7, 64;
	// Otherwise round to nearest even: (bits + 0x7fff + lsb) >> 16.
	and.b32 	%r9, %r7, 1;
	add.s32 	%r10, %r5, 32767;
	add.s32 	%r10, %r10, %r9;
	shr.u32 	%r10, %r10, 16;
	selp.b32 	%r10, %r8, %r10, %p2;
	cvt.u16.u32 	%rs1, %r10;
",
    ),
    r#".visible .entry hetero_spin(
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

.visible .entry hetero_touch(
	.param .u64 hetero_touch_param_0,
	.param .u64 hetero_touch_param_1
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<10>;
	.reg .b64 	%rd<8>;

	ld.param.u64 	%rd1, [hetero_touch_param_0];
	ld.param.u64 	%rd2, [hetero_touch_param_1];
	cvta.to.global.u64 	%rd1, %rd1;
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %ntid.x;
	mov.u32 	%r3, %tid.x;
	mul.wide.u32 	%rd3, %r1, %r2;
	cvt.u64.u32 	%rd4, %r3;
	add.s64 	%rd3, %rd3, %rd4;
	mov.u32 	%r4, %nctaid.x;
	mul.wide.u32 	%rd5, %r4, %r2;
	mov.u32 	%r9, 0;
$L_t_loop:
	setp.ge.u64 	%p1, %rd3, %rd2;
	@%p1 bra 	$L_t_done;
	shl.b64 	%rd6, %rd3, 4;
	add.s64 	%rd7, %rd1, %rd6;
	ld.global.v4.u32 	{%r5, %r6, %r7, %r8}, [%rd7];
	xor.b32 	%r9, %r9, %r5;
	xor.b32 	%r9, %r9, %r6;
	xor.b32 	%r9, %r9, %r7;
	xor.b32 	%r9, %r9, %r8;
	add.s64 	%rd3, %rd3, %rd5;
	bra.uni 	$L_t_loop;
$L_t_done:
	// The loads feed a store the buffer's repeated byte pattern never
	// triggers (its words XOR to 0 or the pattern, never 1), so they stay.
	setp.ne.u32 	%p2, %r9, 1;
	@%p2 bra 	$L_t_ret;
	st.global.u32 	[%rd1], %r9;
$L_t_ret:
	ret;
}
"#
);

/// The loaded module and its functions.
pub(super) struct Kernels {
    ctx: Arc<CudaContext>,
    module: sys::CUmodule,
    empty: sys::CUfunction,
    write_flag: sys::CUfunction,
    spin: sys::CUfunction,
    to_f16: sys::CUfunction,
    to_bf16: sys::CUfunction,
    touch: sys::CUfunction,
}

/// The 16-bit element types the conversion kernels write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Half {
    F16,
    Bf16,
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
                get("hetero_f32_to_f16")?,
                get("hetero_f32_to_bf16")?,
                get("hetero_touch")?,
            ))
        })();
        match loaded {
            Ok((empty, write_flag, spin, to_f16, to_bf16, touch)) => Ok(Kernels {
                ctx: ctx.clone(),
                module,
                empty,
                write_flag,
                spin,
                to_f16,
                to_bf16,
                touch,
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

    /// Converts `n` f32 values at `src` into `n` 16-bit values at `dst`
    /// (both device memory), rounding to nearest even.
    pub(super) fn convert(
        &self,
        stream: sys::CUstream,
        src: sys::CUdeviceptr,
        dst: sys::CUdeviceptr,
        n: usize,
        to: Half,
        id: &str,
    ) -> Result<()> {
        let (blocks, threads) = grid_stride(n as u64);
        let (mut src, mut dst, mut n) = (src, dst, n as u64);
        let mut params = [
            &mut src as *mut sys::CUdeviceptr as *mut c_void,
            &mut dst as *mut sys::CUdeviceptr as *mut c_void,
            &mut n as *mut u64 as *mut c_void,
        ];
        let (f, name) = match to {
            Half::F16 => (self.to_f16, "cuLaunchKernel(hetero_f32_to_f16)"),
            Half::Bf16 => (self.to_bf16, "cuLaunchKernel(hetero_f32_to_bf16)"),
        };
        // SAFETY: the parameters match the kernels' (u64, u64, u64)
        // signature; the caller passes device buffers of n f32 and n 16-bit
        // values.
        unsafe { result::launch_kernel(f, (blocks, 1, 1), (threads, 1, 1), 0, stream, &mut params) }
            .at(id, name)
    }

    /// Reads the `bytes` (a multiple of 16) of device memory at `src`,
    /// whose bytes must all be equal (the kernel stores nothing then).
    pub(super) fn touch(
        &self,
        stream: sys::CUstream,
        src: sys::CUdeviceptr,
        bytes: usize,
        id: &str,
    ) -> Result<()> {
        let n = (bytes / 16) as u64;
        let (blocks, threads) = grid_stride(n);
        let (mut src, mut n) = (src, n);
        let mut params = [
            &mut src as *mut sys::CUdeviceptr as *mut c_void,
            &mut n as *mut u64 as *mut c_void,
        ];
        // SAFETY: the parameters match the kernel's (u64, u64) signature;
        // the caller passes a device buffer of at least `bytes`, 16-byte
        // aligned (a `cuMemAlloc` allocation).
        unsafe {
            result::launch_kernel(
                self.touch,
                (blocks, 1, 1),
                (threads, 1, 1),
                0,
                stream,
                &mut params,
            )
        }
        .at(id, "cuLaunchKernel(hetero_touch)")
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

/// Blocks and threads per block for a grid-stride kernel over `items`:
/// enough blocks to fill any current GPU, each thread taking several items
/// of the largest buffers.
fn grid_stride(items: u64) -> (u32, u32) {
    const THREADS: u32 = 256;
    let blocks = items.div_ceil(THREADS as u64).clamp(1, 4096) as u32;
    (blocks, THREADS)
}

impl Drop for Kernels {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: loaded in this context, unloaded once.
            let _ = unsafe { result::module::unload(self.module) };
        }
    }
}
