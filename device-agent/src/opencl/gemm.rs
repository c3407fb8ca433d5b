//! A GEMM prepared on one OpenCL device.

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};
use std::time::{Duration, Instant};

use hetero_plan::{DType, OperandOrder};
use opencl3::event::{CL_COMPLETE, Event};
use opencl3::kernel::Kernel;
use opencl3::memory::{
    Buffer, CL_MAP_READ, CL_MAP_WRITE, CL_MAP_WRITE_INVALIDATE_REGION, CL_MEM_ALLOC_HOST_PTR,
    CL_MEM_COPY_HOST_PTR, CL_MEM_READ_ONLY, CL_MEM_READ_WRITE, CL_MEM_WRITE_ONLY, ClMem,
};
use opencl3::program::Program;
use opencl3::types::{CL_BLOCKING, cl_int, cl_map_flags, cl_mem, cl_uint};

use super::tune::Family;
use super::{ClResultExt, DeviceCtx, Tile};
use crate::convert::{FromF32, transpose_convert};
use crate::{Error, Gemm, GemmSpec, Result, SyncMode, Timed};

/// How [`SyncMode::Poll`] waits ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PollStats {
    /// Completion seen on the host-visible flag.
    pub by_flag: u64,
    /// The flag was not visible yet, and the event status said complete
    /// (checked every [`EVENT_CHECK_EVERY`] spins as a safety net).
    pub by_event: u64,
    /// The device computes on the host's own cores (PoCL): after the
    /// predicted sleep the host waited in `clFinish` instead of spinning,
    /// which would take a core from the kernel it waits for.
    pub by_wait: u64,
}

/// How many flag reads between two event-status checks while polling, as
/// long as the flag has not been found invisible on the device (then the
/// event status is checked on every spin).
pub const EVENT_CHECK_EVERY: u32 = 4096;

/// The mapped completion flag. Raw pointers are not `Send`; this one is owned
/// by its [`ClGemm`] and only touched through `&mut self`.
struct FlagPtr(*mut u32);
// SAFETY: the pointer is the mapping of a buffer this ClGemm owns; it is
// read and written only through `&mut ClGemm`, from one thread at a time.
unsafe impl Send for FlagPtr {}

struct Pending {
    start: Instant,
    gemm: Event,
    flag: Event,
    seq: u32,
}

/// A GEMM prepared on an OpenCL device: weights resident, input and output
/// in `CL_MEM_ALLOC_HOST_PTR` buffers reached through map/unmap.
pub struct ClGemm {
    dev: Arc<DeviceCtx>,
    spec: GemmSpec,
    tile: Tile,
    kernel: Kernel,
    flag_kernel: Kernel,
    input: Buffer<u8>,
    output: Buffer<u8>,
    _weights: Buffer<u8>,
    flag: Buffer<u32>,
    flag_ptr: FlagPtr,
    seq: u32,
    global: [usize; 2],
    local: [usize; 2],
    /// How the input `A[M,K]` is laid out on the device.
    input_layout: Layout,
    /// Row pitch of C, elements.
    ldc: usize,
    pending: Option<Pending>,
    poll: PollStats,
}

/// An element type as stored on the device.
trait Elem: FromF32 {
    fn to_f32(self) -> f32;
}

impl Elem for f32 {
    fn to_f32(self) -> f32 {
        self
    }
}

impl Elem for half::f16 {
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }
}

const BLOCK: usize = 32;

/// How one operand sits in its device buffer: `rows` rows `pitch` elements
/// apart, holding the host matrix as is or transposed.
#[derive(Debug, Clone, Copy)]
struct Layout {
    transpose: bool,
    rows: usize,
    pitch: usize,
}

/// A row pitch for `cols` elements: a multiple of `align`, and never a
/// multiple of 256 bytes. Such a pitch maps a walk down a column onto a few
/// cache sets: at 1024³ on PoCL that made the direct kernel 4× slower per
/// flop than at 512³. 64 more bytes (a multiple of every vector width)
/// spread it over all sets.
fn padded(cols: usize, align: usize, elem: usize) -> usize {
    let p = cols.next_multiple_of(align);
    if (p * elem) % 256 == 0 {
        p + 64 / elem
    } else {
        p
    }
}

/// Writes `src` (`rows×cols` row-major) into `dst` as is, or transposed
/// (`cols×rows`), converting to `E`; `dst`'s rows are `pitch` elements
/// apart and the padding past the row is zeroed. Transposes through
/// [`transpose_convert`].
fn store<E: Elem>(
    dst: &mut [E],
    src: &[f32],
    rows: usize,
    cols: usize,
    transpose: bool,
    pitch: usize,
) {
    let (drows, dcols) = if transpose {
        (cols, rows)
    } else {
        (rows, cols)
    };
    debug_assert!(pitch >= dcols && dst.len() >= drows * pitch);
    if pitch > dcols {
        for r in 0..drows {
            dst[r * pitch + dcols..(r + 1) * pitch].fill(E::from_f32(0.0));
        }
    }
    if !transpose {
        for r in 0..rows {
            let d = &mut dst[r * pitch..r * pitch + cols];
            for (d, s) in d.iter_mut().zip(&src[r * cols..(r + 1) * cols]) {
                *d = E::from_f32(*s);
            }
        }
        return;
    }
    transpose_convert(src, rows, cols, pitch, dst);
}

/// Reads `dst` (`rows×cols` row-major f32) from `src`, whose rows are
/// `pitch` apart and which holds `dst` as is, or transposed (`cols×rows`).
fn load<E: Elem>(
    dst: &mut [f32],
    src: &[E],
    rows: usize,
    cols: usize,
    transpose: bool,
    pitch: usize,
) {
    if !transpose {
        for r in 0..rows {
            let s = &src[r * pitch..r * pitch + cols];
            for (d, s) in dst[r * cols..(r + 1) * cols].iter_mut().zip(s) {
                *d = s.to_f32();
            }
        }
        return;
    }
    for r0 in (0..rows).step_by(BLOCK) {
        for c0 in (0..cols).step_by(BLOCK) {
            for r in r0..(r0 + BLOCK).min(rows) {
                for c in c0..(c0 + BLOCK).min(cols) {
                    dst[r * cols + c] = src[c * pitch + r].to_f32();
                }
            }
        }
    }
}

fn event_us(ev: &Event) -> std::result::Result<f64, opencl3::error_codes::ClError> {
    let start = ev.profiling_command_start()?;
    let end = ev.profiling_command_end()?;
    Ok(end.saturating_sub(start) as f64 / 1000.0)
}

/// Where a GEMM's operands sit on the device. The kernel computes
/// `C[R,S] = X[R,K]·Y[K,S]`; X rows are `ldx` apart, C rows `ldc`; Y is K
/// rows `ldy` apart, or for `Dot` stored transposed, S rows of K. `aw`:
/// X = A, Y = W (Wᵀ for Dot); `transposed`: X = Wᵀ, Y = Aᵀ (A for Dot).
struct Geometry {
    r: usize,
    s: usize,
    k: usize,
    ldx: usize,
    ldy: usize,
    ldc: usize,
    /// Whether X is the weight (`transposed`) rather than the input.
    weight_is_x: bool,
    input: Layout,
    weight: Layout,
}

impl Geometry {
    fn new(spec: &GemmSpec, tile: &Tile) -> Geometry {
        let (m, k, n) = spec.shape.mkn();
        let (m, k, n) = (m as usize, k as usize, n as usize);
        let elem = elem_size(spec.dtype);
        let wt = spec.order == OperandOrder::Transposed;
        let dot = tile.family == Family::Dot;
        let (r, s) = if wt { (n, m) } else { (m, n) };
        let ldx = padded(k, tile.k_align(), elem);
        let ldc = padded(s, tile.col_align(), elem);
        let (y_rows, ldy) = if dot {
            (s, padded(k, tile.k_align(), elem))
        } else {
            (k, padded(s, tile.col_align(), elem))
        };
        let x = Layout {
            transpose: false,
            rows: r,
            pitch: ldx,
        };
        let y = Layout {
            transpose: false,
            rows: y_rows,
            pitch: ldy,
        };
        let (input, weight) = if wt {
            (
                Layout {
                    transpose: !dot,
                    ..y
                },
                Layout {
                    transpose: true,
                    ..x
                },
            )
        } else {
            (
                x,
                Layout {
                    transpose: dot,
                    ..y
                },
            )
        };
        Geometry {
            r,
            s,
            k,
            ldx,
            ldy,
            ldc,
            weight_is_x: wt,
            input,
            weight,
        }
    }

    /// The global work size of the `gemm` kernel for `tile`.
    fn global(&self, tile: &Tile) -> [usize; 2] {
        let local = tile.local();
        [
            self.s.div_ceil(tile.ts as usize) * local[0],
            self.r.div_ceil(tile.tr as usize) * local[1],
        ]
    }
}

/// A device buffer of `len` elements of `T`, with no host pointer.
fn device_buffer<T>(
    dev: &DeviceCtx,
    flags: opencl3::memory::cl_mem_flags,
    len: usize,
    what: &str,
) -> Result<Buffer<T>> {
    // SAFETY: no host pointer; the callers' sizes are nonzero.
    unsafe { Buffer::<T>::create(&dev.context, flags, len, ptr::null_mut()) }
        .cl(&dev.id, &format!("clCreateBuffer({what})"))
}

/// The weights `W[K,N]` converted (and transposed where the layout says)
/// once, in a resident read-only buffer.
fn upload_weights(
    dev: &DeviceCtx,
    spec: &GemmSpec,
    weights: &[f32],
    wl: Layout,
) -> Result<Buffer<u8>> {
    let (_, k, n) = spec.shape.mkn();
    let (k, n) = (k as usize, n as usize);
    let mut wbytes = vec![0u8; wl.rows * wl.pitch * elem_size(spec.dtype)];
    with_elems_mut(spec.dtype, &mut wbytes, |dst| match dst {
        ElemsMut::F32(d) => store(d, weights, k, n, wl.transpose, wl.pitch),
        ElemsMut::F16(d) => store(d, weights, k, n, wl.transpose, wl.pitch),
    });
    // SAFETY: the host pointer is valid for the buffer's size and is
    // copied (COPY_HOST_PTR) before create returns.
    unsafe {
        Buffer::<u8>::create(
            &dev.context,
            CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
            wbytes.len(),
            wbytes.as_mut_ptr().cast::<c_void>(),
        )
    }
    .cl(&dev.id, "clCreateBuffer(weights)")
}

/// Sets the arguments of `gemm` (kernels.cl) over the three buffers.
fn set_gemm_args(
    kernel: &Kernel,
    g: &Geometry,
    weights: &Buffer<u8>,
    input: &Buffer<u8>,
    output: &Buffer<u8>,
    id: &str,
) -> Result<()> {
    let (xbuf, ybuf) = if g.weight_is_x {
        (weights.get(), input.get())
    } else {
        (input.get(), weights.get())
    };
    let ints: [(&str, usize); 6] = [
        ("R", g.r),
        ("S", g.s),
        ("K", g.k),
        ("ldx", g.ldx),
        ("ldy", g.ldy),
        ("ldc", g.ldc),
    ];
    // SAFETY: argument indices and types match `gemm` in kernels.cl.
    unsafe {
        for (i, (name, v)) in ints.iter().enumerate() {
            kernel
                .set_arg(i as cl_uint, &(*v as cl_int))
                .cl(id, &format!("clSetKernelArg({name})"))?;
        }
        kernel.set_arg(6, &xbuf).cl(id, "clSetKernelArg(X)")?;
        kernel.set_arg(7, &ybuf).cl(id, "clSetKernelArg(Y)")?;
        kernel
            .set_arg(8, &output.get())
            .cl(id, "clSetKernelArg(C)")?;
    }
    Ok(())
}

/// The `set_flag` kernel (util.cl) over `flag`, writing 0 until a launch
/// sets its value.
fn flag_kernel(dev: &DeviceCtx, flag: &Buffer<u32>) -> Result<Kernel> {
    let id = dev.id.as_str();
    let k = Kernel::create(&dev.util, "set_flag").cl(id, "clCreateKernel(set_flag)")?;
    // SAFETY: argument indices and types match `set_flag` in util.cl.
    unsafe {
        k.set_arg(0, &flag.get()).cl(id, "clSetKernelArg(flag)")?;
        k.set_arg(1, &(0 as cl_uint))
            .cl(id, "clSetKernelArg(value)")?;
    }
    Ok(k)
}

/// Maps the flag once for the GEMM's lifetime (unmapped in `Drop`) and
/// clears it.
fn map_flag(dev: &DeviceCtx, flag: &Buffer<u32>) -> Result<FlagPtr> {
    let id = dev.id.as_str();
    let mut fp: cl_mem = ptr::null_mut();
    // SAFETY: maps the 4-byte flag buffer; the pointer stays valid until
    // unmapped in Drop.
    unsafe {
        dev.queue
            .enqueue_map_buffer(
                flag,
                CL_BLOCKING,
                CL_MAP_READ | CL_MAP_WRITE,
                0,
                4,
                &mut fp,
                &[],
            )
            .cl(id, "clEnqueueMapBuffer(flag)")?;
    }
    let flag_ptr = FlagPtr(fp.cast::<u32>());
    if flag_ptr.0.is_null() || !flag_ptr.0.is_aligned() {
        return Err(Error::backend(
            id,
            "mapped flag pointer is null or misaligned",
        ));
    }
    // SAFETY: valid, aligned, mapped for writing.
    unsafe { ptr::write_volatile(flag_ptr.0, 0) };
    Ok(flag_ptr)
}

impl ClGemm {
    pub(crate) fn new(
        dev: Arc<DeviceCtx>,
        program: &Program,
        tile: Tile,
        spec: GemmSpec,
        weights: &[f32],
    ) -> Result<ClGemm> {
        let id = dev.id.clone();
        spec.check_weights_len(&id, weights.len())?;
        let elem = elem_size(spec.dtype);
        let g = Geometry::new(&spec, &tile);
        let weights_buf = upload_weights(&dev, &spec, weights, g.weight)?;
        let in_bytes = g.input.rows * g.input.pitch * elem;
        let input = device_buffer::<u8>(
            &dev,
            CL_MEM_READ_ONLY | CL_MEM_ALLOC_HOST_PTR,
            in_bytes,
            "input, ALLOC_HOST_PTR",
        )?;
        let output = device_buffer::<u8>(
            &dev,
            CL_MEM_WRITE_ONLY | CL_MEM_ALLOC_HOST_PTR,
            g.r * g.ldc * elem,
            "output, ALLOC_HOST_PTR",
        )?;
        let flag = device_buffer::<u32>(
            &dev,
            CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR,
            1,
            "flag, ALLOC_HOST_PTR",
        )?;
        let kernel = Kernel::create(program, "gemm").cl(&id, "clCreateKernel(gemm)")?;
        set_gemm_args(&kernel, &g, &weights_buf, &input, &output, &id)?;
        let flag_kernel = flag_kernel(&dev, &flag)?;
        let flag_ptr = map_flag(&dev, &flag)?;
        Ok(ClGemm {
            spec,
            tile,
            kernel,
            flag_kernel,
            input,
            output,
            _weights: weights_buf,
            flag,
            flag_ptr,
            seq: 0,
            global: g.global(&tile),
            local: tile.local(),
            input_layout: g.input,
            ldc: g.ldc,
            pending: None,
            poll: PollStats::default(),
            dev,
        })
    }

    /// The tile this GEMM runs with.
    pub fn tile(&self) -> Tile {
        self.tile
    }

    /// How the [`SyncMode::Poll`] waits so far ended.
    pub fn poll_stats(&self) -> PollStats {
        self.poll
    }

    fn enqueue_gemm(&self) -> Result<Event> {
        // SAFETY: the kernel's arguments were all set in `new`; the work
        // sizes are multiples of the reqd_work_group_size.
        unsafe {
            self.dev.queue.enqueue_nd_range_kernel(
                self.kernel.get(),
                2,
                ptr::null(),
                self.global.as_ptr(),
                self.local.as_ptr(),
                &[],
            )
        }
        .cl(&self.dev.id, "clEnqueueNDRangeKernel(gemm)")
    }

    /// Maps `buf` (`bytes` long) blocking, hands the mapping to `f`, unmaps.
    fn with_map<R>(
        &self,
        buf: &Buffer<u8>,
        bytes: usize,
        flags: cl_map_flags,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R> {
        let id = &self.dev.id;
        let mut p: cl_mem = ptr::null_mut();
        // SAFETY: maps the whole buffer, which is `bytes` long.
        unsafe {
            self.dev
                .queue
                .enqueue_map_buffer(buf, CL_BLOCKING, flags, 0, bytes, &mut p, &[])
                .cl(id, "clEnqueueMapBuffer")?;
        }
        let base = p.cast::<u8>();
        if base.is_null() || base.align_offset(4) != 0 {
            return Err(Error::backend(id, "mapped pointer is null or misaligned"));
        }
        // SAFETY: the mapping is `bytes` long and stays valid until unmapped below.
        let out = f(unsafe { std::slice::from_raw_parts_mut(base, bytes) });
        // SAFETY: unmaps exactly the pointer mapped above.
        let ev = unsafe {
            self.dev
                .queue
                .enqueue_unmap_mem_object(buf.get(), p.cast::<c_void>(), &[])
        }
        .cl(id, "clEnqueueUnmapMemObject")?;
        ev.wait().cl(id, "clWaitForEvents(unmap)")?;
        Ok(out)
    }

    fn busy_error(&self) -> Error {
        Error::backend(
            &self.dev.id,
            "a submitted execution is still pending; call wait first",
        )
    }
}

fn elem_size(dtype: DType) -> usize {
    if dtype == DType::F16 { 2 } else { 4 }
}

enum ElemsMut<'a> {
    F32(&'a mut [f32]),
    F16(&'a mut [half::f16]),
}

/// Views raw (4-byte aligned) bytes as elements of `dtype`.
fn with_elems_mut<R>(dtype: DType, bytes: &mut [u8], f: impl FnOnce(ElemsMut<'_>) -> R) -> R {
    match dtype {
        DType::F16 => {
            // SAFETY: f16 is plain old data of size 2 and alignment 2;
            // align_to_mut only hands out the aligned middle.
            let (pre, mid, _) = unsafe { bytes.align_to_mut::<half::f16>() };
            assert!(pre.is_empty(), "f16 buffer misaligned");
            f(ElemsMut::F16(mid))
        }
        _ => {
            // SAFETY: f32 is plain old data; every bit pattern is valid.
            let (pre, mid, _) = unsafe { bytes.align_to_mut::<f32>() };
            assert!(pre.is_empty(), "f32 buffer misaligned");
            f(ElemsMut::F32(mid))
        }
    }
}

impl Gemm for ClGemm {
    fn spec(&self) -> &GemmSpec {
        &self.spec
    }

    fn write_input(&mut self, a: &[f32]) -> Result<()> {
        let (m, k, _) = self.spec.shape.mkn();
        let (m, k) = (m as usize, k as usize);
        self.spec.check_input_len(&self.dev.id, a.len())?;
        if self.pending.is_some() {
            return Err(self.busy_error());
        }
        let dtype = self.spec.dtype;
        let l = self.input_layout;
        let bytes = l.rows * l.pitch * elem_size(dtype);
        self.with_map(&self.input, bytes, CL_MAP_WRITE_INVALIDATE_REGION, |raw| {
            with_elems_mut(dtype, raw, |dst| match dst {
                ElemsMut::F32(d) => store(d, a, m, k, l.transpose, l.pitch),
                ElemsMut::F16(d) => store(d, a, m, k, l.transpose, l.pitch),
            })
        })
    }

    fn execute(&mut self) -> Result<Timed> {
        if self.pending.is_some() {
            return Err(self.busy_error());
        }
        let t0 = Instant::now();
        let ev = self.enqueue_gemm()?;
        ev.wait().cl(&self.dev.id, "clWaitForEvents(gemm)")?;
        let host_us = t0.elapsed().as_secs_f64() * 1e6;
        let device_us = event_us(&ev).cl(&self.dev.id, "clGetEventProfilingInfo")?;
        Ok(Timed {
            device_us: Some(device_us),
            host_us,
            ran_us: None,
        })
    }

    fn read_output(&mut self, c: &mut [f32]) -> Result<()> {
        let (m, _, n) = self.spec.shape.mkn();
        let (m, n) = (m as usize, n as usize);
        self.spec.check_output_len(&self.dev.id, c.len())?;
        if self.pending.is_some() {
            return Err(self.busy_error());
        }
        let wt = self.spec.order == OperandOrder::Transposed;
        let dtype = self.spec.dtype;
        let pitch = self.ldc;
        let rows = if wt { n } else { m };
        let bytes = rows * pitch * elem_size(dtype);
        self.with_map(&self.output, bytes, CL_MAP_READ, |raw| {
            with_elems_mut(dtype, raw, |src| match src {
                ElemsMut::F32(s) => load(c, s, m, n, wt, pitch),
                ElemsMut::F16(s) => load(c, s, m, n, wt, pitch),
            })
        })
    }

    fn submit(&mut self) -> Result<()> {
        if self.pending.is_some() {
            return Err(self.busy_error());
        }
        let id = self.dev.id.clone();
        self.seq = self.seq.wrapping_add(1).max(1);
        let start = Instant::now();
        let gemm = self.enqueue_gemm()?;
        // SAFETY: argument 1 of set_flag is a uint; the launch is one item.
        let flag = unsafe {
            self.flag_kernel
                .set_arg(1, &(self.seq as cl_uint))
                .cl(&id, "clSetKernelArg(value)")?;
            self.dev.queue.enqueue_nd_range_kernel(
                self.flag_kernel.get(),
                1,
                ptr::null(),
                [1usize].as_ptr(),
                ptr::null(),
                &[],
            )
        }
        .cl(&id, "clEnqueueNDRangeKernel(set_flag)")?;
        self.dev.queue.flush().cl(&id, "clFlush")?;
        self.pending = Some(Pending {
            start,
            gemm,
            flag,
            seq: self.seq,
        });
        Ok(())
    }

    fn wait(&mut self, mode: SyncMode) -> Result<Timed> {
        let id = self.dev.id.clone();
        let p = self
            .pending
            .take()
            .ok_or_else(|| Error::backend(&id, "wait without a submit"))?;
        let host_us = match mode {
            SyncMode::Block => {
                self.dev.queue.finish().cl(&id, "clFinish")?;
                p.start.elapsed().as_secs_f64() * 1e6
            }
            SyncMode::Poll { predicted_us } if self.dev.on_host_cores => {
                // The kernel runs on the host's cores: spinning would take
                // one from it. On a 2-core x86-64 machine, spinning made PoCL's 168 µs
                // 1×1536×256 GEMV take 1.7–2.3 ms, and napping 20 µs
                // between flag reads still 0.5 ms; sleeping through the
                // prediction, then a blocking wait, kept the profile's time
                // (docs/benchmarks.md, Runtime).
                sleep_through(predicted_us, p.start);
                self.dev.queue.finish().cl(&id, "clFinish")?;
                self.poll.by_wait += 1;
                p.start.elapsed().as_secs_f64() * 1e6
            }
            SyncMode::Poll { predicted_us } => {
                sleep_through(predicted_us, p.start);
                let flag = self.flag_ptr.0;
                // SAFETY: the flag stays mapped for the GEMM's lifetime.
                let seen = || unsafe { ptr::read_volatile(flag) } == p.seq;
                let state = &self.dev.flag_state;
                let every = if state.load(Ordering::Relaxed) == super::FLAG_UNSEEN {
                    1
                } else {
                    EVENT_CHECK_EVERY
                };
                let mut spins = 0u32;
                let mut pause = crate::backend::SpinThenYield::default();
                let by_flag = loop {
                    if seen() {
                        break true;
                    }
                    spins = spins.wrapping_add(1);
                    if spins % every == 0 {
                        let st = p
                            .flag
                            .command_execution_status()
                            .cl(&id, "clGetEventInfo(status)")?
                            .0;
                        if st < 0 {
                            return Err(Error::backend(
                                &id,
                                format!("gemm failed with status {st}"),
                            ));
                        }
                        if st == CL_COMPLETE {
                            break seen();
                        }
                    }
                    pause.pause();
                };
                let us = p.start.elapsed().as_secs_f64() * 1e6;
                fence(Ordering::Acquire);
                if by_flag {
                    self.poll.by_flag += 1;
                    state.store(super::FLAG_SEEN, Ordering::Relaxed);
                } else {
                    self.poll.by_event += 1;
                    let _ = state.compare_exchange(
                        super::FLAG_UNKNOWN,
                        super::FLAG_UNSEEN,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
                // Profiling data is only available once the runtime has
                // marked the event complete; wait for that after the clock stopped.
                p.flag.wait().cl(&id, "clWaitForEvents(set_flag)")?;
                us
            }
        };
        p.gemm.wait().cl(&id, "clWaitForEvents(gemm)")?;
        let device_us = event_us(&p.gemm).cl(&id, "clGetEventProfilingInfo")?;
        Ok(Timed {
            device_us: Some(device_us),
            host_us,
            ran_us: None,
        })
    }

    fn backend_id(&self) -> String {
        self.dev.id.clone()
    }

    fn evict_caches(&mut self) -> Result<()> {
        if self.pending.is_some() {
            return Err(self.busy_error());
        }
        self.dev.evict_caches()
    }
}

/// Sleeps until shortly before a GEMM submitted at `start` is predicted to
/// end (a tenth of the prediction early, at least 50 µs).
fn sleep_through(predicted_us: f64, start: Instant) {
    let margin = (0.1 * predicted_us).max(50.0);
    let left = predicted_us - margin - start.elapsed().as_secs_f64() * 1e6;
    if left > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(left / 1e6));
    }
}

impl Drop for ClGemm {
    fn drop(&mut self) {
        if self.pending.take().is_some() {
            let _ = self.dev.queue.finish();
        }
        // SAFETY: unmaps the flag mapping made in `new`, once.
        let unmapped = unsafe {
            self.dev.queue.enqueue_unmap_mem_object(
                self.flag.get(),
                self.flag_ptr.0.cast::<c_void>(),
                &[],
            )
        };
        if let Ok(ev) = unmapped {
            let _ = ev.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_and_load_transpose_round_trip() {
        let (rows, cols) = (37, 70);
        let src: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
        for pitch_pad in [0, 3] {
            // Transposed: cols rows of `rows` elements, padded.
            let tp = rows + pitch_pad;
            let mut t = vec![f32::NAN; cols * tp];
            store(&mut t, &src, rows, cols, true, tp);
            assert_eq!(t[5 * tp + 3], src[3 * cols + 5]);
            assert!(t.iter().all(|x| x.is_finite()), "padding zeroed");
            let mut back = vec![0f32; rows * cols];
            load(&mut back, &t, rows, cols, true, tp);
            assert_eq!(back, src);
            // As is, padded.
            let p = cols + pitch_pad;
            let mut d = vec![f32::NAN; rows * p];
            store(&mut d, &src, rows, cols, false, p);
            assert_eq!(d[2 * p + 7], src[2 * cols + 7]);
            let mut back = vec![0f32; rows * cols];
            load(&mut back, &d, rows, cols, false, p);
            assert_eq!(back, src);
        }
        let mut h = vec![half::f16::ZERO; rows * cols];
        store(&mut h, &src[..rows * cols], rows, cols, false, cols);
        let mut hb = vec![0f32; rows * cols];
        load(&mut hb, &h, rows, cols, false, cols);
        // Integers up to 2048 are exact in f16.
        assert_eq!(&hb[..2048], &src[..2048]);
    }
}
