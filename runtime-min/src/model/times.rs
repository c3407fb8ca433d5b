//! Where a generation's time went, per operator and phase: each GEMM as
//! [`Runtime::linear`](crate::Runtime::linear) measured it beside the
//! plan's prediction, and each host operator by its wall clock.

use hetero_plan::Phase;
use serde::Serialize;

use crate::LinearTiming;

/// What kind of operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// A GEMM the plan places.
    Gemm,
    /// An operator run on the host CPU (attention, norms, RoPE, the
    /// activation, residuals, the embedding, sampling).
    Host,
}

/// One operator's time in one phase, summed over its layers and steps.
#[derive(Debug, Clone, Serialize)]
pub struct OpTime {
    /// The operator (`attn_q`, `attention`, `norm`, ...).
    pub op: String,
    /// The phase.
    pub phase: Phase,
    /// GEMM or host.
    pub kind: OpKind,
    /// Executions.
    pub calls: u32,
    /// Measured, µs (a GEMM: the runtime's operator time; a host
    /// operator: its wall clock).
    pub measured_us: f64,
    /// The plan's prediction, µs, where the plan has one: a GEMM's from
    /// the runtime; a host operator's from the plan's forecast of its
    /// layers (`Plan::forecast_generation`), filled in by the caller.
    pub predicted_us: Option<f64>,
}

/// The times being collected.
#[derive(Debug, Default)]
pub struct OpTimes {
    ops: Vec<OpTime>,
}

impl OpTimes {
    fn entry(&mut self, op: &str, phase: Phase, kind: OpKind) -> &mut OpTime {
        let i = match self.ops.iter().position(|o| o.op == op && o.phase == phase) {
            Some(i) => i,
            None => {
                self.ops.push(OpTime {
                    op: op.to_string(),
                    phase,
                    kind,
                    calls: 0,
                    measured_us: 0.0,
                    predicted_us: (kind == OpKind::Gemm).then_some(0.0),
                });
                self.ops.len() - 1
            }
        };
        &mut self.ops[i]
    }

    /// Adds one GEMM execution.
    pub fn gemm(&mut self, op: &str, phase: Phase, t: &LinearTiming) {
        let e = self.entry(op, phase, OpKind::Gemm);
        e.calls += 1;
        e.measured_us += t.measured_us;
        *e.predicted_us.get_or_insert(0.0) += t.predicted_us;
    }

    /// Adds one host operator's execution.
    pub fn host(&mut self, op: &str, phase: Phase, us: f64) {
        let e = self.entry(op, phase, OpKind::Host);
        e.calls += 1;
        e.measured_us += us;
    }

    /// Everything, prefill first, GEMMs before host operators.
    pub fn list(&self) -> Vec<OpTime> {
        let mut v = self.ops.clone();
        v.sort_by_key(|o| (o.phase, o.kind == OpKind::Host));
        v
    }
}
