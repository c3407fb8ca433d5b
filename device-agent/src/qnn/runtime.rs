//! Loading `libQnnHtp.so` and holding its backend and device handles.

use std::collections::HashMap;
use std::ffi::{CStr, c_char};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::{Mutex, OnceLock};

use super::ffi::{self, Handle, QnnError};
use super::profile::Profile;
use super::rpcmem::{self, RpcMem, SharedBuf};
use super::worker::Worker;
use super::{HtpPerf, PROCESSOR_ID};
use crate::{Error, Result};

/// The library file name.
pub const LIBRARY: &str = "libQnnHtp.so";

/// The environment variable naming the folder that holds [`LIBRARY`].
pub const LIB_DIR_ENV: &str = "HETERO_QNN_LIB_DIR";

/// Folders tried when neither `--qnn-lib-dir` nor [`LIB_DIR_ENV`] is given:
/// the Android vendor and system library folders, then the folders
/// `docs/phone.md` pushes to.
pub const STANDARD_DIRS: &[&str] = &[
    "/vendor/lib64",
    "/system/lib64",
    "/data/local/tmp/hetero/qnn",
    "/data/local/tmp/hetero",
    "/data/local/tmp",
];

/// A loaded library and the HTP provider's function table.
///
/// Loaded once per path and kept for the life of the process: unloading
/// `libQnnHtp.so` (`dlclose`) while its worker threads and static objects
/// are alive is not something to rely on, and reloading costs a second.
pub(crate) struct QnnLib {
    _lib: libloading::Library,
    /// Points into the library's own static data, valid while it is loaded.
    table: *const ffi::FunctionTable,
    /// Where it was loaded from.
    pub path: PathBuf,
    /// The provider's declared API version.
    pub api: ffi::ApiVersion,
    /// `backendGetBuildId`, e.g. `v2.51.0.xxxxxx`.
    pub build_id: String,
}

// SAFETY: the function table is immutable static data of a library that is
// never unloaded; QNN's entry points may be called from any thread.
unsafe impl Send for QnnLib {}
unsafe impl Sync for QnnLib {}

impl QnnLib {
    /// The function table.
    pub fn api(&self) -> &ffi::FunctionTable {
        // SAFETY: `table` points into the never-unloaded library (see `load`).
        unsafe { &*self.table }
    }

    /// Turns a QNN error handle into `Ok` or an [`Error::Backend`] naming the
    /// call, the code and the library's message for it.
    pub fn check(&self, call: &str, err: QnnError) -> Result<()> {
        if err == ffi::QNN_SUCCESS {
            return Ok(());
        }
        Err(Error::backend(PROCESSOR_ID, self.describe(call, err)))
    }

    /// `call failed: error CODE (message)`.
    pub fn describe(&self, call: &str, err: QnnError) -> String {
        let code = ffi::error_code(err);
        let mut msg: *const c_char = ptr::null();
        let text = match self.api().error_get_message {
            // SAFETY: errorGetMessage writes a pointer to a static string.
            Some(f) if unsafe { f(err, &mut msg) } == ffi::QNN_SUCCESS && !msg.is_null() => {
                // SAFETY: non-null, NUL-terminated, owned by the library.
                unsafe { CStr::from_ptr(msg) }
                    .to_string_lossy()
                    .into_owned()
            }
            _ => String::new(),
        };
        if text.is_empty() {
            format!("{call} failed: error {code}")
        } else {
            format!("{call} failed: error {code} ({text})")
        }
    }
}

/// The folders to look in, in order, from the explicit option, then the
/// environment variable, then [`STANDARD_DIRS`]. An explicit folder is the
/// only one tried: a missing library there is the user's mistake to hear
/// about, not something to paper over with a system copy.
pub(crate) fn candidate_dirs(explicit: Option<&Path>) -> Vec<PathBuf> {
    if let Some(dir) = explicit {
        return vec![dir.to_path_buf()];
    }
    if let Some(dir) = std::env::var_os(LIB_DIR_ENV).filter(|d| !d.is_empty()) {
        return vec![PathBuf::from(dir)];
    }
    STANDARD_DIRS.iter().map(PathBuf::from).collect()
}

/// Loads `libQnnHtp.so` from the first candidate folder that has it, or
/// returns [`Error::Library`] naming the library and every path tried.
pub(crate) fn load(explicit_dir: Option<&Path>) -> Result<&'static QnnLib> {
    static LOADED: OnceLock<Mutex<HashMap<PathBuf, &'static QnnLib>>> = OnceLock::new();
    let cache = LOADED.get_or_init(|| Mutex::new(HashMap::new()));

    let mut tried = Vec::new();
    let mut reason = String::from("no such file");
    for dir in candidate_dirs(explicit_dir) {
        let path = dir.join(LIBRARY);
        tried.push(path.display().to_string());
        if !path.is_file() {
            continue;
        }
        let path = std::fs::canonicalize(&path).unwrap_or(path);
        let mut guard = cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(lib) = guard.get(&path) {
            return Ok(lib);
        }
        match open_library(&path) {
            Ok(lib) => {
                let lib: &'static QnnLib = Box::leak(Box::new(lib));
                guard.insert(path, lib);
                return Ok(lib);
            }
            Err(e) => reason = e,
        }
    }
    Err(Error::Library {
        library: LIBRARY.to_string(),
        tried,
        reason,
    })
}

/// Points C stdio's `stdout` at a duplicate of stderr, once per process,
/// before the library is loaded.
///
/// `libQnnHtp.so` prints through C stdio (` # LIBNATIVE: ...` on stdout,
/// flushed at exit), which would land in the middle of the agent's JSON
/// Lines. Rust's own stdout writes to file descriptor 1 directly and is not
/// affected; C code in this process that prints to `stdout` (only vendor
/// libraries) goes to stderr instead. glibc and bionic (API 23+) both
/// declare `stdout` as an assignable variable.
fn divert_c_stdout() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        unsafe extern "C" {
            static mut stdout: *mut libc::FILE;
        }
        // SAFETY: dup/fdopen/setvbuf/fflush on valid descriptors and
        // streams; `stdout` is C's own global, replaced once, before any
        // library that prints to it is loaded, and never closed.
        unsafe {
            let fd = libc::dup(2);
            if fd < 0 {
                return;
            }
            let stream = libc::fdopen(fd, c"w".as_ptr());
            if stream.is_null() {
                libc::close(fd);
                return;
            }
            libc::setvbuf(stream, ptr::null_mut(), libc::_IOLBF, 0);
            libc::fflush(stdout);
            stdout = stream;
        }
    });
}

fn open_library(path: &Path) -> std::result::Result<QnnLib, String> {
    divert_c_stdout();
    // SAFETY: loading a shared library runs its initialisers; libQnnHtp.so's
    // are those of any QNN client. It is opened by absolute path so that its
    // RPATH ($ORIGIN) finds the C++ runtime beside it.
    let lib = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
    // SAFETY: the symbol has the documented QnnInterface_getProviders signature.
    let get_providers: ffi::GetProvidersFn = unsafe {
        *lib.get::<ffi::GetProvidersFn>(ffi::GET_PROVIDERS_SYMBOL)
            .map_err(|e| format!("{}: {e}", path.display()))?
    };
    let mut providers: *const *const ffi::Interface = ptr::null();
    let mut count = 0u32;
    // SAFETY: both out-pointers are valid; the list is owned by the library.
    let err = unsafe { get_providers(&mut providers, &mut count) };
    if err != ffi::QNN_SUCCESS || providers.is_null() {
        return Err(format!(
            "QnnInterface_getProviders failed: error {}",
            ffi::error_code(err)
        ));
    }
    let mut seen = Vec::new();
    for i in 0..count as usize {
        // SAFETY: `count` entries, each a pointer to a static QnnInterface_t.
        let iface = unsafe { &**providers.add(i) };
        let core = iface.api_version.core;
        seen.push(format!("backend {} core API {}", iface.backend_id, core));
        if core.major != 2 {
            continue;
        }
        let t = &iface.table;
        let required = [
            t.backend_create.is_some(),
            t.backend_free.is_some(),
            t.context_create.is_some(),
            t.context_free.is_some(),
            t.graph_create.is_some(),
            t.graph_add_node.is_some(),
            t.graph_finalize.is_some(),
            t.graph_execute.is_some(),
            t.tensor_create_graph_tensor.is_some(),
        ];
        if required.contains(&false) {
            seen.push("missing required functions".into());
            continue;
        }
        let mut build: *const c_char = ptr::null();
        let build_id = match t.backend_get_build_id {
            // SAFETY: writes a pointer to a static string.
            Some(f) if unsafe { f(&mut build) } == ffi::QNN_SUCCESS && !build.is_null() => {
                // SAFETY: non-null, NUL-terminated, owned by the library.
                unsafe { CStr::from_ptr(build) }
                    .to_string_lossy()
                    .into_owned()
            }
            _ => String::new(),
        };
        return Ok(QnnLib {
            table: &iface.table,
            api: iface.api_version,
            build_id,
            path: path.to_path_buf(),
            _lib: lib,
        });
    }
    Err(format!(
        "no provider with core API major 2 (found: {})",
        seen.join("; ")
    ))
}

/// A backend handle and, optionally, a device handle configured for a SoC,
/// with the performance vote that was applied.
pub(crate) struct Runtime {
    pub lib: &'static QnnLib,
    pub backend: Handle,
    pub device: Handle,
    /// The SoC model the device was configured for, if any.
    pub soc: Option<u32>,
    /// What the performance setting did, in words.
    pub perf_note: String,
    power_config_id: Option<(u32, ffi::PerfInfrastructure)>,
    /// The thread submitted graphs run on ([`Worker`]).
    worker: Option<Worker>,
    /// The rpcmem library whose buffers registered (probed at open), or
    /// why graph tensors stay client buffers.
    pub shared: std::result::Result<&'static RpcMem, String>,
    /// Whether a basic profile handle could be created, or why not.
    pub profiling: std::result::Result<(), String>,
    /// Why submitted runs go to the worker thread rather than
    /// `graphExecuteAsync`; `None` while the library offers it.
    async_refused: Mutex<Option<String>>,
}

// SAFETY: QNN handles are not bound to the creating thread; a Runtime is
// shared (Arc) between a backend and its prepared graphs, which only create
// and free their own contexts through it.
unsafe impl Send for Runtime {}
unsafe impl Sync for Runtime {}

impl Runtime {
    /// `backendCreate`, then `deviceCreate` (with the SoC model when given),
    /// then the performance vote (best effort).
    ///
    /// The library holds one SoC per process: two open runtimes with
    /// different SoC settings made the emulator fail `graphExecute` with
    /// error 1100. So a runtime whose SoC differs from that of runtimes
    /// still open is refused with an error naming both.
    pub fn open(lib: &'static QnnLib, soc: Option<u32>, perf: HtpPerf) -> Result<Runtime> {
        {
            let mut live = LIVE_SOC.lock().unwrap_or_else(|e| e.into_inner());
            match *live {
                Some((held, ref mut count)) if held == soc => *count += 1,
                Some((held, count)) => {
                    let name = |s: Option<u32>| {
                        s.map(|s| format!("SoC {s}"))
                            .unwrap_or_else(|| "no SoC".into())
                    };
                    return Err(Error::unsupported(
                        PROCESSOR_ID,
                        format!(
                            "opening with {} while {count} backend(s) with {} are open \
                             (libQnnHtp.so holds one SoC per process)",
                            name(soc),
                            name(held)
                        ),
                    ));
                }
                None => *live = Some((soc, 1)),
            }
        }
        // From here on, dropping `rt` releases the SoC claim and frees
        // whatever was created.
        let api = lib.api();
        let mut rt = Runtime {
            lib,
            backend: ptr::null_mut(),
            device: ptr::null_mut(),
            soc,
            perf_note: String::new(),
            power_config_id: None,
            worker: Some(Worker::spawn()?),
            shared: Err(String::new()),
            profiling: Err(String::new()),
            async_refused: Mutex::new(None),
        };
        // SAFETY: no log handle (its callback takes a va_list), no configs.
        let err = unsafe {
            api.backend_create.expect("checked at load")(
                ptr::null_mut(),
                ptr::null(),
                &mut rt.backend,
            )
        };
        lib.check("backendCreate", err)?;
        if let Some(create) = api.device_create {
            let mut custom = soc.map(ffi::HtpDeviceCustomConfig::soc);
            let config = custom.as_mut().map(|c| ffi::Config {
                option: ffi::CONFIG_OPTION_CUSTOM,
                custom: (c as *mut ffi::HtpDeviceCustomConfig).cast(),
            });
            let list: Vec<*const ffi::Config> = match &config {
                Some(c) => vec![c as *const ffi::Config, ptr::null()],
                None => vec![ptr::null()],
            };
            let mut device: Handle = ptr::null_mut();
            // SAFETY: a NULL-terminated config list whose entries outlive the call.
            let err = unsafe { create(ptr::null_mut(), list.as_ptr(), &mut device) };
            lib.check("deviceCreate", err)?;
            rt.device = device;
        } else if soc.is_some() {
            return Err(Error::unsupported(
                PROCESSOR_ID,
                "a SoC model (the library has no deviceCreate)",
            ));
        }
        rt.perf_note = rt.apply_perf(perf);
        rt.shared = rpcmem::detect().and_then(|r| rt.probe_shared(r));
        rt.profiling = Profile::create(lib, rt.backend).map(drop);
        *rt.async_refused
            .get_mut()
            .unwrap_or_else(|e| e.into_inner()) = async_support(lib).err();
        Ok(rt)
    }

    /// Registers one small rpcmem buffer in a scratch context: whether this
    /// library takes rpcmem as memory handles at all.
    pub fn probe_shared(
        &self,
        rpc: &'static RpcMem,
    ) -> std::result::Result<&'static RpcMem, String> {
        let ctx = self.create_context().map_err(|e| e.to_string())?;
        // Deregistered (dropped) before its context is freed.
        let probe =
            SharedBuf::register(rpc, self.lib, ctx, &[1, 64], ffi::DT_UFIXED_POINT_8, 64).map(drop);
        self.free_context(ctx);
        probe.map(|()| rpc)
    }

    /// Whether submitted runs use `graphExecuteAsync`.
    pub fn async_available(&self) -> bool {
        self.async_refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// Sends later runs to the worker thread: `graphExecuteAsync` refused one.
    pub fn refuse_async(&self, why: String) {
        *self.async_refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
    }

    /// Lets the next submitted run try `graphExecuteAsync` whatever the
    /// library declared (tests of the refusal path).
    #[cfg(test)]
    pub fn try_async(&self) {
        *self.async_refused.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// How submitted runs execute, in words.
    pub fn execution_note(&self) -> String {
        match &*self.async_refused.lock().unwrap_or_else(|e| e.into_inner()) {
            None => "graphExecuteAsync, completion flag raised by its notify callback".into(),
            Some(why) => format!("worker thread, completion flag (graphExecuteAsync: {why})"),
        }
    }

    /// Votes for the HTP clocks; returns what happened. Failures are not
    /// errors (the emulator has no clocks to vote for).
    fn apply_perf(&mut self, perf: HtpPerf) -> String {
        if perf == HtpPerf::Default {
            return "default (no vote)".into();
        }
        let lib = self.lib;
        let Some(get) = lib.api().device_get_infrastructure else {
            return "burst not applied: no deviceGetInfrastructure".into();
        };
        let mut infra: *const ffi::HtpInfrastructure = ptr::null();
        // SAFETY: writes a pointer to backend-owned memory.
        let err = unsafe { get(&mut infra) };
        if err != ffi::QNN_SUCCESS || infra.is_null() {
            return format!(
                "burst not applied: {}",
                lib.describe("deviceGetInfrastructure", err)
            );
        }
        // SAFETY: non-null, backend-owned, lives as long as the backend.
        let infra = unsafe { *infra };
        if infra.infra_type != ffi::HTP_INFRA_TYPE_PERF {
            return format!(
                "burst not applied: infrastructure type {}",
                infra.infra_type
            );
        }
        let perf_infra = infra.perf;
        let (Some(create), Some(set)) = (
            perf_infra.create_power_config_id,
            perf_infra.set_power_config,
        ) else {
            return "burst not applied: no power-config functions".into();
        };
        let mut id = 0u32;
        // SAFETY: device 0, core 0, valid out-pointer.
        let err = unsafe { create(0, 0, &mut id) };
        if err != ffi::QNN_SUCCESS {
            return format!(
                "burst not applied: {}",
                lib.describe("createPowerConfigId", err)
            );
        }
        self.power_config_id = Some((id, perf_infra));
        let dcvs = ffi::PowerConfig {
            option: ffi::HTP_POWER_CONFIG_DCVS_V3,
            dcvs: ffi::DcvsV3 {
                context_id: id,
                set_dcvs_enable: 1,
                dcvs_enable: 0,
                power_mode: ffi::HTP_POWERMODE_PERFORMANCE,
                set_sleep_latency: 1,
                sleep_latency: 40,
                set_sleep_disable: 1,
                sleep_disable: 1,
                set_bus_params: 1,
                bus_min: ffi::DCVS_VCORNER_MAX,
                bus_target: ffi::DCVS_VCORNER_MAX,
                bus_max: ffi::DCVS_VCORNER_MAX,
                set_core_params: 1,
                core_min: ffi::DCVS_VCORNER_MAX,
                core_target: ffi::DCVS_VCORNER_MAX,
                core_max: ffi::DCVS_VCORNER_MAX,
            },
        };
        let single = |option: u32, value: u32| ffi::PowerConfig {
            option,
            dcvs: ffi::DcvsV3 {
                context_id: value,
                ..Default::default()
            },
        };
        let rpc_latency = single(ffi::HTP_POWER_CONFIG_RPC_CONTROL_LATENCY, 100);
        let rpc_polling = single(ffi::HTP_POWER_CONFIG_RPC_POLLING_TIME, 9999);
        let mut applied = Vec::new();
        let mut refused = Vec::new();
        for (what, cfg) in [
            ("dcvs-v3 max corners", &dcvs),
            ("rpc latency 100us", &rpc_latency),
            ("rpc polling 9999us", &rpc_polling),
        ] {
            let list = [cfg as *const ffi::PowerConfig, ptr::null()];
            // SAFETY: a NULL-terminated list of valid configs.
            let err = unsafe { set(id, list.as_ptr()) };
            if err == ffi::QNN_SUCCESS {
                applied.push(what);
            } else {
                refused.push(format!("{what}: error {}", ffi::error_code(err)));
            }
        }
        match (applied.is_empty(), refused.is_empty()) {
            (_, true) => format!("burst ({})", applied.join(", ")),
            (true, false) => format!("burst not applied ({})", refused.join("; ")),
            (false, false) => format!(
                "burst partly applied ({}; refused {})",
                applied.join(", "),
                refused.join("; ")
            ),
        }
    }

    /// The thread that runs submitted graphs.
    pub fn worker(&self) -> Result<&Worker> {
        self.worker
            .as_ref()
            .ok_or_else(|| Error::backend(PROCESSOR_ID, "the runtime is closing"))
    }

    /// `contextCreate` on this backend and device.
    pub fn create_context(&self) -> Result<Handle> {
        let mut ctx: Handle = ptr::null_mut();
        // SAFETY: valid handles, no configs, valid out-pointer.
        let err = unsafe {
            self.lib.api().context_create.expect("checked at load")(
                self.backend,
                self.device,
                ptr::null(),
                &mut ctx,
            )
        };
        self.lib.check("contextCreate", err)?;
        Ok(ctx)
    }

    /// `contextFree`; errors are ignored (nothing can be done about them).
    pub fn free_context(&self, ctx: Handle) {
        if !ctx.is_null() {
            // SAFETY: `ctx` came from this backend and is freed once.
            unsafe { self.lib.api().context_free.expect("checked at load")(ctx, ptr::null_mut()) };
        }
    }
}

/// `Ok` where the library declares asynchronous execution
/// (`QnnProperty_hasCapability`) and has `graphExecuteAsync`.
fn async_support(lib: &QnnLib) -> std::result::Result<(), String> {
    let api = lib.api();
    if api.graph_execute_async.is_none() {
        return Err("not in the library's function table".into());
    }
    let Some(has) = api.property_has_capability else {
        return Err("no propertyHasCapability to ask".into());
    };
    // SAFETY: a plain query, valid before and after backendCreate.
    match unsafe { has(ffi::PROPERTY_GRAPH_SUPPORT_ASYNC_EXECUTION) } {
        ffi::PROPERTY_SUPPORTED => Ok(()),
        err => Err(format!(
            "the backend does not support it (hasCapability: error {})",
            ffi::error_code(err)
        )),
    }
}

/// The SoC setting of the open runtimes, and how many there are.
static LIVE_SOC: Mutex<Option<(Option<u32>, usize)>> = Mutex::new(None);

impl Drop for Runtime {
    fn drop(&mut self) {
        // No graph runs any more (each gemm waits for its run before it
        // goes); the worker ends before the handles are freed.
        drop(self.worker.take());
        {
            let mut live = LIVE_SOC.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, count)) = live.as_mut() {
                *count -= 1;
                if *count == 0 {
                    *live = None;
                }
            }
        }
        let api = self.lib.api();
        if let Some((id, perf)) = self.power_config_id.take() {
            if let Some(destroy) = perf.destroy_power_config_id {
                // SAFETY: an id created by createPowerConfigId, destroyed once.
                unsafe { destroy(id) };
            }
        }
        if !self.device.is_null() {
            if let Some(free) = api.device_free {
                // SAFETY: created by deviceCreate, freed once.
                unsafe { free(self.device) };
            }
        }
        if !self.backend.is_null() {
            // SAFETY: created by backendCreate, freed once, after every context
            // (each prepared graph holds an Arc<Runtime>).
            unsafe { api.backend_free.expect("checked at load")(self.backend) };
        }
    }
}
