use hetero_plan::{DType, GemmShape, OperandOrder, Processor, WeightMode};

use crate::{Error, Result};

/// What to prepare: shape, element type, operand order, weight mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GemmSpec {
    /// `C[M,N] = A[M,K] · W[K,N]`.
    pub shape: GemmShape,
    /// Element type the processor computes in.
    pub dtype: DType,
    /// `aw` or `transposed` (the processor computes `Cᵀ = Wᵀ·Aᵀ`).
    pub order: OperandOrder,
    /// Weights baked into a static graph or passed as an input.
    pub weights: WeightMode,
}

impl GemmSpec {
    /// An error unless `len` is the K·N values of the weights `W[K,N]`.
    pub(crate) fn check_weights_len(&self, id: &str, len: usize) -> Result<()> {
        let (_, k, n) = self.shape.mkn();
        check_len(id, "weights", len, ("W", k, n))
    }

    /// An error unless `len` is the M·K values of the activation `A[M,K]`.
    pub(crate) fn check_input_len(&self, id: &str, len: usize) -> Result<()> {
        let (m, k, _) = self.shape.mkn();
        check_len(id, "input", len, ("A", m, k))
    }

    /// An error unless `len` is the M·N values of the output `C[M,N]`.
    pub(crate) fn check_output_len(&self, id: &str, len: usize) -> Result<()> {
        let (m, _, n) = self.shape.mkn();
        check_len(id, "output", len, ("C", m, n))
    }
}

/// An error unless `got` values fill the matrix `name[rows, cols]`.
fn check_len(
    id: &str,
    field: &str,
    got: usize,
    (name, rows, cols): (&str, u32, u32),
) -> Result<()> {
    let want = rows as usize * cols as usize;
    if got == want {
        return Ok(());
    }
    Err(Error::BadRequest {
        field: field.into(),
        message: format!("{id}: {got} values for {name}[{rows},{cols}]; expected {want}"),
    })
}

/// How the host learns that a submitted GEMM finished.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SyncMode {
    /// The API's blocking wait (clFinish, event wait, stream sync, join).
    Block,
    /// Sleep for `predicted_us` minus a margin, then spin on a completion
    /// flag in host-visible memory (HeteroLLM §4.2).
    Poll {
        /// The predicted execution time, µs.
        predicted_us: f64,
    },
}

/// The pause between two checks of a polling wait: a busy-wait hint for
/// the first [`SpinThenYield::SPINS`] checks, then a yield to the scheduler
/// between checks. Where the host thread shares a core with a CPU group's
/// worker (every core runs one, or the host was placed on a worker's
/// core), a pure spin holds that core for a whole scheduler slice, and the
/// worker's share of a CPU part finishes milliseconds late: an H100 host's
/// offload plan polled at 1.15–1.18 of its prediction with operators
/// taking up to 15 ms, blocking at 1.10 (`docs/benchmarks.md`, Runtime).
#[derive(Debug, Default)]
pub(crate) struct SpinThenYield {
    spins: u32,
}

impl SpinThenYield {
    /// Busy-wait checks before the wait yields between checks (about
    /// 50–100 µs of spinning on a current x86 core).
    pub(crate) const SPINS: u32 = 2000;

    pub(crate) fn pause(&mut self) {
        if self.spins < Self::SPINS {
            self.spins += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// The time one execution took.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timed {
    /// Device-side time (events), where the API has it.
    pub device_us: Option<f64>,
    /// Host clock from submit to observed completion.
    pub host_us: f64,
    /// Host clock from submit to the run's own end, as the processor's
    /// workers saw it, where they tell (a CPU group's pool): a wait that
    /// starts late, after other parts' waits, observes the end late, and
    /// `host_us` then counts the lateness.
    pub ran_us: Option<f64>,
}

impl Timed {
    /// The best time available: the device timer, else the run's own end,
    /// else the host clock.
    pub fn best_us(&self) -> f64 {
        self.device_us.or(self.ran_us).unwrap_or(self.host_us)
    }
}

/// A GEMM prepared on one processor, with its weights resident.
///
/// Inputs and outputs are always given in the logical layout, row-major
/// `A[M,K]` and `C[M,N]` f32, whatever the operand order and dtype: the
/// backend converts and transposes outside the timed [`execute`](Gemm::execute).
pub trait Gemm: Send {
    /// What was prepared.
    fn spec(&self) -> &GemmSpec;

    /// Time spent building/finalising a static graph, µs (static-graph
    /// processors only).
    fn prepare_us(&self) -> Option<f64> {
        None
    }

    /// Copies the activation `A[M,K]` (row-major f32) to where the processor
    /// reads it, or into the backend's own memory that the next run copies
    /// from (CUDA, small inputs: the copy then runs inside that run's
    /// launch and device time). Either way the caller may reuse `a` once
    /// this returns.
    fn write_input(&mut self, a: &[f32]) -> Result<()>;

    /// Runs the GEMM once on the current input and waits for it.
    fn execute(&mut self) -> Result<Timed>;

    /// Copies the result `C[M,N]` (row-major f32) of the last run back
    /// (from the backend's own memory where the run already copied it).
    fn read_output(&mut self, c: &mut [f32]) -> Result<()>;

    /// Replaces the resident weights `W[K,N]` (row-major f32) without
    /// preparing again: weights stored on the host and copied to the
    /// processor for every run (ScheInfer's CG rows).
    fn write_weights(&mut self, w: &[f32]) -> Result<()> {
        let _ = w;
        Err(Error::unsupported(
            self.backend_id(),
            "writing weights after prepare",
        ))
    }

    /// Keeps the weights `W[K,N]` (row-major f32) in host memory, already
    /// in the processor's element type and layout (page-locked where the
    /// processor has it), and copies them to the processor for every later
    /// execution: ScheInfer's CG rows, stored on the CPU side and streamed
    /// over PCIe for every run, without converting them every run as
    /// [`write_weights`](Gemm::write_weights) would. The execution's timed
    /// part holds what of the copy it waits for: all of it, unless
    /// [`prefetch`](Gemm::prefetch) started it earlier. The processor may
    /// then drop its own copy of the weights (CUDA's GEMMs share a staging
    /// ring instead: [`Backend::staging_bytes`]). A backend without it
    /// returns [`Error::Unsupported`]; callers then fall back to
    /// `write_weights` before each run.
    fn host_weights(&mut self, w: &[f32]) -> Result<()> {
        let _ = w;
        Err(Error::unsupported(
            self.backend_id(),
            "weights kept on the host and copied every run",
        ))
    }

    /// Starts copying the host weights ([`host_weights`](Gemm::host_weights))
    /// toward the processor now, without waiting, so that the copy overlaps
    /// what runs before this GEMM; its next execution then waits only for
    /// what is left of the copy. A caller prefetches the GEMM that will run
    /// next, right after submitting the current one. Where nothing was
    /// prefetched, or the prefetched copy had to give way to another, the
    /// execution copies as without it: prefetching changes when the copy
    /// runs, never what the GEMM reads. The default does nothing (weights
    /// resident, or a backend that copies them inside its run).
    fn prefetch(&mut self) -> Result<()> {
        Ok(())
    }

    /// Leaves the caches the next [`execute`](Gemm::execute) reads through
    /// as a run after other operators would find them: this GEMM's weights
    /// and inputs no longer cached from the run before. Not timed. The
    /// default evicts the host's caches from threads of its own; the cpu
    /// backend has its own workers do it, an OpenCL device runs a kernel on
    /// its own queue, and CUDA evicts its L2.
    fn evict_caches(&mut self) -> Result<()> {
        crate::evict::evict_host_caches();
        Ok(())
    }

    /// One execution timed without the host's launch path, where the
    /// backend can hold its queue until the work is queued (CUDA); `None`,
    /// running nothing, where it cannot. For `RunParams::kernel_timer`.
    fn execute_kernel_only(&mut self) -> Result<Option<Timed>> {
        Ok(None)
    }

    /// Starts an execution without waiting (for overlapping processors).
    fn submit(&mut self) -> Result<()> {
        Err(Error::unsupported(self.backend_id(), "asynchronous submit"))
    }

    /// Waits for the execution started by [`submit`](Gemm::submit).
    fn wait(&mut self, mode: SyncMode) -> Result<Timed> {
        let _ = mode;
        Err(Error::unsupported(self.backend_id(), "asynchronous wait"))
    }

    /// The processor id, for error messages.
    fn backend_id(&self) -> String;
}

/// One processor opened by a backend.
///
/// Few required methods; optional capabilities default to
/// [`Error::Unsupported`]. Object-safe, so the runtime can hold
/// `Box<dyn Backend>` per processor.
pub trait Backend: Send {
    /// Describes the processor (id, kind, API, capabilities, simulated).
    fn processor(&self) -> &Processor;

    /// Prepares a GEMM with the given weights `W[K,N]` (row-major f32; the
    /// backend quantises or converts them to `spec.dtype`). For a
    /// static-graph processor this builds and finalises the graph and
    /// records the time in [`Gemm::prepare_us`].
    fn prepare(&mut self, spec: &GemmSpec, weights: &[f32]) -> Result<Box<dyn Gemm>>;

    /// Runs one microbenchmark and returns its timed samples, µs.
    fn microbench(&mut self, req: &hetero_plan::MicrobenchRequest) -> Result<Vec<f64>> {
        Err(Error::unsupported(
            &self.processor().id,
            format!("microbenchmark {}", crate::protocol::bench_name(req.bench)),
        ))
    }

    /// Allocates `len` zeroed `f32` values of host memory that this
    /// processor's copies read and write directly: page-locked memory on a
    /// discrete GPU, so that [`Gemm::write_input`] and [`Gemm::read_output`]
    /// from and into it are one DMA each. A caller that moves activations
    /// every operator keeps them in such memory ([`crate::HostBuf`]).
    /// Processors that share the host's memory have nothing better than the
    /// heap and return [`Error::Unsupported`].
    fn alloc_host(&self, len: usize) -> Result<Box<dyn crate::HostMem>> {
        let _ = len;
        Err(Error::unsupported(
            &self.processor().id,
            "host memory for direct copies",
        ))
    }

    /// Bytes of the processor's own memory held to stage weights that
    /// GEMMs keep on the host ([`Gemm::host_weights`]): CUDA's staging ring,
    /// which such GEMMs share instead of holding their weights each. `None`
    /// where it holds none.
    fn staging_bytes(&self) -> Option<u64> {
        None
    }

    /// How many staging buffers the GEMMs that keep their weights on the
    /// host share, each as large as the largest of them, where they share
    /// some instead of each holding its weights in the processor's memory
    /// ([`staging_bytes`](Backend::staging_bytes)); `None` otherwise. For
    /// memory estimates made before anything is prepared.
    fn staging_slots(&self) -> Option<usize> {
        None
    }

    /// Relative error bound for verifying this dtype against the f64 reference.
    fn tolerance(&self, dtype: DType, k: u32) -> f64 {
        default_tolerance(dtype, k)
    }

    /// The conditions a measurement on this processor is taken under: the
    /// timestamp, the frequency and temperature sysfs shows, and the host
    /// speed probe. The default reads every CPU core; a CPU backend narrows
    /// it to its own cores.
    fn conditions(&self) -> hetero_plan::Conditions {
        crate::conditions::read_probed(None)
    }
}

/// The default relative error bound for a dtype at inner dimension `k`:
/// the unit round-off of the accumulation type grows with `sqrt(k)`.
pub fn default_tolerance(dtype: DType, k: u32) -> f64 {
    let growth = (k.max(1) as f64).sqrt();
    match dtype {
        DType::F32 => 1e-5 * growth,
        DType::F16 => 2e-3 * growth,
        DType::Bf16 => 1.6e-2 * growth,
        // Quantised types are checked against the reference of the
        // dequantised operands; the bound covers output rounding.
        DType::U8 | DType::W8a8 => 5e-2,
        DType::U16 | DType::W8a16 | DType::W4a16 => 2e-2,
    }
}

#[cfg(test)]
mod tests {
    use super::SpinThenYield;

    /// A polling wait spins for its first checks, then only yields: the
    /// busy-wait count stops at the bound, however long the wait.
    #[test]
    fn a_poll_spins_then_yields() {
        let mut p = SpinThenYield::default();
        for _ in 0..SpinThenYield::SPINS - 1 {
            p.pause();
        }
        assert_eq!(p.spins, SpinThenYield::SPINS - 1);
        for _ in 0..100 {
            p.pause();
        }
        assert_eq!(p.spins, SpinThenYield::SPINS);
    }
}
