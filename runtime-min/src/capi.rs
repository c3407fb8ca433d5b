//! The C API: open a plan, run one linear operator at a time, close.
//!
//! ```c
//! HeteroOptions o = hetero_options_default();
//! o.model_config = "config.json";
//! HeteroRuntime *rt = hetero_runtime_open("plan.ron", &o);
//! if (!rt) { fprintf(stderr, "%s\n", hetero_last_error()); return 2; }
//! int rc = hetero_linear(rt, "layers.3.attn_q", 300, input, output);
//! hetero_runtime_close(rt);
//! ```
//!
//! Every function returns [`HETERO_OK`], [`HETERO_BAD_INPUT`] (a plan for
//! another model, an absent processor, an unknown operator, mismatched
//! weights) or [`HETERO_FAILED`] (a processor failed); the message of the
//! last error on the calling thread is [`hetero_last_error`]. No function
//! unwinds into C: a panic becomes [`HETERO_FAILED`]. The header
//! `include/hetero_runtime.h` is generated from this file by cbindgen (a
//! test fails when it is out of date; `HETERO_BLESS=1` rewrites it).

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use hetero_agent::OpenOptions;
use hetero_plan::Phase;

use crate::{Error, LinearTiming, Runtime, RuntimeOptions, SyncChoice, WeightSource};

/// Success.
pub const HETERO_OK: c_int = 0;
/// A failure of the environment: a processor failed, or a bug.
pub const HETERO_FAILED: c_int = 1;
/// Bad input: a file, a plan for another model or device, an argument.
pub const HETERO_BAD_INPUT: c_int = 2;

/// The prompt phase: M is the sequence length.
pub const HETERO_PREFILL: u32 = 0;
/// Token generation: M is the tokens decoded per step.
pub const HETERO_DECODE: u32 = 1;

/// Sleep for the predicted time, then poll the completion flag.
pub const HETERO_SYNC_POLL: u32 = 0;
/// The backend's blocking wait.
pub const HETERO_SYNC_BLOCK: u32 = 1;

/// Options of [`hetero_runtime_open`]; start from [`hetero_options_default`].
/// Strings are NUL-terminated paths; NULL means absent.
#[repr(C)]
pub struct HeteroOptions {
    /// The model's Hugging Face config.json (required).
    pub model_config: *const c_char,
    /// A safetensors file with the weights; NULL: synthetic seeded weights.
    pub weights: *const c_char,
    /// The predictor the plan was solved with; NULL: not checked.
    pub predictor: *const c_char,
    /// CPU core groups (`0-3;4-7`); NULL: detected.
    pub cpu_groups: *const c_char,
    /// NPU simulator parameters (RON); NULL: defaults.
    pub sim_params: *const c_char,
    /// Seed of the synthetic weights.
    pub seed: u64,
    /// `HETERO_SYNC_POLL` or `HETERO_SYNC_BLOCK`.
    pub sync: u32,
    /// The phase `hetero_linear` uses: `HETERO_PREFILL` or `HETERO_DECODE`.
    pub phase: u32,
}

/// Times of the last successful `hetero_linear` call, µs.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct HeteroTiming {
    /// The operator's time (wall clock; with a simulated part, the real
    /// overheads plus the simulator's modelled time).
    pub measured_us: f64,
    /// Host wall clock.
    pub wall_us: f64,
    /// Runtime overhead: decider, bookkeeping, submit calls.
    pub dispatch_us: f64,
    /// The plan's prediction.
    pub predicted_us: f64,
}

/// An open runtime (opaque to C).
pub struct HeteroRuntime {
    rt: Runtime,
    phase: Phase,
    last: HeteroTiming,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

fn fail(e: &Error) -> c_int {
    set_error(&e.to_string());
    if e.is_bad_input() {
        HETERO_BAD_INPUT
    } else {
        HETERO_FAILED
    }
}

fn bad(msg: &str) -> c_int {
    set_error(msg);
    HETERO_BAD_INPUT
}

/// Runs `f`, turning a panic into `HETERO_FAILED`.
fn guard(f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        set_error("hetero-runtime panicked (a bug): see stderr");
        HETERO_FAILED
    })
}

/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn opt_str(p: *const c_char, what: &str) -> Result<Option<String>, String> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller promises a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map(|s| Some(s.to_string()))
        .map_err(|_| format!("{what}: not UTF-8"))
}

fn phase_of(p: u32) -> Result<Phase, String> {
    match p {
        HETERO_PREFILL => Ok(Phase::Prefill),
        HETERO_DECODE => Ok(Phase::Decode),
        _ => Err(format!(
            "phase {p}: expected HETERO_PREFILL (0) or HETERO_DECODE (1)"
        )),
    }
}

fn sync_of(s: u32) -> Result<SyncChoice, String> {
    match s {
        HETERO_SYNC_POLL => Ok(SyncChoice::Poll),
        HETERO_SYNC_BLOCK => Ok(SyncChoice::Block),
        _ => Err(format!(
            "sync {s}: expected HETERO_SYNC_POLL or HETERO_SYNC_BLOCK"
        )),
    }
}

/// An operator name and a phase from C, or the message of what is wrong.
///
/// # Safety
/// `op` is a non-NULL NUL-terminated string.
unsafe fn op_and_phase(op: *const c_char, phase: u32) -> Result<(String, Phase), String> {
    // SAFETY: the caller promises a NUL-terminated string.
    let name = unsafe { opt_str(op, "op") }?.expect("checked non-NULL");
    Ok((name, phase_of(phase)?))
}

/// The runtime options of `o` (whose strings are already read: `weights`,
/// `predictor`, `cpu_groups`, `sim_params`), or the message of what is
/// wrong.
fn runtime_options(
    o: &HeteroOptions,
    weights: Option<String>,
    predictor: Option<String>,
    cpu_groups: Option<String>,
    sim_params: Option<String>,
) -> Result<RuntimeOptions, String> {
    Ok(RuntimeOptions {
        open: OpenOptions {
            cpu_groups,
            sim_params: sim_params.map(PathBuf::from),
            ..Default::default()
        },
        sync: sync_of(o.sync)?,
        weights: match weights {
            Some(w) => WeightSource::Safetensors(w.into()),
            None => WeightSource::Synthetic {
                seed: o.seed,
                share_layers: false,
            },
        },
        predictor: predictor.map(PathBuf::from),
        fail_after: None,
    })
}

/// The default options: synthetic weights with seed 0x5eed, polling, prefill.
#[unsafe(no_mangle)]
pub extern "C" fn hetero_options_default() -> HeteroOptions {
    HeteroOptions {
        model_config: std::ptr::null(),
        weights: std::ptr::null(),
        predictor: std::ptr::null(),
        cpu_groups: std::ptr::null(),
        sim_params: std::ptr::null(),
        seed: 0x5eed,
        sync: HETERO_SYNC_POLL,
        phase: HETERO_PREFILL,
    }
}

/// The message of the last error on this thread (empty when none). Valid
/// until the next call into this library on the same thread.
#[unsafe(no_mangle)]
pub extern "C" fn hetero_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Opens a plan for the model of `options->model_config` on this
/// machine's processors. Returns NULL on error (see [`hetero_last_error`]).
///
/// # Safety
/// `plan_path` is a NUL-terminated string; `options` points to a valid
/// [`HeteroOptions`] whose strings are NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hetero_runtime_open(
    plan_path: *const c_char,
    options: *const HeteroOptions,
) -> *mut HeteroRuntime {
    let mut out: *mut HeteroRuntime = std::ptr::null_mut();
    let rc = guard(|| {
        if plan_path.is_null() || options.is_null() {
            return bad("hetero_runtime_open: plan_path and options must not be NULL");
        }
        // SAFETY: checked non-NULL; the caller promises valid contents.
        let o = unsafe { &*options };
        // SAFETY: as promised by the caller.
        let strings = unsafe {
            (|| -> Result<_, String> {
                Ok((
                    opt_str(plan_path, "plan_path")?.unwrap_or_default(),
                    opt_str(o.model_config, "model_config")?,
                    opt_str(o.weights, "weights")?,
                    opt_str(o.predictor, "predictor")?,
                    opt_str(o.cpu_groups, "cpu_groups")?,
                    opt_str(o.sim_params, "sim_params")?,
                ))
            })()
        };
        let (plan, model, weights, predictor, cpu_groups, sim_params) = match strings {
            Ok(s) => s,
            Err(e) => return bad(&e),
        };
        let Some(model) = model else {
            return bad("hetero_runtime_open: options.model_config is required");
        };
        let phase = match phase_of(o.phase) {
            Ok(p) => p,
            Err(e) => return bad(&e),
        };
        let opts = match runtime_options(o, weights, predictor, cpu_groups, sim_params) {
            Ok(opts) => opts,
            Err(e) => return bad(&e),
        };
        let spec = match crate::load_model(std::path::Path::new(&model)) {
            Ok(s) => s,
            Err(e) => return fail(&e),
        };
        match Runtime::open(std::path::Path::new(&plan), spec, opts) {
            Ok(rt) => {
                out = Box::into_raw(Box::new(HeteroRuntime {
                    rt,
                    phase,
                    last: HeteroTiming::default(),
                }));
                HETERO_OK
            }
            Err(e) => fail(&e),
        }
    });
    if rc != HETERO_OK {
        return std::ptr::null_mut();
    }
    set_error("");
    out
}

/// `layers.3.attn_q` → (`attn_q`, 3); `attn_q` → (`attn_q`, 0).
fn split_op(op: &str) -> (&str, u32) {
    if let Some(rest) = op.strip_prefix("layers.")
        && let Some((l, name)) = rest.split_once('.')
        && let Ok(l) = l.parse()
    {
        return (name, l);
    }
    (op, 0)
}

/// Runs one linear operator as the plan decides at `seq_len`, in the phase
/// of the options. `op` is a canonical name (`attn_q`, `ffn_down`,
/// `lm_head`), for layer 0, or `layers.N.NAME` for layer N. `input` holds
/// `instances × M × K` floats and `output` receives `instances × M × N`
/// (row-major; see [`hetero_op_dims`]: M is `seq_len` except where the
/// plan says otherwise, as for the lm_head in prefill). `output` is written
/// only on success.
///
/// # Safety
/// `rt` comes from [`hetero_runtime_open`] and is not used by another
/// thread at the same time; `op` is NUL-terminated; `input` and `output`
/// point to buffers of the sizes above.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hetero_linear(
    rt: *mut HeteroRuntime,
    op: *const c_char,
    seq_len: u32,
    input: *const f32,
    output: *mut f32,
) -> c_int {
    if rt.is_null() {
        return bad("hetero_linear: rt is NULL");
    }
    // SAFETY: the caller passes a live runtime.
    let phase = unsafe { (*rt).phase };
    let p = match phase {
        Phase::Prefill => HETERO_PREFILL,
        Phase::Decode => HETERO_DECODE,
    };
    // SAFETY: forwarded from this function's contract.
    unsafe { hetero_linear_ex(rt, op, p, u32::MAX, seq_len, input, output) }
}

/// [`hetero_linear`] with the phase and layer given; `layer` `UINT32_MAX`
/// takes the layer from a `layers.N.` prefix of `op` (else layer 0).
///
/// # Safety
/// As for [`hetero_linear`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hetero_linear_ex(
    rt: *mut HeteroRuntime,
    op: *const c_char,
    phase: u32,
    layer: u32,
    seq_len: u32,
    input: *const f32,
    output: *mut f32,
) -> c_int {
    guard(|| {
        if rt.is_null() || op.is_null() || input.is_null() || output.is_null() {
            return bad("hetero_linear: rt, op, input and output must not be NULL");
        }
        // SAFETY: non-NULL, and the caller passes a live runtime used by one thread.
        let h = unsafe { &mut *rt };
        // SAFETY: non-NULL; the caller promises a NUL-terminated string.
        let (name, phase) = match unsafe { op_and_phase(op, phase) } {
            Ok(x) => x,
            Err(e) => return bad(&e),
        };
        let (base, prefixed) = split_op(&name);
        let layer = if layer == u32::MAX { prefixed } else { layer };
        let (m, k, n, inst) = match h.rt.op_dims(base, phase, seq_len) {
            Ok(d) => d,
            Err(e) => return fail(&e),
        };
        let (ilen, olen) = (
            (inst * m) as usize * k as usize,
            (inst * m) as usize * n as usize,
        );
        // SAFETY: the caller promises buffers of these sizes.
        let (a, c) = unsafe {
            (
                std::slice::from_raw_parts(input, ilen),
                std::slice::from_raw_parts_mut(output, olen),
            )
        };
        match h.rt.linear(base, phase, layer, seq_len, a, c) {
            Ok(LinearTiming {
                measured_us,
                wall_us,
                dispatch_us,
                predicted_us,
            }) => {
                h.last = HeteroTiming {
                    measured_us,
                    wall_us,
                    dispatch_us,
                    predicted_us,
                };
                HETERO_OK
            }
            Err(e) => fail(&e),
        }
    })
}

/// The dimensions of `op` at `seq_len` in `phase`: rows per instance `m`,
/// input features `k`, output features `n`, instances per layer.
///
/// # Safety
/// `rt` comes from [`hetero_runtime_open`]; `op` is NUL-terminated; the
/// four outputs are valid pointers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hetero_op_dims(
    rt: *const HeteroRuntime,
    op: *const c_char,
    phase: u32,
    seq_len: u32,
    m: *mut u32,
    k: *mut u32,
    n: *mut u32,
    instances: *mut u32,
) -> c_int {
    guard(|| {
        if rt.is_null()
            || op.is_null()
            || m.is_null()
            || k.is_null()
            || n.is_null()
            || instances.is_null()
        {
            return bad("hetero_op_dims: no argument may be NULL");
        }
        // SAFETY: non-NULL; the caller passes a live runtime and a C string.
        let (h, name_phase) = unsafe { (&*rt, op_and_phase(op, phase)) };
        let (name, phase) = match name_phase {
            Ok(x) => x,
            Err(e) => return bad(&e),
        };
        match h.rt.op_dims(split_op(&name).0, phase, seq_len) {
            Ok((dm, dk, dn, di)) => {
                // SAFETY: non-NULL, and the caller promises valid pointers.
                unsafe {
                    *m = dm;
                    *k = dk;
                    *n = dn;
                    *instances = di;
                }
                HETERO_OK
            }
            Err(e) => fail(&e),
        }
    })
}

/// Copies the times of the last successful `hetero_linear` into `out`.
///
/// # Safety
/// `rt` comes from [`hetero_runtime_open`]; `out` is a valid pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hetero_last_timing(
    rt: *const HeteroRuntime,
    out: *mut HeteroTiming,
) -> c_int {
    if rt.is_null() || out.is_null() {
        return bad("hetero_last_timing: rt and out must not be NULL");
    }
    // SAFETY: non-NULL and valid, as the caller promises.
    unsafe { *out = (*rt).last };
    HETERO_OK
}

/// Closes a runtime; NULL is ignored.
///
/// # Safety
/// `rt` comes from [`hetero_runtime_open`] and is not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hetero_runtime_close(rt: *mut HeteroRuntime) {
    if !rt.is_null() {
        // SAFETY: the pointer came from Box::into_raw in hetero_runtime_open.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(rt) })));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_names_with_layer_prefixes() {
        assert_eq!(split_op("layers.3.attn_q"), ("attn_q", 3));
        assert_eq!(split_op("attn_q"), ("attn_q", 0));
        assert_eq!(split_op("layers.x.attn_q"), ("layers.x.attn_q", 0));
    }

    #[test]
    fn null_and_bad_arguments_are_bad_input_with_a_message() {
        let o = hetero_options_default();
        // SAFETY: NULL is allowed and reported.
        let rt = unsafe { hetero_runtime_open(std::ptr::null(), &o) };
        assert!(rt.is_null());
        // SAFETY: the library returns a NUL-terminated string.
        let msg = unsafe { CStr::from_ptr(hetero_last_error()) }
            .to_str()
            .unwrap();
        assert!(msg.contains("must not be NULL"), "{msg}");
        let plan = CString::new("/nonexistent/plan.ron").unwrap();
        // SAFETY: valid strings; model_config NULL is reported.
        let rt = unsafe { hetero_runtime_open(plan.as_ptr(), &o) };
        assert!(rt.is_null());
        // SAFETY: as above.
        let msg = unsafe { CStr::from_ptr(hetero_last_error()) }
            .to_str()
            .unwrap();
        assert!(msg.contains("model_config"), "{msg}");
        // SAFETY: NULL runtime is reported, not dereferenced.
        let rc = unsafe {
            hetero_linear(
                std::ptr::null_mut(),
                plan.as_ptr(),
                1,
                std::ptr::null(),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(rc, HETERO_BAD_INPUT);
        // SAFETY: NULL is ignored.
        unsafe { hetero_runtime_close(std::ptr::null_mut()) };
    }
}
