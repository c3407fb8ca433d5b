//! Predictions of one operator in one phase, and its operand order per
//! processor.

use hetero_plan::{LinearOp, OperandOrder, Phase};

use super::{INF, Proc, Setup, predict};

/// Predictions of one operator in one phase, shared by the graph-set choice,
/// the solve and explanations.
pub(crate) struct Tables {
    /// Operand order per processor.
    pub orders: Vec<OperandOrder>,
    /// `full[p][m]`: time of the whole operator (all N) at M = m.
    pub full: Vec<Vec<f64>>,
}

impl Tables {
    /// Predicts M = 1..=`top` on every processor (in parallel). The orders
    /// are chosen over lengths up to `max_m` unless given.
    ///
    /// With `static_m`, static-graph processors are predicted only at those
    /// M (their graph sizes); other entries are NaN and predicted on demand.
    /// A solve that does not cost every length (see
    /// [`Setup::exhaustive`]) predicts the dynamic processors on demand too.
    pub fn new(
        setup: &Setup,
        op: &LinearOp,
        phase: Phase,
        top: u32,
        max_m: u32,
        orders: Option<Vec<OperandOrder>>,
        static_m: Option<&[u32]>,
    ) -> Tables {
        use rayon::prelude::*;
        let (k, n) = (op.k, op.n);
        let orders: Vec<OperandOrder> = orders.unwrap_or_else(|| {
            setup
                .procs
                .iter()
                .map(|p| choose_order(p, k, n, phase, max_m))
                .collect()
        });
        let full = setup
            .procs
            .iter()
            .zip(&orders)
            .map(|(p, &o)| match static_m {
                Some(ms) if p.static_graphs => {
                    let mut v = vec![f64::NAN; top.max(1) as usize + 1];
                    for &m in ms {
                        if let Some(slot) = v.get_mut(m as usize) {
                            *slot = predict(p, m, k, n, o);
                        }
                    }
                    v
                }
                _ if !setup.exhaustive => vec![f64::NAN; top.max(1) as usize + 1],
                _ => std::iter::once(INF)
                    .chain(
                        (1..=top.max(1))
                            .into_par_iter()
                            .map(|m| predict(p, m, k, n, o))
                            .collect::<Vec<f64>>(),
                    )
                    .collect(),
            })
            .collect();
        Tables { orders, full }
    }
}

/// The table size an operator needs: every M it sees and every graph size.
pub(crate) fn table_top(setup: &Setup, phase: Phase, max_m: u32) -> u32 {
    let max_g = setup
        .graphs
        .iter()
        .flat_map(|g| g.sizes(phase).iter().copied())
        .max()
        .unwrap_or(0);
    max_m.max(max_g).max(1)
}

/// The operand order a processor runs an operator in: the faster over a
/// few representative M, counting the copies a discrete processor makes
/// alone, whose output side depends on the order (a GPU transposes an `aw`
/// output before reading it back: on an H100, 18 µs of fixed cost against
/// 7 µs, which the GEMMs of an lm_head, 179 µs in either order, did not
/// outweigh).
///
/// "Faster" is the geometric mean of the times, so that every
/// representative M weighs alike. Their sum let the longest M decide:
/// on a 2-core x86-64 machine it kept `ffn_down` (K 8960, N 1536) in
/// `aw`, 4.0× slower than the transposed order at 32 rows and 3.3× at 64, for 8–9 % gained at 512
/// and 1024 rows, which the profile had not measured.
fn choose_order(p: &Proc, k: u32, n: u32, phase: Phase, max_m: u32) -> OperandOrder {
    let ms: Vec<u32> = match phase {
        Phase::Decode => vec![1, max_m.max(1)],
        Phase::Prefill => [1, 32, 128, 512, 2048]
            .into_iter()
            .filter(|&m| m <= max_m.max(1))
            .chain(std::iter::once(max_m.max(1)))
            .collect(),
    };
    // The sum of the logarithms: the geometric mean's order, without the
    // root.
    let sum = |o| {
        ms.iter()
            .map(|&m| {
                let (mf, kf, nf) = (m as f64, k as f64, n as f64);
                (predict(p, m, k, n, o) + p.alone_copy_us(mf * kf, mf * nf, o))
                    .max(f64::MIN_POSITIVE)
                    .ln()
            })
            .sum::<f64>()
    };
    let (aw, wt) = (sum(OperandOrder::Aw), sum(OperandOrder::Transposed));
    // Ties: a static-graph processor (an NPU) is weight-stationary and takes
    // the permuted order, as HeteroLLM does; others the plain one.
    if wt < aw || (wt == aw && p.static_graphs) {
        OperandOrder::Transposed
    } else {
        OperandOrder::Aw
    }
}
