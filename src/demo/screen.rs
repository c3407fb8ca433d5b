//! What the demo prints from the reports its commands wrote: the table of
//! one run, the strategy mix of a plan, and the one screen it ends with.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hetero_plan::Plan;
use serde_json::Value;

/// A time in µs, ms from 10 ms up, s from 1 s up.
pub fn us(v: Option<f64>) -> String {
    match v {
        Some(x) if x >= 1e6 => format!("{:.2} s", x / 1e6),
        Some(x) if x >= 10_000.0 => format!("{:.1} ms", x / 1000.0),
        Some(x) => format!("{x:.0} µs"),
        None => "-".into(),
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

/// The table of one `hetero generate --json` report: each operator's
/// predicted and measured time per phase, then time to first token and
/// per output token, the check and the notes.
pub fn generate_table(r: &Value, out: &mut String) {
    let _ = writeln!(
        out,
        "\ngeneration: {} prompt tokens, {} generated",
        r["prompt_tokens"],
        r["tokens"].as_array().map_or(0, Vec::len)
    );
    let _ = writeln!(
        out,
        "  {:<8} {:<12} {:>5} {:>11} {:>11} {:>7}",
        "phase", "operator", "kind", "predicted", "measured", "ratio"
    );
    let ratio = |p: Option<f64>, m: Option<f64>| match (p, m) {
        (Some(p), Some(m)) if p > 0.0 => format!("{:.2}", m / p),
        _ => "-".into(),
    };
    for op in r["ops"].as_array().into_iter().flatten() {
        let (p, m) = (op["predicted_us"].as_f64(), op["measured_us"].as_f64());
        let _ = writeln!(
            out,
            "  {:<8} {:<12} {:>5} {:>11} {:>11} {:>7}",
            op["phase"].as_str().unwrap_or("?"),
            op["op"].as_str().unwrap_or("?"),
            op["kind"].as_str().unwrap_or("?"),
            us(p),
            us(m),
            ratio(p, m)
        );
    }
    let g = Generated::of(r);
    for (what, t) in [
        ("time to first token", g.ttft),
        ("per output token", g.tpot),
    ] {
        let (p, m) = (t.predicted_us, t.measured_us);
        let _ = writeln!(
            out,
            "  {what:<27} {:>11} {:>11} {:>7}",
            us(p),
            us(m),
            ratio(p, m)
        );
    }
    if let Some(c) = r.get("check").filter(|c| !c.is_null()) {
        let _ = writeln!(
            out,
            "  check: {}/{} GEMM outputs within bound; worst {} (error {:.2e}, bound {:.2e})",
            c["passed"],
            c["outputs"],
            c["worst"].as_str().unwrap_or("?"),
            c["worst_rel_err"].as_f64().unwrap_or(f64::NAN),
            c["worst_bound"].as_f64().unwrap_or(f64::NAN)
        );
    }
    for n in r["notes"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "  note: {}", n.as_str().unwrap_or("?"));
    }
}

/// The strategy mix of a plan: each strategy kind on its processors
/// (`row_cut cpu:0+cuda:0`) with its share of the plan's decisions (one
/// per operator and length, prefill and decode), largest first.
pub fn mix(plan: &Plan) -> Vec<(String, f64)> {
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    let mut all = 0usize;
    for op in &plan.ops {
        // A range's kind and processors hold at every length it covers.
        for r in &op.ranges {
            let key = format!(
                "{} {}",
                r.strategy.kind(),
                r.strategy.processors().join("+")
            );
            let n = (r.to - r.from + 1) as usize;
            *count.entry(key).or_default() += n;
            all += n;
        }
    }
    let mut v: Vec<(String, f64)> = count
        .into_iter()
        .map(|(k, n)| (k, 100.0 * n as f64 / all.max(1) as f64))
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

/// The mix on one line: the largest entries, then how many more.
pub fn mix_line(mix: &[(String, f64)]) -> String {
    let mut parts: Vec<String> = mix
        .iter()
        .take(3)
        .map(|(k, s)| format!("{k} {s:.0} %"))
        .collect();
    if mix.len() > 3 {
        let rest: f64 = mix[3..].iter().map(|(_, s)| s).sum();
        parts.push(format!("{} more {rest:.0} %", mix.len() - 3));
    }
    parts.join(", ")
}

/// A prefill's and one decode step's time, µs, where known.
pub type PhaseTimes = (Option<f64>, Option<f64>);

/// The predicted time to first token of a plan at a prompt of `len` and
/// of its first decode step, µs: its GEMMs and, where it has their costs,
/// the layers' other operators (`Plan::forecast_generation`).
pub fn predicted(plan: &Plan, len: u32) -> PhaseTimes {
    (
        plan.forecast_prefill(len).ok().map(|f| f.total_us),
        plan.forecast_decode(len + 1).ok().map(|f| f.total_us),
    )
}

/// A predicted and a measured time, µs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timed {
    pub predicted_us: Option<f64>,
    pub measured_us: Option<f64>,
}

impl Timed {
    /// "predicted → measured".
    pub fn cell(&self) -> String {
        format!("{} → {}", us(self.predicted_us), us(self.measured_us))
    }

    /// "predicted → measured" of `tokens` per time, tokens/s.
    fn rate(&self, tokens: f64) -> String {
        let r = |t: Option<f64>| match t {
            Some(t) if t > 0.0 => format!("{:.1}", tokens * 1e6 / t),
            _ => "-".into(),
        };
        format!("{} → {}", r(self.predicted_us), r(self.measured_us))
    }
}

/// A generation's time to first token and time per output token.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Generated {
    pub ttft: Timed,
    pub tpot: Timed,
}

impl Generated {
    /// From a `hetero generate --json` report.
    pub fn of(r: &Value) -> Generated {
        let p = &r["predicted"];
        Generated {
            ttft: Timed {
                predicted_us: p["ttft_us"].as_f64(),
                measured_us: r["ttft_us"].as_f64(),
            },
            tpot: Timed {
                predicted_us: p["tpot_us"].as_f64(),
                measured_us: r["tpot_us"].as_f64(),
            },
        }
    }
}

/// A plan the demo generated with.
#[derive(Debug, Clone, PartialEq)]
pub struct Ran {
    pub label: String,
    pub times: Generated,
    /// Its strategy mix, for a plan beside the demo's that shows one.
    pub mix: Option<Vec<(String, f64)>>,
}

/// A plan of the reference machine, predicted there.
#[derive(Debug, Clone, PartialEq)]
pub struct Predicted {
    pub label: String,
    /// Prefill at the demo's length and one decode step.
    pub times: PhaseTimes,
    /// Its strategy mix, where the screen shows one.
    pub mix: Option<Vec<(String, f64)>>,
}

/// How plans with a second processor look on the reference machine,
/// predicted there: the plan first, then each processor alone and the
/// offload plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Reference {
    /// The machine, in words.
    pub machine: String,
    pub plans: Vec<Predicted>,
}

/// Everything the last screen shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Screen {
    pub model: String,
    pub len: u32,
    pub tokens: u32,
    pub max_len: u32,
    /// "cpu:0, cuda:0", and the processors left out with the reason in
    /// brief.
    pub processors: String,
    pub left_out: Vec<String>,
    /// Accuracy per fitted processor: "cpu:0/f32 58 %".
    pub fit: Vec<String>,
    pub mix: Vec<(String, f64)>,
    /// The plan's runs first; then the best single processor's, the
    /// offload plan's.
    pub runs: Vec<Ran>,
    /// Why no single-processor plan ran (the plan has one processor).
    pub single_note: Option<String>,
    pub reference: Option<Reference>,
    pub elapsed_s: f64,
    pub out: String,
    pub plan: String,
}

/// "1.23× faster" or "1.23× slower" of `a` against `b` (times).
fn speed(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if a > 0.0 && b > 0.0 && a <= b => format!("{:.2}× faster", b / a),
        (Some(a), Some(b)) if a > 0.0 && b > 0.0 => format!("{:.2}× slower", a / b),
        _ => "-".into(),
    }
}

impl Screen {
    /// The screen, at most about 30 lines.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "hetero demo: {} on {} ({:.0} s)",
            self.model, self.processors, self.elapsed_s
        );
        for l in &self.left_out {
            let _ = writeln!(s, "  left out {l}");
        }
        if !self.fit.is_empty() {
            let _ = writeln!(s, "  fit, share within ±10 %: {}", self.fit.join(", "));
        }
        let _ = writeln!(
            s,
            "\nStrategy mix of the plan (operators × lengths 1..{} and decode):",
            self.max_len
        );
        for (k, share) in self.mix.iter().take(5) {
            let _ = writeln!(s, "  {share:>5.1} %  {k}");
        }
        if self.mix.len() > 5 {
            let rest: f64 = self.mix[5..].iter().map(|(_, x)| x).sum();
            let _ = writeln!(s, "  {rest:>5.1} %  {} more", self.mix.len() - 5);
        }
        self.render_runs(&mut s);
        if let Some(r) = &self.reference {
            render_reference(r, self.len, &mut s);
        }
        let _ = writeln!(s, "\nEverything is in {} (DEMO.md lists it).", self.out);
        let _ = writeln!(
            s,
            "Next: hetero plan explain {} --op ffn_down --len {}",
            self.plan, self.len
        );
        s
    }

    fn render_runs(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "\nGeneration on this machine, predicted → measured (prompt {} tokens, {} new; synthetic weights):",
            self.len, self.tokens
        );
        let _ = writeln!(
            s,
            "  {:<34} {:<24} per output token",
            "plan", "time to first token"
        );
        for r in &self.runs {
            let _ = writeln!(
                s,
                "  {:<34} {:<24} {}",
                truncate(&r.label, 34),
                r.times.ttft.cell(),
                r.times.tpot.cell()
            );
        }
        let _ = writeln!(s, "  tokens/s, predicted → measured:");
        for r in &self.runs {
            let _ = writeln!(
                s,
                "  {:<34} prefill {:<16} decode {}",
                truncate(&r.label, 34),
                r.times.ttft.rate(self.len as f64),
                r.times.tpot.rate(1.0)
            );
        }
        for r in &self.runs {
            if let Some(mix) = &r.mix {
                let _ = writeln!(s, "  {}: {}", r.label, mix_line(mix));
            }
        }
        if let Some(note) = &self.single_note {
            let _ = writeln!(s, "  {note}");
        } else if let [plan, single, ..] = self.runs.as_slice() {
            let (p, one) = (&plan.times, &single.times);
            let _ = writeln!(
                s,
                "  measured, the plan against {}: time to first token {}, per output token {}",
                single.label,
                speed(p.ttft.measured_us, one.ttft.measured_us),
                speed(p.tpot.measured_us, one.tpot.measured_us)
            );
            // A plan of one strategy on one processor everywhere is that
            // processor's plan: the two runs differ by run-to-run noise.
            if let [(only, _)] = self.mix.as_slice()
                && single
                    .label
                    .strip_suffix(" alone")
                    .map(|p| format!("single {p}"))
                    == Some(only.clone())
            {
                let _ = writeln!(
                    s,
                    "  (the plan is {} at every length: the two differ by run-to-run noise)",
                    single.label
                );
            }
        }
    }
}

fn render_reference(r: &Reference, len: u32, s: &mut String) {
    let _ = writeln!(
        s,
        "\nWith a second processor: the REFERENCE profile of {}\n\
         (built into hetero; predicted for that machine, not run here):",
        r.machine
    );
    let _ = writeln!(
        s,
        "  {:<38} {:>10} {:>11}  strategy mix",
        "plan",
        format!("TTFT {len}"),
        "decode step"
    );
    for p in &r.plans {
        let row = format!(
            "  {:<38} {:>10} {:>11}  {}",
            truncate(&p.label, 38),
            us(p.times.0),
            us(p.times.1),
            p.mix.as_deref().map(mix_line).unwrap_or_default()
        );
        let _ = writeln!(s, "{}", row.trim_end());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed(ttft: (f64, f64), tpot: (f64, f64)) -> Generated {
        let t = |(p, m): (f64, f64)| Timed {
            predicted_us: Some(p),
            measured_us: Some(m),
        };
        Generated {
            ttft: t(ttft),
            tpot: t(tpot),
        }
    }

    fn screen() -> Screen {
        Screen {
            model: "qwen2.5-1.5b".into(),
            len: 64,
            tokens: 8,
            max_len: 1024,
            processors: "cpu:0, cuda:0".into(),
            left_out: vec![
                "opencl:0:0: OpenCL on the same CPU cores as cpu:0".into(),
                "opencl:1:0: the same GPU as cuda:0".into(),
            ],
            fit: vec!["cpu:0/f32 58 %".into(), "cuda:0/f16 97 %".into()],
            mix: vec![
                ("single cuda:0".into(), 80.0),
                ("row_cut cpu:0+cuda:0".into(), 20.0),
            ],
            runs: vec![
                Ran {
                    label: "the plan (cpu:0 + cuda:0)".into(),
                    times: timed((900.0, 1000.0), (300.0, 330.0)),
                    mix: None,
                },
                Ran {
                    label: "cuda:0 alone".into(),
                    times: timed((1000.0, 1200.0), (300.0, 330.0)),
                    mix: None,
                },
                Ran {
                    label: "offload, 1.40 GiB/2.90 GiB on cuda:0".into(),
                    times: timed((20_000.0, 25_000.0), (9000.0, 9900.0)),
                    mix: Some(vec![("offload cpu:0+cuda:0".into(), 100.0)]),
                },
            ],
            single_note: None,
            reference: None,
            elapsed_s: 200.0,
            out: "./hetero-demo".into(),
            plan: "./hetero-demo/plan.ron".into(),
        }
    }

    #[test]
    fn the_screen_shows_the_mix_the_runs_and_the_comparison_in_one_screen() {
        let text = screen().render();
        assert!(text.contains("80.0 %  single cuda:0"), "{text}");
        assert!(text.contains("20.0 %  row_cut cpu:0+cuda:0"), "{text}");
        assert!(text.contains("900 µs → 1000 µs"), "{text}");
        assert!(text.contains("20.0 ms → 25.0 ms"), "{text}");
        assert!(
            text.contains("on cuda:0: offload cpu:0+cuda:0 100 %"),
            "{text}"
        );
        // 1200 / 1000 measured.
        assert!(
            text.contains(
                "against cuda:0 alone: time to first token 1.20× faster, per output token 1.00× faster"
            ),
            "{text}"
        );
        // 64 tokens in 900 µs predicted, 1000 µs measured; 1 in 300, 330.
        assert!(text.contains("prefill 71111.1 → 64000.0"), "{text}");
        assert!(text.contains("decode 3333.3 → 3030.3"), "{text}");
        assert!(text.contains("left out opencl:1:0"), "{text}");
        assert!(text.lines().count() <= 30, "{}", text.lines().count());
    }

    #[test]
    fn the_reference_is_labelled_and_predicted_only() {
        let mut s = screen();
        s.runs.truncate(1);
        s.single_note = Some("the plan has one processor: cpu:0".into());
        let mix = |v: &[(&str, f64)]| Some(v.iter().map(|(k, x)| (k.to_string(), *x)).collect());
        s.reference = Some(Reference {
            machine: "a 16-core Xeon host with one H200".into(),
            plans: vec![
                Predicted {
                    label: "the plan (cpu:0 + cuda:0)".into(),
                    times: (Some(500.0), Some(100.0)),
                    mix: mix(&[("single cuda:0", 90.0), ("row_cut cpu:0+cuda:0", 10.0)]),
                },
                Predicted {
                    label: "cpu:0 alone".into(),
                    times: (Some(60_000.0), Some(20_000.0)),
                    mix: None,
                },
                Predicted {
                    label: "offload, 1.40 GiB/2.90 GiB on cuda:0".into(),
                    times: (Some(5000.0), Some(3000.0)),
                    mix: mix(&[("offload cpu:0+cuda:0", 25.0), ("single cuda:0", 75.0)]),
                },
            ],
        });
        let text = s.render();
        assert!(
            text.contains("REFERENCE profile of a 16-core Xeon"),
            "{text}"
        );
        assert!(text.contains("not run here"), "{text}");
        assert!(
            text.contains("single cuda:0 90 %, row_cut cpu:0+cuda:0 10 %"),
            "{text}"
        );
        assert!(text.contains("cpu:0 alone"), "{text}");
        assert!(
            text.contains("offload cpu:0+cuda:0 25 %") && text.contains("60.0 ms"),
            "{text}"
        );
        assert!(text.contains("the plan has one processor"), "{text}");
        assert!(text.lines().count() <= 30, "{}", text.lines().count());
    }

    #[test]
    fn a_plan_that_is_the_single_processor_s_says_so() {
        let mut s = screen();
        s.mix = vec![("single cuda:0".into(), 100.0)];
        let text = s.render();
        assert!(
            text.contains("the plan is cuda:0 alone at every length"),
            "{text}"
        );
        s.mix.push(("row_cut cpu:0+cuda:0".into(), 1.0));
        assert!(!s.render().contains("run-to-run noise"));
        assert_eq!(us(Some(5_065_100.0)), "5.07 s");
    }

    #[test]
    fn the_generation_table_shows_each_operator_and_the_forecast() {
        let r: Value = serde_json::from_str(
            r#"{"prompt_tokens": 24, "tokens": [5, 7], "ttft_us": 2000.0, "tpot_us": 500.0,
                "predicted": {"ttft_us": 1000.0, "tpot_us": null},
                "ops": [{"phase": "prefill", "op": "attn_q", "kind": "gemm",
                         "measured_us": 300.0, "predicted_us": 150.0},
                        {"phase": "prefill", "op": "sampling", "kind": "host",
                         "measured_us": 4.0, "predicted_us": null}],
                "check": {"passed": 9, "outputs": 9, "worst": "prefill `attn_q`",
                          "worst_rel_err": 1e-7, "worst_bound": 1e-4},
                "notes": ["synthetic weights: tokens are not a model's output"]}"#,
        )
        .unwrap();
        let mut t = String::new();
        generate_table(&r, &mut t);
        assert!(t.contains("24 prompt tokens, 2 generated"), "{t}");
        let row = |what: &str| t.lines().find(|l| l.contains(what)).unwrap().to_string();
        assert!(row("attn_q").ends_with("150 µs      300 µs    2.00"), "{t}");
        assert!(row("sampling").ends_with("-        4 µs       -"), "{t}");
        assert!(
            row("time to first token").ends_with("1000 µs     2000 µs    2.00"),
            "{t}"
        );
        assert!(
            row("per output token").ends_with("-      500 µs       -"),
            "{t}"
        );
        assert!(t.contains("check: 9/9 GEMM outputs"), "{t}");
        assert!(t.contains("note: synthetic weights"), "{t}");
        let g = Generated::of(&r);
        assert_eq!(g.ttft.rate(24.0), "24000.0 → 12000.0");
        assert_eq!(g.tpot.rate(1.0), "- → 2000.0");
    }

    #[test]
    fn speed_compares_both_ways() {
        assert_eq!(speed(Some(1.0), Some(2.0)), "2.00× faster");
        assert_eq!(speed(Some(3.0), Some(2.0)), "1.50× slower");
        assert_eq!(speed(None, Some(2.0)), "-");
    }
}
