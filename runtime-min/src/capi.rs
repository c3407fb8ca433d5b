//! The C API: open a plan, run one linear operator at a time or generate
//! tokens with a model ([`hetero_generate`]), close.
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
//! weights), [`HETERO_FAILED`] (a processor failed) or
//! [`HETERO_BAD_HANDLE`] (the runtime handle is NULL, closed, or was never
//! opened); the message of the last error on the calling thread is
//! [`hetero_last_error`]. No function unwinds into C: a panic becomes
//! [`HETERO_FAILED`].
//!
//! A `HeteroRuntime *` is a checked handle ([`HeteroRuntime`] says how).
//! The header
//! `include/hetero_runtime.h` is generated from this file by cbindgen (a
//! test fails when it is out of date; `HETERO_BLESS=1` rewrites it).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::{CStr, CString, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use hetero_agent::OpenOptions;
use hetero_plan::Phase;

use crate::{Error, LinearTiming, Runtime, RuntimeOptions, SyncChoice, WeightSource};

/// Success.
pub const HETERO_OK: c_int = 0;
/// A failure of the environment: a processor failed, or a bug.
pub const HETERO_FAILED: c_int = 1;
/// Bad input: a file, a plan for another model or device, an argument.
pub const HETERO_BAD_INPUT: c_int = 2;
/// The runtime handle is NULL, already closed, or was never returned by
/// `hetero_runtime_open`.
pub const HETERO_BAD_HANDLE: c_int = 3;

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
    /// The weights: a safetensors file, a `model.safetensors.index.json`
    /// or a folder holding one; NULL: synthetic seeded weights.
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
    /// A folder of graphs compiled for the plan (`hetero compile`), loaded
    /// and checked against the plan and weights; NULL: graphs are prepared
    /// when first needed.
    pub graphs: *const c_char,
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
///
/// A `HeteroRuntime *` is a handle, not an address: a number that the
/// library's registry maps to the open runtime, never dereferenced. Any
/// value may be passed to any function without undefined behaviour: NULL,
/// a closed handle and a value never returned by `hetero_runtime_open` are
/// refused with `HETERO_BAD_HANDLE` and a message in `hetero_last_error`.
/// Handles are never reused, so a closed one stays refused after later
/// opens. Calls on one handle from several threads are safe and take
/// turns; `hetero_runtime_close` waits for a call in progress on the
/// handle, and calls that come after it are refused.
pub struct HeteroRuntime {
    rt: Runtime,
    phase: Phase,
    last: HeteroTiming,
}

/// Where a handle's runtime lives: `None` once closed. Calls on the handle
/// hold the lock, so they take turns and a close waits for them.
type Slot = Arc<Mutex<Option<HeteroRuntime>>>;

/// The open runtimes by handle value, and the count of handles given out.
struct Registry {
    given: usize,
    open: BTreeMap<usize, Slot>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    given: 0,
    open: BTreeMap::new(),
});

/// The high bits of every handle on a 64-bit machine, so that a small
/// integer or an address is never a live handle by accident.
const HANDLE_TAG: usize = if usize::BITS >= 64 {
    0x4e7e << (usize::BITS - 16)
} else {
    0
};
/// The most handles one process can open (never reused).
const HANDLE_COUNT_MAX: usize = if usize::BITS >= 64 {
    (1 << (usize::BITS - 16)) - 1
} else {
    usize::MAX
};

/// A lock that a panic while it was held does not make unusable: the
/// registry's operations cannot leave it half-changed, and a runtime stays
/// as usable as it was before the panic reached C.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Registers `h` and returns its handle.
fn register(h: HeteroRuntime) -> Result<*mut HeteroRuntime, String> {
    let mut reg = lock(&REGISTRY);
    if reg.given >= HANDLE_COUNT_MAX {
        return Err(format!(
            "hetero_runtime_open: this process has opened {} runtimes, the most it can",
            reg.given
        ));
    }
    reg.given += 1;
    let id = HANDLE_TAG | reg.given;
    reg.open.insert(id, Arc::new(Mutex::new(Some(h))));
    Ok(std::ptr::without_provenance_mut(id))
}

/// Why `rt` is not an open runtime, for `func`'s message.
fn handle_problem(rt: *const HeteroRuntime, func: &str) -> String {
    let id = rt.addr();
    if id == 0 {
        return format!("{func}: rt is NULL");
    }
    let given = lock(&REGISTRY).given;
    if id & HANDLE_TAG == HANDLE_TAG && (1..=given).contains(&(id & !HANDLE_TAG)) {
        format!("{func}: rt {id:#x} was closed")
    } else {
        format!("{func}: rt {id:#x} is not a runtime from hetero_runtime_open")
    }
}

/// Sets the message of a bad handle and returns `HETERO_BAD_HANDLE`.
fn bad_handle(rt: *const HeteroRuntime, func: &str) -> c_int {
    set_error(&handle_problem(rt, func));
    HETERO_BAD_HANDLE
}

/// Runs `f` on the runtime of handle `rt`, holding its lock; any handle
/// that is not open gives `HETERO_BAD_HANDLE`. Never dereferences `rt`.
fn with_runtime(
    rt: *const HeteroRuntime,
    func: &str,
    f: impl FnOnce(&mut HeteroRuntime) -> c_int,
) -> c_int {
    let slot = lock(&REGISTRY).open.get(&rt.addr()).cloned();
    let Some(slot) = slot else {
        return bad_handle(rt, func);
    };
    let mut guard = lock(&slot);
    match guard.as_mut() {
        Some(h) => f(h),
        // Closed while this call waited for the lock.
        None => bad_handle(rt, func),
    }
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
/// `predictor`, `cpu_groups`, `sim_params`, `graphs`), or the message of
/// what is wrong.
fn runtime_options(
    o: &HeteroOptions,
    weights: Option<String>,
    predictor: Option<String>,
    cpu_groups: Option<String>,
    sim_params: Option<String>,
    graphs: Option<String>,
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
        graphs: graphs.map(PathBuf::from),
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
        graphs: std::ptr::null(),
    }
}

/// The message of the last error on this thread (empty when none). Valid
/// until the next call into this library on the same thread.
#[unsafe(no_mangle)]
pub extern "C" fn hetero_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Opens a plan for the model of `options->model_config` on this
/// machine's processors. Returns a handle for the other functions, valid
/// until [`hetero_runtime_close`], or NULL on error (see
/// [`hetero_last_error`]).
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
                    opt_str(o.graphs, "graphs")?,
                ))
            })()
        };
        let (plan, model, weights, predictor, cpu_groups, sim_params, graphs) = match strings {
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
        let opts = match runtime_options(o, weights, predictor, cpu_groups, sim_params, graphs) {
            Ok(opts) => opts,
            Err(e) => return bad(&e),
        };
        let spec = match crate::load_model(std::path::Path::new(&model)) {
            Ok(s) => s,
            Err(e) => return fail(&e),
        };
        let opened =
            Runtime::open(std::path::Path::new(&plan), spec, opts).map(|rt| HeteroRuntime {
                rt,
                phase,
                last: HeteroTiming::default(),
            });
        match opened {
            Ok(h) => match register(h) {
                Ok(handle) => {
                    out = handle;
                    HETERO_OK
                }
                Err(e) => {
                    set_error(&e);
                    HETERO_FAILED
                }
            },
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
/// only on success. A handle that is not open gives `HETERO_BAD_HANDLE`.
///
/// # Safety
/// `op` is NUL-terminated; `input` and `output` point to buffers of the
/// sizes above. `rt` may be any value.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hetero_linear(
    rt: *mut HeteroRuntime,
    op: *const c_char,
    seq_len: u32,
    input: *const f32,
    output: *mut f32,
) -> c_int {
    guard(|| {
        with_runtime(rt, "hetero_linear", |h| {
            let phase = match h.phase {
                Phase::Prefill => HETERO_PREFILL,
                Phase::Decode => HETERO_DECODE,
            };
            // SAFETY: forwarded from this function's contract.
            unsafe { linear(h, op, phase, u32::MAX, seq_len, input, output) }
        })
    })
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
        with_runtime(rt, "hetero_linear_ex", |h| {
            // SAFETY: forwarded from this function's contract.
            unsafe { linear(h, op, phase, layer, seq_len, input, output) }
        })
    })
}

/// The body of [`hetero_linear_ex`] on an open runtime.
///
/// # Safety
/// As for [`hetero_linear`].
unsafe fn linear(
    h: &mut HeteroRuntime,
    op: *const c_char,
    phase: u32,
    layer: u32,
    seq_len: u32,
    input: *const f32,
    output: *mut f32,
) -> c_int {
    if op.is_null() || input.is_null() || output.is_null() {
        return bad("hetero_linear: op, input and output must not be NULL");
    }
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
}

/// The dimensions of `op` at `seq_len` in `phase`: rows per instance `m`,
/// input features `k`, output features `n`, instances per layer.
///
/// # Safety
/// `op` is NUL-terminated; the four outputs are valid pointers. `rt` may be
/// any value.
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
        with_runtime(rt, "hetero_op_dims", |h| {
            if op.is_null() || m.is_null() || k.is_null() || n.is_null() || instances.is_null() {
                return bad("hetero_op_dims: op and the four outputs must not be NULL");
            }
            // SAFETY: non-NULL; the caller promises a NUL-terminated string.
            let (name, phase) = match unsafe { op_and_phase(op, phase) } {
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
    })
}

/// Copies the times of the last successful `hetero_linear` into `out`.
///
/// # Safety
/// `out` is a valid pointer. `rt` may be any value.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hetero_last_timing(
    rt: *const HeteroRuntime,
    out: *mut HeteroTiming,
) -> c_int {
    guard(|| {
        with_runtime(rt, "hetero_last_timing", |h| {
            if out.is_null() {
                return bad("hetero_last_timing: out must not be NULL");
            }
            // SAFETY: non-NULL and valid, as the caller promises.
            unsafe { *out = h.last };
            HETERO_OK
        })
    })
}

/// Times of a [`hetero_generate`] call.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct HeteroGenerateTimes {
    /// Time to first token (the prefill and the first token), µs.
    pub ttft_us: f64,
    /// Mean host wall clock of a decode step, µs (0 with one token).
    pub tpot_us: f64,
    /// Prompt tokens per second of the prefill.
    pub prefill_tokens_per_s: f64,
    /// Generated tokens per second of the decode steps (0 with one token).
    pub decode_tokens_per_s: f64,
}

/// Generates `max_new` tokens greedily after the `prompt_len` token ids of
/// `prompt`, with the model in folder `model_dir` (its config.json and
/// safetensors checkpoint; the runtime must have been opened for this
/// model with `options.weights` naming the same checkpoint). Every GEMM
/// runs as the plan decides; the other operators run on the host CPU.
/// `out_tokens` receives `max_new` ids; `times` (may be NULL) the times.
///
/// # Safety
/// `model_dir` is NUL-terminated; `prompt` holds `prompt_len` ids and
/// `out_tokens` room for `max_new`; `times` is NULL or valid. `rt` may be
/// any value.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hetero_generate(
    rt: *mut HeteroRuntime,
    model_dir: *const c_char,
    prompt: *const u32,
    prompt_len: usize,
    max_new: u32,
    out_tokens: *mut u32,
    times: *mut HeteroGenerateTimes,
) -> c_int {
    guard(|| {
        with_runtime(rt, "hetero_generate", |h| {
            if model_dir.is_null() || prompt.is_null() || out_tokens.is_null() {
                return bad("hetero_generate: model_dir, prompt and out_tokens must not be NULL");
            }
            if prompt_len == 0 || max_new == 0 {
                return bad("hetero_generate: prompt_len and max_new must be at least 1");
            }
            // SAFETY: non-NULL; the caller promises a NUL-terminated string.
            let dir = match unsafe { opt_str(model_dir, "model_dir") } {
                Ok(d) => PathBuf::from(d.expect("checked non-NULL")),
                Err(e) => return bad(&e),
            };
            // SAFETY: the caller promises `prompt_len` ids.
            let ids = unsafe { std::slice::from_raw_parts(prompt, prompt_len) }.to_vec();
            let g = match generate_greedy(&mut h.rt, &dir, ids, max_new) {
                Ok(g) => g,
                Err(e) => return fail(&e),
            };
            // SAFETY: the caller promises room for `max_new` ids.
            let out = unsafe { std::slice::from_raw_parts_mut(out_tokens, max_new as usize) };
            out.copy_from_slice(&g.tokens);
            if !times.is_null() {
                let tpot = match g.decode_us.len() {
                    0 => 0.0,
                    n => g.decode_us.iter().sum::<f64>() / n as f64,
                };
                // SAFETY: non-NULL and valid, as the caller promises.
                unsafe {
                    *times = HeteroGenerateTimes {
                        ttft_us: g.ttft_us,
                        tpot_us: tpot,
                        prefill_tokens_per_s: prompt_len as f64 / (g.ttft_us / 1e6),
                        decode_tokens_per_s: if tpot > 0.0 { 1e6 / tpot } else { 0.0 },
                    }
                };
            }
            HETERO_OK
        })
    })
}

/// Greedy generation of exactly `max_new` tokens with the model in `dir`.
fn generate_greedy(
    rt: &mut Runtime,
    dir: &std::path::Path,
    prompt: Vec<u32>,
    max_new: u32,
) -> crate::Result<crate::Generation> {
    let files = crate::ModelFiles::open(&dir.join("config.json"), rt.model(), dir)?;
    let positions = prompt.len() + max_new as usize;
    let mut d = crate::Decoder::load(&files, rt, prompt.len() as u32, positions)?;
    let spec = crate::GenerateSpec {
        prompt,
        max_new,
        stop: Vec::new(),
        sampling: crate::Sampling::default(),
        keep_logits: false,
    };
    d.generate(rt, &spec, false, &mut |_, _, _| {})
}

/// Closes a runtime: waits for a call in progress on `rt` (from another
/// thread), then frees it. Returns `HETERO_OK`; NULL is ignored (also
/// `HETERO_OK`). A handle already closed, or never returned by
/// [`hetero_runtime_open`], gives `HETERO_BAD_HANDLE` and changes nothing.
/// Every later call with `rt` gives `HETERO_BAD_HANDLE`. (Code written
/// when this function returned `void` ignores the code and still works.)
#[unsafe(no_mangle)]
pub extern "C" fn hetero_runtime_close(rt: *mut HeteroRuntime) -> c_int {
    if rt.is_null() {
        return HETERO_OK;
    }
    guard(|| {
        let slot = lock(&REGISTRY).open.remove(&rt.addr());
        let Some(slot) = slot else {
            return bad_handle(rt, "hetero_runtime_close");
        };
        // Waits for a call in progress; calls waiting behind this one find
        // the slot empty.
        let h = lock(&slot).take();
        drop(h);
        HETERO_OK
    })
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
        assert_eq!(rc, HETERO_BAD_HANDLE);
        assert_eq!(hetero_runtime_close(std::ptr::null_mut()), HETERO_OK);
    }

    fn last_error() -> String {
        // SAFETY: the library returns a NUL-terminated string.
        unsafe { CStr::from_ptr(hetero_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn any_handle_value_is_refused_without_being_read() {
        let mut t = HeteroTiming::default();
        let mut on_stack = 0u64;
        let values = [
            1usize,
            0x1234,
            usize::MAX,
            HANDLE_TAG,
            HANDLE_TAG | HANDLE_COUNT_MAX,
            (&raw mut on_stack).addr(),
        ];
        for v in values {
            let rt = std::ptr::without_provenance_mut::<HeteroRuntime>(v);
            // SAFETY: `out` is valid; `rt` may be any value.
            let rc = unsafe { hetero_last_timing(rt, &mut t) };
            assert_eq!(rc, HETERO_BAD_HANDLE, "{v:#x}");
            assert!(
                last_error().contains("is not a runtime"),
                "{}",
                last_error()
            );
            assert_eq!(hetero_runtime_close(rt), HETERO_BAD_HANDLE, "{v:#x}");
        }
        assert_eq!(on_stack, 0);
        // SAFETY: `out` is valid; NULL is refused.
        let rc = unsafe { hetero_last_timing(std::ptr::null(), &mut t) };
        assert_eq!(rc, HETERO_BAD_HANDLE);
        assert!(last_error().contains("rt is NULL"), "{}", last_error());
        let (ids, mut out) = ([1u32, 2], [0u32; 2]);
        let dir = c"model";
        // SAFETY: valid buffers; NULL `rt` and `times` are allowed.
        let rc = unsafe {
            hetero_generate(
                std::ptr::null_mut(),
                dir.as_ptr(),
                ids.as_ptr(),
                2,
                2,
                out.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(rc, HETERO_BAD_HANDLE);
        assert!(
            last_error().contains("hetero_generate: rt is NULL"),
            "{}",
            last_error()
        );
    }
}
