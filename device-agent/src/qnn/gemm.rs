//! A prepared MatMul on the HTP: its graph, host buffers in the graph's
//! element types, and its execution, on the calling thread
//! ([`Gemm::execute`]) or on the runtime's worker thread ([`Gemm::submit`],
//! then [`Gemm::wait`] on the run's completion flag).

use std::ptr;
use std::sync::Arc;
use std::time::Instant;

use super::PROCESSOR_ID;
use super::ffi::{self, Handle};
use super::graph::{BuiltGraph, GraphIo, OwnedTensor, transpose};
use super::profile::Profile;
use super::runtime::QnnLib;
use super::worker::{self, Notify, RawTensors};
use crate::completion::Completion;
use crate::{Error, Gemm, GemmSpec, Result, SyncMode, Timed};

/// The buffers of one graph's inputs and output (client buffers or
/// registered rpcmem), and its profile handle.
struct Buffers {
    a: OwnedTensor,
    /// The weight buffer, when weights are a graph input.
    w: Option<OwnedTensor>,
    c: OwnedTensor,
    /// The device timer, where the library profiles.
    profile: Option<Profile>,
}

// SAFETY: owned memory and handles not bound to a thread (the raw tensors
// pointing into them are only formed during a run).
unsafe impl Send for Buffers {}

/// A graph handle handed to the worker thread.
#[derive(Clone, Copy)]
struct GraphHandle(Handle);

// SAFETY: QNN graph handles are not bound to the thread that made them; the
// graph outlives every run (a gemm waits for its run before it is dropped).
unsafe impl Send for GraphHandle {}

/// What one run measured: the host clock around the call, and the
/// device's own time where profiling gave one.
#[derive(Debug, Clone, Copy)]
struct Ran {
    host_us: f64,
    device_us: Option<f64>,
}

impl Buffers {
    /// The graph's inputs (in MatMul order) and output as raw tensors.
    fn tensors(&mut self, weight_first: bool) -> RawTensors {
        let a = self.a.raw(ffi::TENSOR_APP_WRITE, true);
        let inputs = match self.w.as_mut() {
            Some(w) if weight_first => vec![w.raw(ffi::TENSOR_APP_WRITE, true), a],
            Some(w) => vec![a, w.raw(ffi::TENSOR_APP_WRITE, true)],
            None => vec![a],
        };
        RawTensors {
            inputs,
            outputs: vec![self.c.raw(ffi::TENSOR_APP_READ, true)],
        }
    }

    fn profile_handle(&mut self) -> Handle {
        self.profile
            .as_mut()
            .map_or(ptr::null_mut(), Profile::for_run)
    }

    /// The device time of the run that just ended, µs.
    fn device_us(&self) -> Option<f64> {
        self.profile.as_ref()?.device_us().map(|(us, _)| us)
    }

    /// `graphExecute` over these buffers, on the calling thread.
    fn execute(&mut self, lib: &QnnLib, graph: GraphHandle, weight_first: bool) -> Result<Ran> {
        let RawTensors {
            inputs,
            mut outputs,
        } = self.tensors(weight_first);
        let profile = self.profile_handle();
        let exec = lib.api().graph_execute.expect("checked at load");
        let start = Instant::now();
        // SAFETY: the tensors point at buffers owned by `self`, sized for the
        // graph; ids are the backend-assigned ones.
        let err = unsafe {
            exec(
                graph.0,
                inputs.as_ptr(),
                inputs.len() as u32,
                outputs.as_mut_ptr(),
                outputs.len() as u32,
                profile,
                ptr::null_mut(),
            )
        };
        let host_us = start.elapsed().as_secs_f64() * 1e6;
        lib.check("graphExecute", err)?;
        Ok(Ran {
            host_us,
            device_us: self.device_us(),
        })
    }

    /// `graphExecuteAsync` over these buffers: the library's notify
    /// callback hands them back through `done`. `Err` gives them back
    /// with the refusal, for the worker thread to run instead.
    fn execute_async(
        mut self,
        lib: &'static QnnLib,
        graph: GraphHandle,
        weight_first: bool,
        done: &Arc<Completion<Done>>,
    ) -> std::result::Result<(), Box<(Buffers, String)>> {
        let tensors = self.tensors(weight_first);
        let profile = self.profile_handle();
        let d = Arc::clone(done);
        let start = Instant::now();
        // The closure owns the buffers until the run ends.
        let notify: Notify = Box::new(move |err| {
            let result = if err == ffi::QNN_SUCCESS {
                Ok(Ran {
                    host_us: start.elapsed().as_secs_f64() * 1e6,
                    device_us: self.device_us(),
                })
            } else {
                Err(Error::backend(
                    PROCESSOR_ID,
                    lib.describe("graphExecuteAsync", err),
                ))
            };
            d.finish((self, result));
        });
        // SAFETY: the tensors and buffers are owned by `notify`.
        let err = unsafe { worker::execute_async(lib, graph.0, tensors, profile, notify) };
        if err == ffi::QNN_SUCCESS {
            return Ok(());
        }
        // Refused: `notify` has already run and filled `done`.
        let ((bufs, _), _) = done.wait(SyncMode::Block);
        Err(Box::new((bufs, lib.describe("graphExecuteAsync", err))))
    }
}

/// What the run hands back: the buffers and the run's outcome.
type Done = (Buffers, Result<Ran>);

/// A prepared MatMul on the HTP: its graph, and host buffers for its
/// inputs and output in the processor's element types.
pub struct QnnGemm {
    spec: GemmSpec,
    built: BuiltGraph,
    /// `None` while a submitted run owns them.
    bufs: Option<Buffers>,
    /// What [`QnnGemm::memory`] says.
    memory: String,
    /// The submitted run, until it is waited for.
    inflight: Option<Arc<Completion<Done>>>,
    /// Scratch for the transposed output of `transposed`.
    scratch: Vec<f32>,
    has_input: bool,
}

// SAFETY: the graph and context handles are not bound to a thread, and the
// raw pointers built from the owned buffers are only formed during calls.
unsafe impl Send for QnnGemm {}

impl QnnGemm {
    pub(crate) fn new(spec: GemmSpec, built: BuiltGraph, weights: Option<&[f32]>) -> Result<Self> {
        let (bufs, memory) = Self::buffers(&built)?;
        let mut g = QnnGemm {
            spec,
            built,
            bufs: Some(bufs),
            memory,
            inflight: None,
            scratch: Vec::new(),
            has_input: false,
        };
        if let (Some(w), true) = (weights, g.built.io.w.is_some()) {
            g.write_weights(w)?;
        }
        Ok(g)
    }

    /// The graph's input and output buffers: registered rpcmem where the
    /// runtime has it and every registration succeeds, else client
    /// buffers; with the note that says which. And the profile handle.
    fn buffers(built: &BuiltGraph) -> Result<(Buffers, String)> {
        let client = || -> Result<Buffers> {
            Ok(Buffers {
                a: OwnedTensor::new(built.io.a.clone())?,
                w: built.io.w.clone().map(OwnedTensor::new).transpose()?,
                c: OwnedTensor::new(built.io.c.clone())?,
                profile: Profile::create(built.rt.lib, built.rt.backend).ok(),
            })
        };
        let mut bufs = client()?;
        let rpc = match &built.rt.shared {
            Ok(rpc) => *rpc,
            Err(why) => return Ok((bufs, format!("client buffers ({why})"))),
        };
        let (lib, ctx) = (built.rt.lib, built.context);
        let shared = bufs
            .a
            .share(rpc, lib, ctx)
            .and_then(|()| match bufs.w.as_mut() {
                Some(w) => w.share(rpc, lib, ctx),
                None => Ok(()),
            })
            .and_then(|()| bufs.c.share(rpc, lib, ctx));
        Ok(match shared {
            Ok(()) => (
                bufs,
                format!("shared: rpcmem memory handles ({})", rpc.name),
            ),
            // Dropping the partly shared set deregisters what did register.
            Err(why) => (client()?, format!("client buffers (memRegister: {why})")),
        })
    }

    /// Where the graph's inputs and output live: `shared: ...` (registered
    /// rpcmem, read in place) or `client buffers (why)` (copied by the
    /// library each run).
    pub fn memory(&self) -> &str {
        &self.memory
    }

    /// The graph's tensors and encodings.
    pub fn io(&self) -> &GraphIo {
        &self.built.io
    }

    /// Every profiling event of the latest run, for the tests' record.
    #[cfg(test)]
    pub(crate) fn profile_events(&self) -> Vec<String> {
        match self.bufs.as_ref().and_then(|b| b.profile.as_ref()) {
            Some(p) => p.describe_events(),
            None => vec!["no profile handle".into()],
        }
    }

    /// The completion flag of the submitted run: `None` when no run is
    /// submitted, else whether the worker has finished it. Reading it never
    /// blocks.
    pub fn finished(&self) -> Option<bool> {
        self.inflight.as_ref().map(|c| c.is_done())
    }

    fn bufs(&mut self) -> Result<&mut Buffers> {
        self.bufs
            .as_mut()
            .ok_or_else(|| Error::backend(PROCESSOR_ID, "a submitted run has not been waited for"))
    }

    /// Writes the weights `W[K,N]` (row-major f32) of a graph whose weights
    /// are an input (`weights: input`); for static graphs they are baked in.
    pub fn write_weights(&mut self, w: &[f32]) -> Result<()> {
        let (_, k, n) = self.spec.shape.mkn();
        let (k, n) = (k as usize, n as usize);
        let spec = self.spec;
        let weight_first = self.built.io.weight_first;
        let Some(t) = self.bufs()?.w.as_mut() else {
            return Err(Error::unsupported(
                PROCESSOR_ID,
                "writing weights of a static-weight graph (they are baked in)",
            ));
        };
        spec.check_weights_len(PROCESSOR_ID, w.len())?;
        if weight_first {
            t.desc.element.encode(&transpose(w, k, n), &mut t.data);
        } else {
            t.desc.element.encode(w, &mut t.data);
        }
        Ok(())
    }

    fn check_input(&self) -> Result<()> {
        if self.has_input {
            return Ok(());
        }
        Err(Error::BadRequest {
            field: "input".into(),
            message: "execute before write_input".into(),
        })
    }
}

impl Drop for QnnGemm {
    /// A run still in flight is waited for: the graph it runs is freed next.
    /// The buffers go before the graph's context: registered memory is
    /// deregistered while its context lives.
    fn drop(&mut self) {
        if let Some(c) = self.inflight.take() {
            let _ = c.wait(SyncMode::Block);
        }
        drop(self.bufs.take());
    }
}

impl Gemm for QnnGemm {
    /// A weights-as-input graph's weights, written before its runs; a
    /// static-weight graph's are baked in and refused.
    fn write_weights(&mut self, w: &[f32]) -> Result<()> {
        QnnGemm::write_weights(self, w)
    }
    fn spec(&self) -> &GemmSpec {
        &self.spec
    }

    fn prepare_us(&self) -> Option<f64> {
        Some(self.built.prepare_us)
    }

    fn write_input(&mut self, a: &[f32]) -> Result<()> {
        self.spec.check_input_len(PROCESSOR_ID, a.len())?;
        if let Some(limit) = self.built.io.act_abs_max {
            if let Some(x) = a.iter().find(|x| x.abs() > limit || !x.is_finite()) {
                return Err(Error::BadRequest {
                    field: "input".into(),
                    message: format!(
                        "value {x} is outside the activation range ±{limit} the {} encoding \
                         was prepared for (HETERO_QNN_ACT_MAX)",
                        self.spec.dtype
                    ),
                });
            }
        }
        // Both orders read A[M,K] as stored: transposed transposes it in the graph.
        let t = &mut self.bufs()?.a;
        t.desc.element.encode(a, &mut t.data);
        self.has_input = true;
        Ok(())
    }

    fn execute(&mut self) -> Result<Timed> {
        self.check_input()?;
        let (lib, graph) = (self.built.rt.lib, GraphHandle(self.built.graph));
        let weight_first = self.built.io.weight_first;
        let ran = self.bufs()?.execute(lib, graph, weight_first)?;
        Ok(Timed {
            device_us: ran.device_us,
            host_us: ran.host_us,
            ran_us: None,
        })
    }

    /// Hands the run to `graphExecuteAsync` where the library offers it,
    /// else to the runtime's worker thread, and returns at once.
    fn submit(&mut self) -> Result<()> {
        self.check_input()?;
        let rt = Arc::clone(&self.built.rt);
        let mut bufs = self
            .bufs
            .take()
            .ok_or_else(|| Error::backend(PROCESSOR_ID, "already submitted"))?;
        let (lib, graph) = (rt.lib, GraphHandle(self.built.graph));
        let weight_first = self.built.io.weight_first;
        if rt.async_available() {
            let done = Completion::<Done>::new();
            match bufs.execute_async(lib, graph, weight_first, &done) {
                Ok(()) => {
                    self.inflight = Some(done);
                    return Ok(());
                }
                Err(back) => {
                    let (back, why) = *back;
                    rt.refuse_async(why);
                    bufs = back;
                }
            }
        }
        let worker = match rt.worker() {
            Ok(w) => w,
            Err(e) => {
                self.bufs = Some(bufs);
                return Err(e);
            }
        };
        let done = Completion::<Done>::new();
        let d = Arc::clone(&done);
        // Fails only when the worker thread has died; the buffers go with it.
        worker.run(Box::new(move || {
            let result = bufs.execute(lib, graph, weight_first);
            d.finish((bufs, result));
        }))?;
        self.inflight = Some(done);
        Ok(())
    }

    /// Waits on the run's completion flag (poll) or its condition variable
    /// (block). `ran_us` is the run's end as the worker or the notify
    /// callback saw it; `device_us` the profiled device time, if any.
    fn wait(&mut self, mode: SyncMode) -> Result<Timed> {
        let done = self
            .inflight
            .take()
            .ok_or_else(|| Error::backend(PROCESSOR_ID, "wait without submit"))?;
        let ((bufs, result), ran_us) = done.wait(mode);
        let host_us = done.started().elapsed().as_secs_f64() * 1e6;
        self.bufs = Some(bufs);
        let ran = result?;
        Ok(Timed {
            device_us: ran.device_us,
            host_us,
            ran_us: Some(ran_us),
        })
    }

    fn read_output(&mut self, c: &mut [f32]) -> Result<()> {
        let (m, _, n) = self.spec.shape.mkn();
        let (m, n) = (m as usize, n as usize);
        self.spec.check_output_len(PROCESSOR_ID, c.len())?;
        let weight_first = self.built.io.weight_first;
        let mut scratch = std::mem::take(&mut self.scratch);
        let out = &self.bufs()?.c;
        let element = out.desc.element;
        let saturated = if weight_first {
            scratch.resize(m * n, 0.0);
            let s = element.decode(&out.data, &mut scratch);
            for r in 0..n {
                for col in 0..m {
                    c[col * n + r] = scratch[r * m + col];
                }
            }
            s
        } else {
            element.decode(&out.data, c)
        };
        self.scratch = scratch;
        // One value at an end of the range can be legitimate; many cannot.
        if saturated > 0 && saturated * 1000 > m * n {
            return Err(Error::backend(
                PROCESSOR_ID,
                format!(
                    "{saturated} of {} outputs sit at the ends of the {} output encoding: \
                     saturated (activations larger than the prepared range?)",
                    m * n,
                    self.spec.dtype
                ),
            ));
        }
        Ok(())
    }

    fn backend_id(&self) -> String {
        PROCESSOR_ID.to_string()
    }
}
