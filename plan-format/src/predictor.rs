//! The predictor file: fitted latency models per processor, and the
//! overhead constants fitted from microbenchmarks.
//!
//! Evaluation lives here, beside the data, so that the solver and the runtime
//! can predict without depending on the fitting code (which needs polars and
//! linfa). A model's meaning is part of the file format: the feature vector,
//! the log-latency target of trees, the formulas of the parametric models.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::checked;
use crate::{DType, Fingerprint, GemmShape, OperandOrder, Processor, SchemaVersion, Validate};

/// Tile edges for the stage features (HeteroLLM aligns to 32 and 256).
pub const TILES: [u32; 4] = [32, 64, 128, 256];

/// Names of the entries of [`features`], in order.
pub const FEATURE_NAMES: [&str; 37] = [
    "m",
    "k",
    "n",
    "log2_m",
    "log2_k",
    "log2_n",
    "tiles_m_32",
    "tiles_k_32",
    "tiles_n_32",
    "tiles_m_64",
    "tiles_k_64",
    "tiles_n_64",
    "tiles_m_128",
    "tiles_k_128",
    "tiles_n_128",
    "tiles_m_256",
    "tiles_k_256",
    "tiles_n_256",
    "pad_waste_32",
    "pad_waste_64",
    "pad_waste_128",
    "pad_waste_256",
    "m_over_k",
    "n_over_k",
    "m_over_n",
    "weight_bytes",
    "log2_flops",
    "arith_intensity",
    "order_transposed",
    "padded_flops_32",
    "align_m",
    "align_k",
    "align_n",
    "align_rows_first",
    "align_cols_second",
    "log2_in_bytes",
    "log2_out_bytes",
];

/// The largest power of two that [`features`]' alignment entries tell
/// apart: 2⁸ = 256, the widest tile edge of [`TILES`].
pub const ALIGN_CAP: u32 = 8;

/// Number of features.
pub const N_FEATURES: usize = FEATURE_NAMES.len();

/// Bytes moved by a GEMM: A, W and C once each.
pub fn gemm_bytes(shape: GemmShape, dtype: DType) -> f64 {
    let (m, k, n) = shape.mkn();
    let (m, k, n) = (m as f64, k as f64, n as f64);
    let a = dtype.activation_bits() as f64 / 8.0;
    let w = dtype.weight_bits() as f64 / 8.0;
    m * k * a + k * n * w + m * n * a
}

/// The feature vector every tree model is trained and evaluated on.
pub fn features(shape: GemmShape, dtype: DType, order: OperandOrder) -> [f64; N_FEATURES] {
    let (m, k, n) = shape.mkn();
    let (mf, kf, nf) = (m as f64, k as f64, n as f64);
    let mut f = [0.0; N_FEATURES];
    f[0] = mf;
    f[1] = kf;
    f[2] = nf;
    f[3] = mf.log2();
    f[4] = kf.log2();
    f[5] = nf.log2();
    for (i, t) in TILES.iter().enumerate() {
        f[6 + 3 * i] = m.div_ceil(*t) as f64;
        f[7 + 3 * i] = k.div_ceil(*t) as f64;
        f[8 + 3 * i] = n.div_ceil(*t) as f64;
        let padded = |d: u32| (d.div_ceil(*t) * t) as f64;
        // Share of the padded work that is padding.
        f[18 + i] = 1.0 - (mf * kf * nf) / (padded(m) * padded(k) * padded(n));
    }
    f[22] = mf / kf;
    f[23] = nf / kf;
    f[24] = mf / nf;
    f[25] = kf * nf * dtype.weight_bits() as f64 / 8.0;
    f[26] = shape.flops().log2();
    f[27] = shape.flops() / gemm_bytes(shape, dtype);
    f[28] = if order == OperandOrder::Transposed {
        1.0
    } else {
        0.0
    };
    let p = |d: u32| (d.div_ceil(32) * 32) as f64;
    f[29] = (2.0 * p(m) * p(k) * p(n)).log2();
    // Alignment: log2 of the largest power of two dividing each dimension,
    // capped at ALIGN_CAP. Tensor-core kernels (cuBLAS) and vector loads
    // pick a different, often 2-8x slower, path when a leading dimension
    // is not a multiple of 8; tile padding (above) cannot tell 256 from 257.
    let align = |d: u32| d.trailing_zeros().min(ALIGN_CAP) as f64;
    f[30] = align(m);
    f[31] = align(k);
    f[32] = align(n);
    // The same by operand role: the first operand's rows and the second's
    // columns are M and N in `aw` (A·W) and N and M in `transposed` (Wᵀ·Aᵀ). A
    // kernel's fast path depends on the layout it is handed, so one
    // misaligned M costs 2-6x in one order and nothing in the other (H100,
    // cuBLAS: 397x1536x8960 f16 185 µs aw, 30 µs transposed); a tree needs two
    // splits to find that from align_m and the order, one from these.
    let (first, second) = match order {
        OperandOrder::Aw => (m, n),
        OperandOrder::Transposed => (n, m),
    };
    f[33] = align(first);
    f[34] = align(second);
    // The activations as the host holds them (f32): a processor may move
    // small ones another way than large ones (CUDA copies up to 64 KiB
    // inside the launch, `Capabilities::launch_copy_max_bytes`), a step in
    // time that a tree finds in one split on these.
    f[35] = (mf * kf * 4.0).log2();
    f[36] = (mf * nf * 4.0).log2();
    f
}

/// A node of a regression tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TreeNode {
    /// Go `left` when `features[feature] <= threshold`, else `right`.
    Split {
        /// Index into [`FEATURE_NAMES`].
        feature: u16,
        /// Split point.
        #[serde(deserialize_with = "checked::finite")]
        threshold: f64,
        /// Node index when the feature is at most the threshold.
        left: u32,
        /// Node index otherwise.
        right: u32,
    },
    /// A prediction.
    Leaf {
        /// The value (natural log of µs for latency trees).
        #[serde(deserialize_with = "checked::finite")]
        value: f64,
    },
}

/// A regression tree; node 0 is the root.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Tree {
    /// The nodes.
    pub nodes: Vec<TreeNode>,
}

impl Tree {
    /// Walks the tree; `None` if the tree is malformed (a cycle or a bad index).
    pub fn eval(&self, x: &[f64]) -> Option<f64> {
        let mut i = 0usize;
        for _ in 0..=self.nodes.len() {
            match self.nodes.get(i)? {
                TreeNode::Leaf { value } => return Some(*value),
                TreeNode::Split {
                    feature,
                    threshold,
                    left,
                    right,
                } => {
                    i = if *x.get(*feature as usize)? <= *threshold {
                        *left
                    } else {
                        *right
                    } as usize;
                }
            }
        }
        None
    }
}

/// What the `work` of a linear model counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Work {
    /// `2·M·K·N`.
    Flops,
    /// Bytes of A, W and C.
    Bytes,
}

/// A fitted latency model for GEMMs on one processor and dtype.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LatencyModel {
    /// `alpha_us + beta_us · work` (ScheInfer's α+β·n).
    Linear {
        /// Fixed cost, µs.
        #[serde(deserialize_with = "checked::finite")]
        alpha_us: f64,
        /// µs per unit of work.
        #[serde(deserialize_with = "checked::finite")]
        beta_us: f64,
        /// What the work counts.
        work: Work,
    },
    /// `launch_us + max(flops / peak, bytes / bandwidth)`.
    Roofline {
        /// Peak compute, GFLOP/s.
        #[serde(deserialize_with = "checked::positive")]
        peak_gflops: f64,
        /// Memory bandwidth, GB/s.
        #[serde(deserialize_with = "checked::positive")]
        bw_gbps: f64,
        /// Fixed launch cost, µs.
        #[serde(deserialize_with = "checked::non_negative")]
        launch_us: f64,
    },
    /// One regression tree on [`features`], predicting ln(µs).
    Tree(Tree),
    /// The mean of several trees' ln(µs).
    Forest {
        /// The trees.
        trees: Vec<Tree>,
    },
    /// Gradient boosting: `base + rate · Σ trees`, in ln(µs).
    Boosted {
        /// Initial prediction, ln(µs).
        #[serde(deserialize_with = "checked::finite")]
        base: f64,
        /// Learning rate.
        #[serde(deserialize_with = "checked::finite")]
        rate: f64,
        /// The trees.
        trees: Vec<Tree>,
    },
    /// Trees on the log-residual of a parametric base:
    /// `base(shape) · exp(rate · Σ trees)`. The trees are either boosted
    /// (fit family `residual`, rate = the learning rate) or an averaged
    /// forest of extremely randomised trees (fit family `residual_forest`,
    /// rate = 1 / number of trees). Trees are flat beyond the shapes they
    /// were fitted on, so outside the measured range the prediction scales
    /// as the base does instead of staying at the edge value.
    Residual {
        /// The parametric base: a `linear` or `roofline` model.
        base: Box<LatencyModel>,
        /// Weight of each tree: the learning rate, or 1 / trees for an
        /// averaged forest.
        #[serde(deserialize_with = "checked::finite")]
        rate: f64,
        /// The trees, predicting ln(µs / base µs).
        trees: Vec<Tree>,
    },
}

impl LatencyModel {
    /// The family name used in reports.
    pub fn family(&self) -> &'static str {
        match self {
            LatencyModel::Linear { .. } => "linear",
            LatencyModel::Roofline { .. } => "roofline",
            LatencyModel::Tree(_) => "tree",
            LatencyModel::Forest { .. } => "forest",
            LatencyModel::Boosted { .. } => "boosted",
            LatencyModel::Residual { .. } => "residual",
        }
    }

    /// Predicted latency in µs; `None` for a malformed model.
    pub fn predict_us(&self, shape: GemmShape, dtype: DType, order: OperandOrder) -> Option<f64> {
        let t = match self {
            LatencyModel::Linear {
                alpha_us,
                beta_us,
                work,
            } => {
                let w = match work {
                    Work::Flops => shape.flops(),
                    Work::Bytes => gemm_bytes(shape, dtype),
                };
                alpha_us + beta_us * w
            }
            LatencyModel::Roofline {
                peak_gflops,
                bw_gbps,
                launch_us,
            } => {
                let compute = shape.flops() / (peak_gflops * 1e3);
                let memory = gemm_bytes(shape, dtype) / (bw_gbps * 1e3);
                launch_us + compute.max(memory)
            }
            LatencyModel::Tree(t) => t.eval(&features(shape, dtype, order))?.exp(),
            LatencyModel::Forest { trees } => {
                let x = features(shape, dtype, order);
                let sum: Option<f64> = trees.iter().map(|t| t.eval(&x)).sum();
                (sum? / trees.len().max(1) as f64).exp()
            }
            LatencyModel::Boosted { base, rate, trees } => {
                let x = features(shape, dtype, order);
                let sum: Option<f64> = trees.iter().map(|t| t.eval(&x)).sum();
                (base + rate * sum?).exp()
            }
            LatencyModel::Residual { base, rate, trees } => {
                let b = base.predict_us(shape, dtype, order)?;
                let x = features(shape, dtype, order);
                let sum: Option<f64> = trees.iter().map(|t| t.eval(&x)).sum();
                b * (rate * sum?).exp()
            }
        };
        (t.is_finite() && t > 0.0).then_some(t)
    }
}

/// Held-out accuracy of a model.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Score {
    /// Mean absolute percentage error over held-out rows, in percent.
    pub mape: f64,
    /// Share of held-out rows within ±10 %, 0..1.
    pub within_10pct: f64,
    /// Share of held-out rows within ±20 %, 0..1.
    pub within_20pct: f64,
    /// Rows used.
    pub samples: u32,
    /// Folds of the cross-validation.
    pub folds: u32,
}

/// The chosen model for one processor and dtype.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessorModel {
    /// Processor id.
    pub processor: String,
    /// Element type.
    pub dtype: DType,
    /// The chosen model.
    pub model: LatencyModel,
    /// Its held-out score.
    pub score: Score,
    /// The other families tried, with their scores.
    #[serde(default)]
    pub candidates: Vec<(String, Score)>,
    /// The host's launch path, µs, added to every prediction of `model`
    /// ([`ProcessorModel::predict_us`]): set when the rows were timed
    /// without it (`hetero profile --kernel-timer`), to the median of
    /// their `launch_us` (at least 0). `model` and `score` are about the
    /// kernels alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_us: Option<f64>,
    /// The processor runs both operand orders as one kernel
    /// ([`Capabilities::order_free`](crate::Capabilities)): `model` was
    /// fitted with every row taken as `aw`, and every order is predicted as
    /// `aw`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub order_free: bool,
    /// The profile's own medians of the shapes it measured (HeteroLLM's
    /// real-execution mode): [`predict_us`](ProcessorModel::predict_us)
    /// answers these shapes with them and asks `model` about the rest.
    /// Sorted by shape, then order, each (shape, order) once; orders as the
    /// model is asked about them ([`model_order`](ProcessorModel::model_order)).
    /// Empty in older predictors and with `hetero fit --model-only`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measured: Vec<MeasuredGemm>,
}

/// One shape's latency as profiled: the median of its timed runs (the
/// median of the rows' medians where it was profiled more than once), on
/// the same clock as the rows `model` was fitted on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MeasuredGemm {
    /// The GEMM.
    pub shape: GemmShape,
    /// Its operand order.
    pub order: OperandOrder,
    /// Median latency, µs.
    pub us: f64,
}

impl MeasuredGemm {
    /// The key the table is sorted by.
    pub fn key(&self) -> (GemmShape, OperandOrder) {
        (self.shape, self.order)
    }
}

impl ProcessorModel {
    /// The order `model` is asked about for `order`: `aw` for an
    /// [`order_free`](ProcessorModel::order_free) processor, else `order`.
    pub fn model_order(&self, order: OperandOrder) -> OperandOrder {
        if self.order_free {
            OperandOrder::Aw
        } else {
            order
        }
    }

    /// Predicted latency of one GEMM as the runtime runs it, µs: the
    /// profile's median where it measured the shape
    /// ([`measured`](ProcessorModel::measured)), else the model's; plus
    /// [`launch_us`](ProcessorModel::launch_us) where set.
    pub fn predict_us(&self, shape: GemmShape, order: OperandOrder) -> Option<f64> {
        self.predict_with(shape, order, |s, d, o| self.model.predict_us(s, d, o))
    }

    /// [`predict_us`](ProcessorModel::predict_us) with `model` answering
    /// for [`model`](ProcessorModel::model) (called with this model's dtype
    /// and its [`model_order`](ProcessorModel::model_order)): the solver
    /// passes a compiled copy of it.
    pub fn predict_with(
        &self,
        shape: GemmShape,
        order: OperandOrder,
        model: impl FnOnce(GemmShape, DType, OperandOrder) -> Option<f64>,
    ) -> Option<f64> {
        let order = self.model_order(order);
        let t = match self.measured_us(shape, order) {
            Some(t) => t,
            None => model(shape, self.dtype, order)?,
        };
        Some(t + self.launch_us.unwrap_or(0.0))
    }

    /// [`predict_us`](ProcessorModel::predict_us) from the model alone,
    /// the measured shapes too: what the fit's scores and the charts'
    /// curves are about.
    pub fn model_us(&self, shape: GemmShape, order: OperandOrder) -> Option<f64> {
        let t = self
            .model
            .predict_us(shape, self.dtype, self.model_order(order))?;
        Some(t + self.launch_us.unwrap_or(0.0))
    }

    /// The profile's median of this shape and order, µs, launch path
    /// excluded as in the rows; `None` where it was not measured.
    pub fn measured_us(&self, shape: GemmShape, order: OperandOrder) -> Option<f64> {
        let key = (shape, self.model_order(order));
        self.measured
            .binary_search_by(|m| m.key().cmp(&key))
            .ok()
            .map(|i| self.measured[i].us)
    }
}

/// `alpha_us + beta_us_per_byte · bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LinearCost {
    /// Fixed cost, µs.
    #[serde(deserialize_with = "checked::finite")]
    pub alpha_us: f64,
    /// µs per byte.
    #[serde(deserialize_with = "checked::finite")]
    pub beta_us_per_byte: f64,
}

impl LinearCost {
    /// The cost of moving `bytes`.
    pub fn at(&self, bytes: f64) -> f64 {
        self.alpha_us + self.beta_us_per_byte * bytes
    }
}

/// The staged costs of inputs and outputs of at most `max_bytes` f32 bytes,
/// which a processor copies inside its launch
/// ([`Capabilities::launch_copy_max_bytes`](crate::Capabilities)):
/// `write_input` and `read_output` are host copies there, and the transfer
/// over the bus is in the device time that the GEMM rows measure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StageSmall {
    /// The largest size these lines apply to, f32 bytes.
    pub max_bytes: u64,
    /// `write_input`, against f32 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_in: Option<LinearCost>,
    /// `read_output` in `transposed` order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_out: Option<LinearCost>,
    /// `read_output` in `aw` order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_out_aw: Option<LinearCost>,
}

/// Overheads of one processor, fitted from microbenchmarks.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Overheads {
    /// Processor id.
    pub processor: String,
    /// Host to device copy. Absent on unified memory (no copy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_h2d: Option<LinearCost>,
    /// Device to host copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_d2h: Option<LinearCost>,
    /// A GEMM's input staged as the runtime stages it (`write_input`),
    /// against f32 bytes. Preferred over `copy_h2d` where measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_in: Option<LinearCost>,
    /// A GEMM's output read back as the runtime reads it (`read_output`),
    /// `transposed` order, against f32 bytes. Preferred over `copy_d2h` where
    /// measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_out: Option<LinearCost>,
    /// The same in `aw` order (a GPU may transpose the output first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_out_aw: Option<LinearCost>,
    /// The staged costs of inputs and outputs small enough to cross inside
    /// the launch (`Capabilities::launch_copy_max_bytes`): host copies
    /// alone, on lines of their own. The three lines above then hold the
    /// larger sizes only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_small: Option<StageSmall>,
    /// What the host adds to one operator run alone beyond its device time
    /// and its staged copies ([`MicrobenchKind::OpOverhead`](crate::MicrobenchKind)),
    /// µs, with the wait the solver plans for: polling where the processor
    /// was measured polling (`op_overhead_poll`), else blocking. The
    /// solver's cost of a device-timed processor's launch and completion
    /// notice where measured (else the larger of `submit_empty_us` and the
    /// sync cost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "checked::opt_non_negative")]
    pub op_overhead_us: Option<f64>,
    /// The same with a blocking wait (`op_overhead_block`), where
    /// `op_overhead_us` is the polling one: what a run with `--sync block`
    /// pays instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "checked::opt_non_negative")]
    pub op_overhead_block_us: Option<f64>,
    /// The operator overhead after another processor's run on host memory
    /// ([`MicrobenchKind::LaunchOverheadAfterCpu`](crate::MicrobenchKind)), µs,
    /// both waits alternately, where measured: what the solver charges a
    /// device-timed processor's operators alone in offload mode, where the
    /// CPU streams weights on every token. Older files call it
    /// `op_overhead_after_us`, which still loads.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        alias = "op_overhead_after_us"
    )]
    #[serde(deserialize_with = "checked::opt_non_negative")]
    pub launch_overhead_after_cpu_us: Option<f64>,
    /// Launch to completion of a tiny kernel on an empty queue, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "checked::opt_non_negative")]
    pub submit_empty_us: Option<f64>,
    /// The same behind a busy queue, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "checked::opt_non_negative")]
    pub submit_busy_us: Option<f64>,
    /// Handoff with a blocking wait, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "checked::opt_non_negative")]
    pub sync_block_us: Option<f64>,
    /// Handoff by polling a flag, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "checked::opt_non_negative")]
    pub sync_poll_us: Option<f64>,
    /// Static graph prepare cost against the bytes the graph moves
    /// (activations and weights in the graph's dtype).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepare: Option<LinearCost>,
    /// Streaming bandwidth alone, GB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "checked::opt_positive")]
    pub bandwidth_gbps: Option<f64>,
    /// Bandwidth while another processor streams too, as a share of alone (≤ 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "checked::opt_positive")]
    pub concurrent_factor: Option<f64>,
    /// The host's speed probe while this processor was profiled, µs: the
    /// median of its rows' [`Conditions::host_probe_us`](crate::Conditions).
    /// The host-side costs above (launch, copies, submit, sync) were
    /// measured at this host speed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "checked::opt_positive")]
    pub host_probe_us: Option<f64>,
    /// Mean over median of this processor's GEMM runs: the median of its
    /// rows' `mean_us / median_us` (absent when fewer than
    /// [`MEAN_ROWS_MIN`] rows have a mean; older predictors may hold their
    /// summed means over their summed medians instead).
    /// The latency models predict medians, which a few runs far slower
    /// than the rest (a core taken away for a while) leave out; a total of
    /// many operators grows with the mean. `hetero run` scales its
    /// predicted totals by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "checked::opt_positive")]
    pub mean_over_median: Option<f64>,
}

/// Rows with a mean a processor needs before its
/// [`Overheads::mean_over_median`] is kept.
pub const MEAN_ROWS_MIN: usize = 20;

/// A predictor file: everything the solver needs to know about a device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Predictor {
    /// File format version.
    pub schema_version: SchemaVersion,
    /// The dataset it was fitted on.
    pub dataset: Fingerprint,
    /// The device's processors (from the dataset's `device.json`).
    pub processors: Vec<Processor>,
    /// GEMM latency models.
    pub models: Vec<ProcessorModel>,
    /// Overheads per processor.
    #[serde(default)]
    pub overheads: Vec<Overheads>,
}

impl Predictor {
    /// The processor description.
    pub fn processor(&self, id: &str) -> Option<&Processor> {
        self.processors.iter().find(|p| p.id == id)
    }

    /// The model for a processor and dtype.
    pub fn model(&self, processor: &str, dtype: DType) -> Option<&ProcessorModel> {
        self.models
            .iter()
            .find(|m| m.processor == processor && m.dtype == dtype)
    }

    /// Predicted GEMM latency, µs.
    pub fn gemm_us(
        &self,
        processor: &str,
        shape: GemmShape,
        dtype: DType,
        order: OperandOrder,
    ) -> Option<f64> {
        self.model(processor, dtype)?.predict_us(shape, order)
    }

    /// The fingerprint plans record: `name` (the file name) for people, the
    /// SHA-256 of the predictor's canonical JSON for machines, so the same
    /// predictor in RON or JSON has one fingerprint.
    pub fn fingerprint(&self, name: impl Into<String>) -> Fingerprint {
        Fingerprint::of(name, self)
    }

    /// The overheads of a processor (all absent when not measured).
    pub fn overheads(&self, processor: &str) -> Overheads {
        self.overheads
            .iter()
            .find(|o| o.processor == processor)
            .cloned()
            .unwrap_or_else(|| Overheads {
                processor: processor.to_string(),
                ..Default::default()
            })
    }
}

impl Validate for Predictor {
    fn validate(&self) -> Result<(), (String, String)> {
        for (i, m) in self.models.iter().enumerate() {
            if self.processor(&m.processor).is_none() {
                return Err((
                    format!("models[{i}].processor"),
                    format!("`{}` is not in `processors`", m.processor),
                ));
            }
            if let Some(l) = m.launch_us
                && !(l.is_finite() && l >= 0.0)
            {
                return Err((
                    format!("models[{i}].launch_us"),
                    format!("must be a finite number of µs, at least 0, not {l}"),
                ));
            }
            for (j, w) in m.measured.iter().enumerate() {
                if !(w.us.is_finite() && w.us > 0.0) {
                    return Err((
                        format!("models[{i}].measured[{j}].us"),
                        format!("must be a finite number of µs above 0, not {}", w.us),
                    ));
                }
                if m.order_free && w.order != OperandOrder::Aw {
                    return Err((
                        format!("models[{i}].measured[{j}].order"),
                        "an order-free model's shapes are all `aw`".into(),
                    ));
                }
                if j > 0 && m.measured[j - 1].key() >= w.key() {
                    return Err((
                        format!("models[{i}].measured[{j}]"),
                        "must come after the entry before it (sorted by shape, then order, each once)"
                            .into(),
                    ));
                }
            }
            if let LatencyModel::Residual { base, .. } = &m.model
                && !matches!(
                    **base,
                    LatencyModel::Linear { .. } | LatencyModel::Roofline { .. }
                )
            {
                return Err((
                    format!("models[{i}].model.base"),
                    format!(
                        "the base of a residual model must be linear or roofline, not {}",
                        base.family()
                    ),
                ));
            }
            let trees: Vec<&Tree> = match &m.model {
                LatencyModel::Tree(t) => vec![t],
                LatencyModel::Forest { trees }
                | LatencyModel::Boosted { trees, .. }
                | LatencyModel::Residual { trees, .. } => trees.iter().collect(),
                _ => vec![],
            };
            for (j, t) in trees.iter().enumerate() {
                for (h, node) in t.nodes.iter().enumerate() {
                    if let TreeNode::Split {
                        feature,
                        left,
                        right,
                        ..
                    } = node
                    {
                        // Children after their parent: no cycles, and every index exists.
                        let bad_child = |c: u32| c as usize <= h || c as usize >= t.nodes.len();
                        if *feature as usize >= N_FEATURES || bad_child(*left) || bad_child(*right)
                        {
                            return Err((
                                format!("models[{i}].model.trees[{j}].nodes[{h}]"),
                                "split refers to a missing feature or node".into(),
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(m: u32, k: u32, n: u32) -> GemmShape {
        GemmShape::new(m, k, n).unwrap()
    }

    #[test]
    fn overheads_of_older_files_load_without_their_op_alone() {
        let json = r#"{"processor": "cuda:0", "op_overhead_us": 6.5,
            "op_alone": {"alpha_us": 31.0, "beta_us_per_byte": 0.001}}"#;
        let o: Overheads = serde_json::from_str(json).unwrap();
        assert_eq!(o.op_overhead_us, Some(6.5));
        assert!(!serde_json::to_string(&o).unwrap().contains("op_alone"));
    }

    #[test]
    fn features_have_names_and_stage_counts() {
        let f = features(shape(33, 64, 256), DType::F16, OperandOrder::Transposed);
        let get = |name: &str| f[FEATURE_NAMES.iter().position(|n| *n == name).unwrap()];
        assert_eq!(get("tiles_m_32"), 2.0);
        assert_eq!(get("tiles_n_256"), 1.0);
        assert_eq!(get("order_transposed"), 1.0);
        assert!((get("pad_waste_32") - (1.0 - 33.0 / 64.0)).abs() < 1e-12);
        assert_eq!(get("align_m"), 0.0);
        assert_eq!(get("align_k"), 6.0);
        assert_eq!(get("align_n"), 8.0);
        assert_eq!(
            (get("align_rows_first"), get("align_cols_second")),
            (8.0, 0.0)
        );
        let aw = features(shape(33, 64, 256), DType::F16, OperandOrder::Aw);
        assert_eq!((aw[33], aw[34]), (0.0, 8.0), "M first in aw");
        let wide = features(shape(4096, 1536, 24), DType::F16, OperandOrder::Aw);
        let at = |name: &str| wide[FEATURE_NAMES.iter().position(|n| *n == name).unwrap()];
        assert_eq!(at("align_m"), ALIGN_CAP as f64, "capped");
        assert_eq!(at("align_k"), 8.0);
        assert_eq!(at("align_n"), 3.0);
        // Host activation bytes (f32) in and out.
        assert_eq!(get("log2_in_bytes"), (33.0f64 * 64.0 * 4.0).log2());
        assert_eq!(get("log2_out_bytes"), (33.0f64 * 256.0 * 4.0).log2());
    }

    #[test]
    fn parametric_models_follow_their_formulas() {
        let lin = LatencyModel::Linear {
            alpha_us: 10.0,
            beta_us: 1e-6,
            work: Work::Flops,
        };
        let s = shape(100, 100, 100);
        assert!((lin.predict_us(s, DType::F32, OperandOrder::Aw).unwrap() - 12.0).abs() < 1e-9);
        let roof = LatencyModel::Roofline {
            peak_gflops: 1000.0,
            bw_gbps: 1e9,
            launch_us: 5.0,
        };
        // 2e6 flops at 1e12 flop/s = 2 µs, plus 5.
        assert!((roof.predict_us(s, DType::F32, OperandOrder::Aw).unwrap() - 7.0).abs() < 1e-9);
    }

    #[test]
    fn tree_eval_and_malformed_trees() {
        let t = Tree {
            nodes: vec![
                TreeNode::Split {
                    feature: 0,
                    threshold: 32.0,
                    left: 1,
                    right: 2,
                },
                TreeNode::Leaf { value: 1.0 },
                TreeNode::Leaf { value: 2.0 },
            ],
        };
        assert_eq!(t.eval(&[10.0]), Some(1.0));
        assert_eq!(t.eval(&[33.0]), Some(2.0));
        let cyclic = Tree {
            nodes: vec![TreeNode::Split {
                feature: 0,
                threshold: 0.0,
                left: 0,
                right: 0,
            }],
        };
        assert_eq!(cyclic.eval(&[1.0]), None);
    }

    fn residual() -> LatencyModel {
        // One split on M at 512: rows above it run 10 % slower than the base.
        LatencyModel::Residual {
            base: Box::new(LatencyModel::Linear {
                alpha_us: 10.0,
                beta_us: 1e-6,
                work: Work::Flops,
            }),
            rate: 0.5,
            trees: vec![Tree {
                nodes: vec![
                    TreeNode::Split {
                        feature: 0,
                        threshold: 512.0,
                        left: 1,
                        right: 2,
                    },
                    TreeNode::Leaf { value: 0.0 },
                    TreeNode::Leaf {
                        value: 2.0 * 1.1f64.ln(),
                    },
                ],
            }],
        }
    }

    #[test]
    fn residual_scales_its_base_beyond_the_trees() {
        let r = residual();
        assert_eq!(r.family(), "residual");
        let at = |m| {
            r.predict_us(shape(m, 1000, 1000), DType::F16, OperandOrder::Aw)
                .unwrap()
        };
        let base = |m: u32| 10.0 + 2.0 * m as f64 * 1e6 * 1e-6;
        assert!((at(100) - base(100)).abs() < 1e-9);
        // Past the last split the trees are flat and the base carries the growth.
        assert!((at(1024) / base(1024) - 1.1).abs() < 1e-12);
        assert!((at(8192) / base(8192) - 1.1).abs() < 1e-12);
    }

    #[test]
    fn residual_round_trips_and_validates_its_base() {
        let p = |model: LatencyModel| Predictor {
            schema_version: SchemaVersion,
            dataset: Fingerprint::of_bytes("d", b"d"),
            processors: vec![],
            models: vec![ProcessorModel {
                processor: "gpu".into(),
                dtype: DType::F16,
                model,
                score: Score::default(),
                candidates: vec![],
                launch_us: None,
                order_free: false,
                measured: Vec::new(),
            }],
            overheads: vec![],
        };
        let m = residual();
        let text = ron::to_string(&m).unwrap();
        assert_eq!(ron::from_str::<LatencyModel>(&text).unwrap(), m);
        let json = serde_json::to_string(&m).unwrap();
        assert!(json.starts_with("{\"residual\""), "{json}");
        assert_eq!(serde_json::from_str::<LatencyModel>(&json).unwrap(), m);

        let mut gpu = p(m.clone());
        gpu.processors = serde_json::from_str(
            r#"[{"id":"gpu","kind":"gpu","api":"cuda","name":"g","driver":"",
                "capabilities":{"dtypes":["f16"]},"simulated":false,"emulated":false}]"#,
        )
        .unwrap();
        assert_eq!(gpu.validate(), Ok(()));
        let LatencyModel::Residual { rate, trees, .. } = m else {
            unreachable!()
        };
        gpu.models[0].model = LatencyModel::Residual {
            base: Box::new(LatencyModel::Forest { trees: vec![] }),
            rate,
            trees,
        };
        let (field, why) = gpu.validate().unwrap_err();
        assert_eq!(field, "models[0].model.base");
        assert!(why.contains("forest"), "{why}");

        // A launch path is added to every prediction, and must be a time.
        gpu.models[0].model = residual();
        let s = shape(7, 64, 64);
        let kernels = gpu.gemm_us("gpu", s, DType::F16, OperandOrder::Aw).unwrap();
        gpu.models[0].launch_us = Some(8.5);
        assert_eq!(gpu.validate(), Ok(()));
        let whole = gpu.gemm_us("gpu", s, DType::F16, OperandOrder::Aw).unwrap();
        assert!((whole - kernels - 8.5).abs() < 1e-9, "{whole} {kernels}");
        gpu.models[0].launch_us = Some(-1.0);
        let (field, _) = gpu.validate().unwrap_err();
        assert_eq!(field, "models[0].launch_us");
    }

    /// The measured table answers its shapes (launch path added, orders as
    /// the model takes them), survives RON and JSON, and is refused where
    /// a time is no time, an order-free model keeps `transposed` entries, or the
    /// entries are out of order or repeated.
    #[test]
    fn measured_shapes_are_answered_round_trip_and_validate() {
        let gpu: Processor = serde_json::from_str(
            r#"{"id":"gpu","kind":"gpu","api":"cuda","name":"g","driver":"",
                "capabilities":{"dtypes":["f16"]},"simulated":false,"emulated":false}"#,
        )
        .unwrap();
        let entry = |m: u32, order, us| MeasuredGemm {
            shape: shape(m, 64, 64),
            order,
            us,
        };
        let mut p = Predictor {
            schema_version: SchemaVersion,
            dataset: Fingerprint::of_bytes("d", b"d"),
            processors: vec![gpu],
            models: vec![ProcessorModel {
                processor: "gpu".into(),
                dtype: DType::F16,
                model: LatencyModel::Linear {
                    alpha_us: 5.0,
                    beta_us: 0.0,
                    work: Work::Flops,
                },
                score: Score::default(),
                candidates: vec![],
                launch_us: Some(1.0),
                order_free: false,
                measured: vec![
                    entry(7, OperandOrder::Aw, 40.0),
                    entry(7, OperandOrder::Transposed, 50.0),
                    entry(9, OperandOrder::Aw, 60.0),
                ],
            }],
            overheads: vec![],
        };
        assert_eq!(p.validate(), Ok(()));
        let at = |p: &Predictor, m, order| p.gemm_us("gpu", shape(m, 64, 64), DType::F16, order);
        assert_eq!(at(&p, 7, OperandOrder::Aw), Some(41.0));
        assert_eq!(at(&p, 7, OperandOrder::Transposed), Some(51.0));
        assert_eq!(
            at(&p, 9, OperandOrder::Transposed),
            Some(6.0),
            "not measured"
        );
        assert_eq!(at(&p, 8, OperandOrder::Aw), Some(6.0), "not measured");
        let m = &p.models[0];
        assert_eq!(m.model_us(shape(7, 64, 64), OperandOrder::Aw), Some(6.0));
        assert_eq!(
            m.measured_us(shape(9, 64, 64), OperandOrder::Aw),
            Some(60.0)
        );

        let ron_text = ron::to_string(&p).unwrap();
        assert_eq!(ron::from_str::<Predictor>(&ron_text).unwrap(), p);
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<Predictor>(&json).unwrap(), p);

        let refused = |edit: &dyn Fn(&mut ProcessorModel), want: &str| {
            let mut q = p.clone();
            edit(&mut q.models[0]);
            let (field, why) = q.validate().unwrap_err();
            assert_eq!(field, want, "{why}");
        };
        refused(&|m| m.measured[1].us = f64::NAN, "models[0].measured[1].us");
        refused(&|m| m.measured[2].us = 0.0, "models[0].measured[2].us");
        refused(&|m| m.measured.swap(0, 2), "models[0].measured[1]");
        refused(
            &|m| m.measured[1].order = OperandOrder::Aw,
            "models[0].measured[1]",
        );
        refused(&|m| m.order_free = true, "models[0].measured[1].order");
        // An order-free model with `aw` entries answers both orders alike.
        p.models[0].order_free = true;
        p.models[0].measured.remove(1);
        assert_eq!(p.validate(), Ok(()));
        assert_eq!(at(&p, 7, OperandOrder::Transposed), Some(41.0));
    }
}
