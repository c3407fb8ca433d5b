//! Layer groups: an operator's tables in a phase, each covering
//! `first_layer..first_layer + layers`, together every layer once.

use crate::{OpPlan, Phase};

/// Checks that each operator's tables in a phase cover its layers
/// `0..total` once, in groups that meet end to end, with the same K and N;
/// and that an operator covers as many layers in every phase.
pub(crate) fn check_layer_groups(ops: &[OpPlan]) -> Result<(), (String, String)> {
    let mut seen: Vec<(&str, Phase)> = vec![];
    for (i, op) in ops.iter().enumerate() {
        if seen.contains(&(op.op.as_str(), op.phase)) {
            continue;
        }
        seen.push((&op.op, op.phase));
        let mut group: Vec<(usize, &OpPlan)> = ops
            .iter()
            .enumerate()
            .filter(|(_, o)| o.op == op.op && o.phase == op.phase)
            .collect();
        group.sort_by_key(|(_, o)| o.first_layer);
        let mut next = 0u32;
        for &(j, o) in &group {
            if o.layers == 0 {
                return Err((
                    format!("ops[{j}].layers"),
                    format!("operator `{}` ({}) runs in no layer", o.op, o.phase),
                ));
            }
            if (o.k, o.n) != (op.k, op.n) {
                return Err((
                    format!("ops[{j}].n"),
                    format!(
                        "operator `{}` ({}) is {}×{} here and {}×{} in ops[{i}]",
                        o.op, o.phase, o.k, o.n, op.k, op.n
                    ),
                ));
            }
            if o.first_layer != next {
                let what = if o.first_layer < next {
                    "overlaps the layers of another table"
                } else {
                    "leaves layers without a table"
                };
                return Err((
                    format!("ops[{j}].first_layer"),
                    format!(
                        "operator `{}` ({}): layers {}..{} {what}; its tables must cover layers 0.. once, end to end (next expected first layer: {next})",
                        o.op,
                        o.phase,
                        o.first_layer,
                        o.first_layer as u64 + o.layers as u64
                    ),
                ));
            }
            next = next.checked_add(o.layers).ok_or_else(|| {
                (
                    format!("ops[{j}].layers"),
                    "the layer count overflows".to_string(),
                )
            })?;
        }
        let other = ops
            .iter()
            .enumerate()
            .find(|(_, o)| o.op == op.op && o.phase != op.phase)
            .map(|(j, o)| (j, o.phase));
        if let Some((j, phase)) = other {
            let there = layer_count(ops, &op.op, phase);
            if there != next {
                return Err((
                    format!("ops[{j}].layers"),
                    format!(
                        "operator `{}` covers {next} layers in {} and {there} in {phase}",
                        op.op, op.phase
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The layers an operator's tables cover in a phase, in all.
pub fn layer_count(ops: &[OpPlan], op: &str, phase: Phase) -> u32 {
    ops.iter()
        .filter(|o| o.op == op && o.phase == phase)
        .map(|o| o.layers)
        .sum()
}
