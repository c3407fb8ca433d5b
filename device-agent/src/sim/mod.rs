//! npu-sim: a timing model of a weight-stationary systolic array.
//!
//! **Not a processor.** The times are computed by [`SimParams::model`], never
//! measured; every row of this backend says `timing: simulated` and its
//! [`Processor`] has `simulated: true`. The product itself is computed for
//! real on the CPU (the `gemm` crate), so the sweep verifies it like any other
//! backend's and a broken simulator fails its rows.
//!
//! The default parameters are **illustrative, not any real chip**: a 32×32
//! array at 1 GHz (2 TFLOP/s in f16), an 8 MiB on-chip buffer and 60 GB/s of
//! DRAM bandwidth, chosen so that the three characteristics HeteroLLM §3.2
//! reports for mobile NPUs show up at LLM shapes:
//!
//! 1. **stage performance**: every dimension is padded to the array edge
//!    (K to `rows`, the stationary operand's columns to `cols`, the streamed
//!    rows to `stream_tile`), so latency is flat between multiples of 32 and
//!    steps at them;
//! 2. **order sensitivity**: the second operand is held stationary in the
//!    array. In `aw` order that is the weight `W[K,N]`; each of its
//!    `K/32 · N/32` tiles costs a load and a pipeline fill and then streams only
//!    M rows, so with few tokens the array mostly loads weights. `transposed`
//!    (`Cᵀ = Wᵀ·Aᵀ`) holds the small `Aᵀ` and streams the large `Wᵀ` through it;
//! 3. **shape sensitivity**: for the same FLOPs, an input with more rows
//!    than columns (M > K) needs fewer stationary tiles, each streamed longer.
//!
//! The model, per execution (`e` bytes per element, `P × K` streamed operand,
//! `K × Q` stationary operand, all dimensions padded as above):
//!
//! ```text
//! tiles  = K/rows · Q/cols,            waves = ceil(tiles / arrays)
//! load   = rows + rows·cols·e / load_bytes_per_cycle     (cycles per tile)
//! fill   = rows + cols                                    (cycles per tile)
//! stream = P / rate(dtype)                                (cycles per tile)
//! loop A (stationary tile outer):  cycles = waves · (load + fill + stream)
//!          DRAM = Y + out + X · (1 if X fits half the buffer else Q/cols)
//! loop B (streamed chunk outer):   chunks = ceil(P / rows of X that fit half the buffer)
//!          cycles = waves · (chunks · (load + fill) + stream)
//!          DRAM = X + out + Y · (1 if Y fits half the buffer else chunks)
//! time   = launch_us + min over A, B of max(cycles / clock, DRAM / bandwidth)
//! ```
//!
//! Graph prepare grows with the graph's tensors: `prepare_base_us +
//! prepare_us_per_mib · MiB(weights if static + activations + outputs)`.
//!
//! The model is deterministic: no noise is added, so repeated runs give the
//! same time and a coefficient of variation of 0. The real product is computed
//! once per input written (repeated executions of the same input reuse it),
//! so a sweep of large shapes costs one CPU GEMM per case, not one per run.

use std::path::Path;
use std::time::Instant;

use gemm::Parallelism;
use hetero_plan::{
    Capabilities, DType, GemmShape, MicrobenchRequest, OperandOrder, Processor, ProcessorApi,
    ProcessorKind, Validate, WeightMode,
};
use serde::{Deserialize, Serialize};

use crate::dense::Dense;
use crate::{Backend, Error, Gemm, GemmSpec, OpenOptions, Result, Timed};

/// The processor id of the simulator.
pub const ID: &str = "npu-sim";

/// Parameters of the timing model. Every field has an illustrative default
/// (see the module documentation); a RON file may set any subset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimParams {
    /// PE rows of the array: the K tile.
    pub rows: u32,
    /// PE columns: the tile of the stationary operand's columns.
    pub cols: u32,
    /// Arrays working on different tiles at once.
    pub arrays: u32,
    /// Streamed rows are padded to a multiple of this.
    pub stream_tile: u32,
    /// Clock, MHz.
    pub clock_mhz: f64,
    /// On-chip buffer, bytes; half holds the streamed operand, half the stationary.
    pub buffer_bytes: u64,
    /// DRAM bandwidth, GB/s (10⁹ bytes per second).
    pub dram_gbps: f64,
    /// Bytes per cycle from the buffer into the array when a tile is loaded.
    pub load_bytes_per_cycle: f64,
    /// Fixed cost of one execution, µs.
    pub launch_us: f64,
    /// Streamed rows per cycle for f32 relative to f16 (f16 streams one row per cycle).
    pub f32_rate: f64,
    /// Fixed cost of preparing a graph, µs.
    pub prepare_base_us: f64,
    /// Prepare cost per MiB of graph tensors, µs.
    pub prepare_us_per_mib: f64,
}

impl Default for SimParams {
    fn default() -> Self {
        SimParams {
            rows: 32,
            cols: 32,
            arrays: 1,
            stream_tile: 32,
            clock_mhz: 1000.0,
            buffer_bytes: 8 << 20,
            dram_gbps: 60.0,
            load_bytes_per_cycle: 64.0,
            launch_us: 20.0,
            f32_rate: 0.25,
            prepare_base_us: 20_000.0,
            prepare_us_per_mib: 4_000.0,
        }
    }
}

impl Validate for SimParams {
    fn validate(&self) -> std::result::Result<(), (String, String)> {
        let ints = [
            ("rows", self.rows),
            ("cols", self.cols),
            ("arrays", self.arrays),
            ("stream_tile", self.stream_tile),
        ];
        for (f, v) in ints {
            if v == 0 {
                return Err((f.into(), "must be at least 1".into()));
            }
        }
        if self.buffer_bytes == 0 {
            return Err(("buffer_bytes".into(), "must be at least 1".into()));
        }
        let positive = [
            ("clock_mhz", self.clock_mhz),
            ("dram_gbps", self.dram_gbps),
            ("load_bytes_per_cycle", self.load_bytes_per_cycle),
            ("f32_rate", self.f32_rate),
        ];
        for (f, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err((f.into(), format!("must be a positive number, got {v}")));
            }
        }
        let non_negative = [
            ("launch_us", self.launch_us),
            ("prepare_base_us", self.prepare_base_us),
            ("prepare_us_per_mib", self.prepare_us_per_mib),
        ];
        for (f, v) in non_negative {
            if !(v.is_finite() && v >= 0.0) {
                return Err((f.into(), format!("must be zero or more, got {v}")));
            }
        }
        Ok(())
    }
}

/// Which loop nest the model chose, and the two bounds of its time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Breakdown {
    /// Total simulated time, µs.
    pub total_us: f64,
    /// Array busy time of the chosen loop nest, µs.
    pub compute_us: f64,
    /// DRAM time of the chosen loop nest, µs.
    pub memory_us: f64,
    /// True when the stationary-tile-outer nest (loop A) was chosen.
    pub stationary_outer: bool,
}

fn ceil_to(x: u64, t: u64) -> u64 {
    x.div_ceil(t) * t
}

impl SimParams {
    /// Reads a RON (or JSON) file; errors name the file, field and line:column.
    pub fn load(path: &Path) -> hetero_plan::Result<SimParams> {
        hetero_plan::load(path)
    }

    /// Bytes per element of a dtype the simulator runs, `None` for the rest.
    pub fn element_bytes(dtype: DType) -> Option<u64> {
        match dtype {
            DType::F16 => Some(2),
            DType::F32 => Some(4),
            _ => None,
        }
    }

    /// `(P, K, Q)`: streamed rows, inner dimension, stationary columns, for
    /// the order the processor computes in.
    fn operands(spec: &GemmSpec) -> (u64, u64, u64) {
        let (m, k, n) = spec.shape.mkn();
        match spec.order {
            OperandOrder::Aw => (m as u64, k as u64, n as u64),
            OperandOrder::Transposed => (n as u64, k as u64, m as u64),
        }
    }

    /// The simulated execution time and how it arose. `None` for a dtype
    /// the simulator does not run.
    pub fn model(&self, spec: &GemmSpec) -> Option<Breakdown> {
        let e = Self::element_bytes(spec.dtype)?;
        let rate = if spec.dtype == DType::F32 {
            self.f32_rate
        } else {
            1.0
        };
        let (p, k, q) = Self::operands(spec);
        let (r, c, t) = (self.rows as u64, self.cols as u64, self.stream_tile as u64);
        let (pp, kp, qp) = (ceil_to(p, t), ceil_to(k, r), ceil_to(q, c));
        let tiles = (kp / r) * (qp / c);
        let waves = tiles.div_ceil(self.arrays as u64) as f64;
        let load = r as f64 + (r * c * e) as f64 / self.load_bytes_per_cycle;
        let fill = (r + c) as f64;
        let stream = pp as f64 / rate;
        let (x, y, out) = (
            (pp * kp * e) as f64,
            (kp * qp * e) as f64,
            (pp * qp * e) as f64,
        );
        let half = (self.buffer_bytes / 2) as f64;
        // Loop A: each stationary tile once, the whole stream through it.
        let cyc_a = waves * (load + fill + stream);
        let bytes_a = y + out + if x <= half { x } else { x * (qp / c) as f64 };
        // Loop B: chunks of the stream that fit the buffer, every tile per chunk.
        let chunk_rows = ((half / (kp * e) as f64) as u64 / t * t).max(t);
        let chunks = pp.div_ceil(chunk_rows) as f64;
        let cyc_b = waves * (chunks * (load + fill) + stream);
        let bytes_b = x + out + if y <= half { y } else { y * chunks };
        let bytes_per_us = self.dram_gbps * 1e3;
        let time = |cyc: f64, bytes: f64| {
            let (cu, mu) = (cyc / self.clock_mhz, bytes / bytes_per_us);
            (cu.max(mu), cu, mu)
        };
        let (ta, ca, ma) = time(cyc_a, bytes_a);
        let (tb, cb, mb) = time(cyc_b, bytes_b);
        let (best, compute_us, memory_us, stationary_outer) = if ta <= tb {
            (ta, ca, ma, true)
        } else {
            (tb, cb, mb, false)
        };
        Some(Breakdown {
            total_us: self.launch_us + best,
            compute_us,
            memory_us,
            stationary_outer,
        })
    }

    /// The simulated graph prepare time, µs. `None` for a dtype the
    /// simulator does not run.
    pub fn prepare_us(&self, spec: &GemmSpec) -> Option<f64> {
        let e = Self::element_bytes(spec.dtype)?;
        let (p, k, q) = Self::operands(spec);
        let (r, c, t) = (self.rows as u64, self.cols as u64, self.stream_tile as u64);
        let (pp, kp, qp) = (ceil_to(p, t), ceil_to(k, r), ceil_to(q, c));
        // The weights are whichever operand came from W.
        let (wts, act) = match spec.order {
            OperandOrder::Aw => (kp * qp, pp * kp),
            OperandOrder::Transposed => (pp * kp, kp * qp),
        };
        let baked = if spec.weights == WeightMode::Static {
            wts
        } else {
            0
        };
        let mib = ((baked + act + pp * qp) * e) as f64 / (1u64 << 20) as f64;
        Some(self.prepare_base_us + self.prepare_us_per_mib * mib)
    }
}

/// Opens the simulator with the parameters of `opts.sim_params` or the defaults.
pub fn open(opts: &OpenOptions) -> Result<Vec<Box<dyn Backend>>> {
    let (params, source) = match &opts.sim_params {
        Some(path) => {
            let p = SimParams::load(path).map_err(|e| Error::BadRequest {
                field: "sim_params".into(),
                message: e.to_string(),
            })?;
            (p, path.display().to_string())
        }
        None => (SimParams::default(), "illustrative defaults".to_string()),
    };
    Ok(vec![Box::new(SimBackend::new(params, &source))])
}

/// The simulator as a processor.
pub struct SimBackend {
    processor: Processor,
    params: SimParams,
}

impl SimBackend {
    /// A simulator with these parameters; `source` names where they came from.
    pub fn new(params: SimParams, source: &str) -> SimBackend {
        let processor = Processor {
            id: ID.into(),
            kind: ProcessorKind::Npu,
            api: ProcessorApi::Sim,
            name: format!(
                "npu-sim: {}x{} weight-stationary array x{} @ {} MHz (simulated; illustrative, not a real chip)",
                params.rows, params.cols, params.arrays, params.clock_mhz
            ),
            driver: format!("hetero timing model 1 ({source})"),
            capabilities: Capabilities {
                dtypes: vec![DType::F32, DType::F16],
                static_graphs: true,
                unified_memory: true,
                device_timer: false,
                host_flag: false,
                order_free: false,
                non_gemm: false,
                tile: Some(params.rows.min(params.cols).min(params.stream_tile)),
                compute_units: Some(params.arrays),
                memory_bytes: None,
                launch_copy_max_bytes: None,
                extensions: Vec::new(),
            },
            simulated: true,
            emulated: false,
        };
        SimBackend { processor, params }
    }

    /// The model's parameters.
    pub fn params(&self) -> &SimParams {
        &self.params
    }
}

impl Backend for SimBackend {
    fn processor(&self) -> &Processor {
        &self.processor
    }

    fn prepare(&mut self, spec: &GemmSpec, weights: &[f32]) -> Result<Box<dyn Gemm>> {
        let (Some(model), Some(prepare_us)) =
            (self.params.model(spec), self.params.prepare_us(spec))
        else {
            return Err(Error::unsupported(ID, format!("dtype {}", spec.dtype)));
        };
        let dense = Dense::new(ID, spec, weights)?;
        Ok(Box::new(SimGemm {
            dense,
            spec: *spec,
            model_us: model.total_us,
            prepare_us,
            computed: false,
        }))
    }

    fn microbench(&mut self, req: &MicrobenchRequest) -> Result<Vec<f64>> {
        // Graph prepare is run by the sweep through `prepare`; the simulator
        // models nothing else (no copies, queues or shared memory bus).
        Err(Error::unsupported(
            ID,
            format!(
                "microbenchmark {} (the simulator models GEMMs and graph prepare only)",
                crate::protocol::bench_name(req.bench)
            ),
        ))
    }
}

struct SimGemm {
    dense: Dense,
    spec: GemmSpec,
    model_us: f64,
    prepare_us: f64,
    /// The output holds the product of the current input.
    computed: bool,
}

impl Gemm for SimGemm {
    fn spec(&self) -> &GemmSpec {
        &self.spec
    }

    fn prepare_us(&self) -> Option<f64> {
        Some(self.prepare_us)
    }

    fn write_input(&mut self, a: &[f32]) -> Result<()> {
        self.computed = false;
        self.dense.write_input(ID, a)
    }

    fn write_weights(&mut self, w: &[f32]) -> Result<()> {
        self.computed = false;
        self.dense.write_weights(ID, w)
    }

    fn execute(&mut self) -> Result<Timed> {
        let t = Instant::now();
        // The product is computed once per input: executing the same input
        // again would give the same bits, and the simulated time does not
        // depend on the host. This keeps sweeps of large shapes short.
        if !self.computed {
            self.dense.run(Parallelism::Rayon(0));
            self.computed = true;
        }
        Ok(Timed {
            device_us: Some(self.model_us),
            host_us: t.elapsed().as_secs_f64() * 1e6,
            ran_us: None,
        })
    }

    fn read_output(&mut self, c: &mut [f32]) -> Result<()> {
        self.dense.read_output(ID, c)
    }

    fn backend_id(&self) -> String {
        ID.into()
    }
}

/// A shorthand used by tests and docs: the spec of an `M×K×N` GEMM.
pub fn spec(m: u32, k: u32, n: u32, dtype: DType, order: OperandOrder) -> GemmSpec {
    GemmSpec {
        shape: GemmShape::new(m, k, n).expect("non-zero dimensions"),
        dtype,
        order,
        weights: WeightMode::Static,
    }
}

#[cfg(test)]
mod tests;
