//! What the solver needs to know about a device: processors, GEMM latency
//! models and overhead constants.

use std::cell::RefCell;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, Ordering};

use hetero_plan::{
    CompiledModel, DType, GemmShape, OperandOrder, Overheads, Predictor, Processor, ProcessorModel,
};

/// A GEMM latency model for one processor and dtype.
pub trait GemmModel: Sync {
    /// Predicted latency of one GEMM, µs; `None` when the model cannot say.
    fn predict_us(&self, shape: GemmShape, order: OperandOrder) -> Option<f64>;

    /// A faster evaluator with exactly the same predictions, which the
    /// solver builds once per solve and then asks instead of `self`.
    /// `None` (the default): `self` is fast enough.
    fn compiled(&self) -> Option<Box<dyn GemmModel + Send + '_>> {
        None
    }

    /// A lower bound of [`predict_us`](GemmModel::predict_us) over every
    /// M in `m` and every N in `n` (K and the order fixed), µs. `None`
    /// (the default): no bound is known, and the solver costs every length
    /// in full.
    fn lower_bound_us(
        &self,
        m: RangeInclusive<u32>,
        k: u32,
        n: RangeInclusive<u32>,
        order: OperandOrder,
    ) -> Option<f64> {
        let _ = (m, k, n, order);
        None
    }
}

/// Through [`ProcessorModel::predict_us`]: a model fitted on kernel-only
/// times has its launch path added back.
impl GemmModel for ProcessorModel {
    fn predict_us(&self, shape: GemmShape, order: OperandOrder) -> Option<f64> {
        ProcessorModel::predict_us(self, shape, order)
    }

    /// The model's trees flattened ([`CompiledModel`]); same predictions,
    /// bit for bit.
    fn compiled(&self) -> Option<Box<dyn GemmModel + Send + '_>> {
        Some(Box::new(Compiled {
            model: self.model.compile(),
            source: self,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        }))
    }

    /// The model's bound over the box (the solver's `model_bounds`), lowered to
    /// any measured shape inside it, plus the launch path.
    fn lower_bound_us(
        &self,
        m: RangeInclusive<u32>,
        k: u32,
        n: RangeInclusive<u32>,
        order: OperandOrder,
    ) -> Option<f64> {
        let order = self.model_order(order);
        let mut lb = crate::model_bounds::lower_bound(&self.model, &m, k, &n, self.dtype, order)?;
        for g in &self.measured {
            let (gm, gk, gn) = g.shape.mkn();
            if g.order == order && gk == k && m.contains(&gm) && n.contains(&gn) {
                lb = lb.min(g.us);
            }
        }
        Some(lb + self.launch_us.unwrap_or(0.0))
    }
}

/// Ids of [`Compiled`] models, never reused in a process, so a memo entry
/// cannot be taken for another model's.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// A [`ProcessorModel`]'s compiled evaluator, with a small memo per
/// thread: within one cell the solver asks for the same shape on the same
/// processor several times (each two-way cut is searched with every
/// partner, three-way cuts revisit their shares).
struct Compiled<'a> {
    /// `source.model`, flattened.
    model: CompiledModel,
    /// The model it was compiled from: its dtype, launch path, order rule
    /// and measured shapes ([`ProcessorModel::measured_us`], which answer
    /// before the model).
    source: &'a ProcessorModel,
    id: u64,
}

/// Slots of the per-thread memo (direct-mapped: a new shape evicts the one
/// in its slot).
const MEMO_SLOTS: usize = 1 << 9;

/// `(model id, m, k, n, order)`.
type MemoKey = (u64, u32, u32, u32, OperandOrder);
/// A memo slot: a shape and its prediction.
type MemoSlot = Option<(MemoKey, Option<f64>)>;

thread_local! {
    static MEMO: RefCell<Vec<MemoSlot>> =
        RefCell::new(vec![None; MEMO_SLOTS]);
}

/// A cheap multiplicative hash of a memo key onto a slot.
fn memo_slot(key: &MemoKey) -> usize {
    let (id, m, k, n, order) = *key;
    let mut h = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for x in [m, k, n, order as u32] {
        h = (h.rotate_left(23) ^ u64::from(x)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    (h >> 40) as usize % MEMO_SLOTS
}

impl GemmModel for Compiled<'_> {
    fn predict_us(&self, shape: GemmShape, order: OperandOrder) -> Option<f64> {
        let order = self.source.model_order(order);
        let key: MemoKey = (self.id, shape.m.get(), shape.k.get(), shape.n.get(), order);
        let slot = memo_slot(&key);
        MEMO.with(|memo| {
            let mut memo = memo.borrow_mut();
            match memo[slot] {
                Some((k, t)) if k == key => t,
                _ => {
                    let t = self
                        .source
                        .predict_with(shape, order, |s, d, o| self.model.predict_us(s, d, o));
                    memo[slot] = Some((key, t));
                    t
                }
            }
        })
    }

    fn lower_bound_us(
        &self,
        m: RangeInclusive<u32>,
        k: u32,
        n: RangeInclusive<u32>,
        order: OperandOrder,
    ) -> Option<f64> {
        GemmModel::lower_bound_us(self.source, m, k, n, order)
    }
}

/// Everything the solver asks of a device.
///
/// [`Predictor`] (a fitted predictor file) implements it; so does
/// [`crate::synthetic::Synthetic`], the simulated processors of the tests.
pub trait LatencyOracle: Sync {
    /// The device's processors.
    fn processors(&self) -> &[Processor];
    /// The latency model of a processor in a dtype.
    fn gemm_model(&self, processor: &str, dtype: DType) -> Option<&dyn GemmModel>;
    /// The dtypes a processor has latency models for.
    fn dtypes(&self, processor: &str) -> Vec<DType>;
    /// The overhead constants of a processor (fields absent when not measured).
    fn overheads(&self, processor: &str) -> Overheads;
}

impl LatencyOracle for Predictor {
    fn processors(&self) -> &[Processor] {
        &self.processors
    }

    fn gemm_model(&self, processor: &str, dtype: DType) -> Option<&dyn GemmModel> {
        self.model(processor, dtype).map(|m| m as &dyn GemmModel)
    }

    fn dtypes(&self, processor: &str) -> Vec<DType> {
        let mut d: Vec<DType> = self
            .models
            .iter()
            .filter(|m| m.processor == processor)
            .map(|m| m.dtype)
            .collect();
        d.sort();
        d.dedup();
        d
    }

    fn overheads(&self, processor: &str) -> Overheads {
        Predictor::overheads(self, processor)
    }
}

#[cfg(test)]
mod tests {
    use hetero_plan::predictor::FEATURE_NAMES;
    use hetero_plan::{LatencyModel, Score, Tree, TreeNode};

    use super::*;

    /// A tree that answers ln 10 in `aw` and ln 20 in `transposed`.
    fn by_order(order_free: bool) -> ProcessorModel {
        let feature = FEATURE_NAMES
            .iter()
            .position(|n| *n == "order_transposed")
            .unwrap() as u16;
        ProcessorModel {
            processor: "cuda:0".into(),
            dtype: DType::F16,
            model: LatencyModel::Tree(Tree {
                nodes: vec![
                    TreeNode::Split {
                        feature,
                        threshold: 0.5,
                        left: 1,
                        right: 2,
                    },
                    TreeNode::Leaf { value: 10f64.ln() },
                    TreeNode::Leaf { value: 20f64.ln() },
                ],
            }),
            score: Score::default(),
            candidates: vec![],
            launch_us: Some(1.0),
            order_free,
            measured: Vec::new(),
        }
    }

    #[test]
    fn an_order_free_model_answers_every_order_as_aw_compiled_or_not() {
        let s = GemmShape::new(300, 1536, 8960).unwrap();
        let near = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-9;
        let plain = by_order(false);
        assert!(near(plain.predict_us(s, OperandOrder::Aw), 11.0));
        assert!(near(plain.predict_us(s, OperandOrder::Transposed), 21.0));
        let free = by_order(true);
        let compiled = GemmModel::compiled(&free).unwrap();
        for order in [OperandOrder::Aw, OperandOrder::Transposed] {
            assert!(near(ProcessorModel::predict_us(&free, s, order), 11.0));
            // Twice: the second answer comes from the memo.
            assert!(near(compiled.predict_us(s, order), 11.0), "{order}");
            assert!(near(compiled.predict_us(s, order), 11.0), "{order}");
        }
        let compiled = GemmModel::compiled(&plain).unwrap();
        assert!(near(compiled.predict_us(s, OperandOrder::Transposed), 21.0));
    }

    /// Real-execution mode: a measured shape is answered with its median
    /// (plus the launch path), compiled or not; its other order and other
    /// shapes still come from the model.
    #[test]
    fn measured_shapes_answer_before_the_model_compiled_or_not() {
        let s = GemmShape::new(300, 1536, 8960).unwrap();
        let other = GemmShape::new(301, 1536, 8960).unwrap();
        let near = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-9;
        let mut m = by_order(false);
        m.measured = vec![hetero_plan::MeasuredGemm {
            shape: s,
            order: OperandOrder::Transposed,
            us: 33.0,
        }];
        let compiled = GemmModel::compiled(&m).unwrap();
        for _ in 0..2 {
            assert!(near(m.predict_us(s, OperandOrder::Transposed), 34.0));
            assert!(near(compiled.predict_us(s, OperandOrder::Transposed), 34.0));
            assert!(near(compiled.predict_us(s, OperandOrder::Aw), 11.0));
            assert!(near(
                compiled.predict_us(other, OperandOrder::Transposed),
                21.0
            ));
        }
        assert!(near(m.model_us(s, OperandOrder::Transposed), 21.0));
    }
}
