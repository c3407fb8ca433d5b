//! A costed candidate: its shape, its family, and how the plan writes it.

use hetero_plan::{RowPart, SeqPart, Strategy, StrategyKind};

use super::{INF, Proc, RowParts, Small, Times};

/// A candidate's shape, with processor indices.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Shape {
    Single {
        p: usize,
        padded_to: Option<u32>,
        online: bool,
    },
    /// Output rows split; `graph`: the static part runs the prepared graph
    /// of this M (bigger than M: hybrid cutting).
    Rows {
        parts: RowParts,
        graph: Option<u32>,
    },
    /// Sequence split: `graphs` on static `s`, `rest` tokens on `d`.
    Seq {
        s: usize,
        graphs: Vec<u32>,
        d: Option<usize>,
        rest: u32,
    },
    Chunked {
        s: usize,
        chunk: u32,
        chunks: u32,
    },
    /// `cpu: None`: the GPU alone streams (no CC rows, no CPU part).
    Offload {
        cpu: Option<usize>,
        gpu: usize,
        cc: u32,
        cg: u32,
        gg: u32,
        gpu_tokens: u32,
    },
}

pub(crate) type FamilyKey = (StrategyKind, Small<usize, 3>, u8);

/// A costed candidate. `parts` follow the processor order of the shape.
#[derive(Debug, Clone)]
pub(crate) struct Cand {
    pub shape: Shape,
    pub parts: Times,
    pub sync: f64,
    /// `sync` were the runtime to wait by blocking (`--sync block`).
    pub sync_block: f64,
    pub copy: f64,
    pub total: f64,
    /// How the sync was charged, for explanations.
    pub sync_rule: &'static str,
}

impl Cand {
    pub fn kind(&self, m: u32) -> StrategyKind {
        match &self.shape {
            Shape::Single { .. } => StrategyKind::Single,
            Shape::Rows { graph: Some(g), .. } if *g > m => StrategyKind::Hybrid,
            Shape::Rows { parts, .. } if parts.len() > 2 => StrategyKind::ThreeWay,
            Shape::Rows { .. } => StrategyKind::RowCut,
            Shape::Seq { graphs, rest, .. } if graphs.iter().sum::<u32>() + rest > m => {
                StrategyKind::Pipe
            }
            Shape::Seq { graphs, .. } if graphs.len() > 1 => StrategyKind::MultiSeq,
            Shape::Seq { .. } => StrategyKind::SeqCut,
            Shape::Chunked { .. } => StrategyKind::Chunked,
            Shape::Offload { .. } => StrategyKind::Offload,
        }
    }

    /// Processor indices in part order.
    pub fn procs(&self) -> Small<usize, 3> {
        match &self.shape {
            Shape::Single { p, .. } => Small::from_slice(&[*p]),
            Shape::Rows { parts, .. } => {
                let mut v = Small::new();
                for x in parts.iter() {
                    v.push(x.0);
                }
                v
            }
            Shape::Seq { s, d, .. } => match d {
                Some(d) => Small::from_slice(&[*s, *d]),
                None => Small::from_slice(&[*s]),
            },
            Shape::Chunked { s, .. } => Small::from_slice(&[*s]),
            Shape::Offload { cpu, gpu, .. } => match cpu {
                Some(c) => Small::from_slice(&[*c, *gpu]),
                None => Small::from_slice(&[*gpu]),
            },
        }
    }

    /// Candidates of one family compete; the runner-up is the best of
    /// another family.
    pub fn family(&self, m: u32) -> FamilyKey {
        let mut p = self.procs();
        p.sort_unstable();
        // Online prepare and ScheInfer's token assignment are families of
        // their own.
        let variant = match self.shape {
            Shape::Single { online: true, .. } => 1,
            Shape::Offload { gpu_tokens, .. } if gpu_tokens > 0 => 1,
            _ => 0,
        };
        (self.kind(m), p, variant)
    }

    /// The plan strategy for rows `m` (a padded row cut is a hybrid).
    pub fn strategy(&self, procs: &[Proc], m: u32) -> Strategy {
        let id = |p: usize| procs[p].id.clone();
        match &self.shape {
            Shape::Single {
                p,
                padded_to,
                online,
            } => Strategy::Single {
                processor: id(*p),
                padded_to: *padded_to,
                online_prepare: *online,
            },
            Shape::Rows { parts, graph } => {
                let rows: Vec<RowPart> = parts
                    .iter()
                    .map(|&(p, rows)| RowPart {
                        processor: id(p),
                        rows,
                        graph: if procs[p].static_graphs { *graph } else { None },
                    })
                    .collect();
                match graph {
                    Some(g) if *g > m => Strategy::Hybrid {
                        padded_to: *g,
                        parts: rows,
                    },
                    _ => Strategy::RowCut { parts: rows },
                }
            }
            Shape::Seq { s, graphs, d, rest } => {
                // A pipe's last graph is padded: its part has M's tokens.
                let mut parts = vec![SeqPart {
                    processor: id(*s),
                    tokens: graphs.iter().sum::<u32>().min(m - rest),
                    graphs: graphs.clone(),
                }];
                if let Some(d) = d {
                    parts.push(SeqPart {
                        processor: id(*d),
                        tokens: *rest,
                        graphs: vec![],
                    });
                }
                Strategy::SeqCut { parts }
            }
            Shape::Chunked { s, chunk, chunks } => Strategy::Chunked {
                processor: id(*s),
                chunk: *chunk,
                chunks: *chunks,
            },
            Shape::Offload {
                cpu,
                gpu,
                cc,
                cg,
                gg,
                gpu_tokens,
            } => Strategy::Offload {
                cpu: cpu.map(id).unwrap_or_default(),
                gpu: id(*gpu),
                cc_rows: *cc,
                cg_rows: *cg,
                gg_rows: *gg,
                gpu_tokens: *gpu_tokens,
            },
        }
    }

    /// The candidate in words.
    pub fn label(&self, procs: &[Proc], m: u32) -> String {
        let id = |p: usize| procs[p].id.as_str();
        match &self.shape {
            Shape::Single {
                p,
                padded_to: Some(g),
                ..
            } if *g > m => format!("{} padded to {g}", id(*p)),
            Shape::Single {
                p,
                padded_to: Some(g),
                ..
            } => format!("{} graph {g}", id(*p)),
            Shape::Single {
                p, online: true, ..
            } => {
                format!("{} online prepare of M={m}", id(*p))
            }
            Shape::Single { p, .. } => format!("{} alone", id(*p)),
            Shape::Rows { parts, graph } => {
                let list: Vec<String> = parts
                    .iter()
                    .map(|&(p, r)| format!("{} {r}", id(p)))
                    .collect();
                match graph {
                    Some(g) if *g > m => format!("rows {} (padded to {g})", list.join(" / ")),
                    _ => format!("rows {}", list.join(" / ")),
                }
            }
            Shape::Seq { s, graphs, d, rest } => {
                let g: Vec<String> = graphs.iter().map(u32::to_string).collect();
                match d {
                    Some(d) => format!("tokens {} [{}] + {} {rest}", id(*s), g.join("+"), id(*d)),
                    None if self.kind(m) == StrategyKind::Pipe => {
                        format!("tokens {} [{}], the last padded", id(*s), g.join("+"))
                    }
                    None => format!("tokens {} [{}]", id(*s), g.join("+")),
                }
            }
            Shape::Chunked { s, chunk, chunks } => {
                format!("{} {chunks} chunks of {chunk}", id(*s))
            }
            Shape::Offload {
                cc,
                cg,
                gg,
                gpu_tokens,
                gpu,
                ..
            } => {
                if *gpu_tokens > 0 {
                    format!(
                        "offload cc {cc} / cg {cg} / gg {gg} rows (decode slicing), {gpu_tokens} tokens of cc on {}",
                        id(*gpu)
                    )
                } else {
                    format!("offload cc {cc} / cg {cg} / gg {gg} rows")
                }
            }
        }
    }

    pub fn scale(mut self, by: f64) -> Cand {
        if by != 1.0 {
            for p in self.parts.iter_mut() {
                *p *= by;
            }
            self.sync *= by;
            self.sync_block *= by;
            self.copy *= by;
            self.total *= by;
        }
        self
    }
}

/// The best total among families other than the best candidate's.
pub(super) fn second_family_best(cands: &[Cand], m: u32) -> f64 {
    let Some(best) = cands.iter().min_by(|a, b| a.total.total_cmp(&b.total)) else {
        return INF;
    };
    let fam = best.family(m);
    cands
        .iter()
        .filter(|c| c.family(m) != fam)
        .map(|c| c.total)
        .fold(INF, f64::min)
}
