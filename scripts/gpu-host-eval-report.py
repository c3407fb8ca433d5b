#!/usr/bin/env python3
"""The report of scripts/gpu-host-eval.sh: summary.md and SVG charts from the
raw rows (standard library only, so it runs on the GPU host too).

    python3 scripts/gpu-host-eval-report.py RAW_DIR OUT_DIR

RAW_DIR is the `raw/` folder of a run (unpack raw.tar.gz to re-run it).
"""
import glob
import json
import os
import statistics
import sys
from xml.sax.saxutils import escape


def jl(path):
    rows = []
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    return rows


def fnum(x, d=1):
    if x is None:
        return "–"
    if isinstance(x, float) and x != x:
        return "–"
    return f"{x:,.{d}f}".replace(",", " ")


def us(x):
    if x is None:
        return "–"
    if x >= 10000:
        return f"{x / 1000:,.1f} ms".replace(",", " ")
    return f"{x:,.1f} µs".replace(",", " ")


def gib(b):
    return f"{b / 2**30:.2f} GiB" if b >= 2**28 else f"{b / 2**20:.1f} MiB"


def bar_chart(path, title, rows, unit, log=False, ref=None):
    """rows: [(label, [(series, value)])]; a horizontal grouped bar chart."""
    import math
    series = []
    for _, vals in rows:
        for s, _ in vals:
            if s not in series:
                series.append(s)
    colors = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860"]
    vals = [v for _, vs in rows for _, v in vs if v and v > 0]
    if not vals:
        return False
    vmax = max(vals + ([ref] if ref else []))
    vmin = min(vals + ([ref] if ref else []))
    lab_w, chart_w, bar_h = 260, 460, 12
    group_h = bar_h * len(series) + 8
    h = 60 + group_h * len(rows) + 20 * len(series)
    w = lab_w + chart_w + 90

    def xpos(v):
        if log:
            lo = math.log10(vmin) - 0.1
            hi = math.log10(vmax) + 0.05
            return lab_w + chart_w * (math.log10(v) - lo) / (hi - lo)
        return lab_w + chart_w * v / (vmax * 1.05)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="10" y="20" font-size="14" font-weight="bold">{escape(title)}</text>']
    y = 40
    for label, vs in rows:
        out.append(f'<text x="{lab_w - 6}" y="{y + group_h / 2}" text-anchor="end">{escape(label)}</text>')
        for s, v in vs:
            i = series.index(s)
            if v and v > 0:
                x1 = xpos(v)
                out.append(f'<rect x="{lab_w}" y="{y + i * bar_h}" width="{max(x1 - lab_w, 1):.1f}" height="{bar_h - 2}" fill="{colors[i % len(colors)]}"/>')
                out.append(f'<text x="{x1 + 3:.1f}" y="{y + i * bar_h + bar_h - 3}">{escape(fnum(v, 2 if v < 10 else 1))}</text>')
        y += group_h
    if ref:
        x = xpos(ref)
        out.append(f'<line x1="{x:.1f}" y1="35" x2="{x:.1f}" y2="{y}" stroke="black" stroke-dasharray="4 3"/>')
    out.append(f'<text x="{lab_w}" y="{y + 12}">{escape(unit)}{" (log scale)" if log else ""}</text>')
    y += 20
    for i, s in enumerate(series):
        out.append(f'<rect x="{lab_w}" y="{y + 20 * i - 9}" width="10" height="10" fill="{colors[i % len(colors)]}"/>')
        out.append(f'<text x="{lab_w + 14}" y="{y + 20 * i}">{escape(s)}</text>')
    out.append("</svg>")
    open(path, "w").write("\n".join(out) + "\n")
    return True


def main():
    raw, out = sys.argv[1], sys.argv[2]
    md = ["# GPU-host evaluation (issue 11)", ""]
    host = open(os.path.join(raw, "host.txt")).read() if os.path.exists(os.path.join(raw, "host.txt")) else ""
    md += ["## Machine", "", "```", host.strip(), "```", ""]
    steps = jl(os.path.join(raw, "steps.jsonl"))
    md += ["## Steps", "", "| step | cap s | seconds | exit | note |", "|---|---|---|---|---|"]
    for s in steps:
        if s.get("skipped"):
            md.append(f"| {s['step']} | | | | skipped: budget spent |")
        else:
            note = "timed out" if s.get("timed_out") else ("" if s["exit"] == 0 else "failed")
            md.append(f"| {s['step']} | {s['cap_s']} | {s['seconds']} | {s['exit']} | {note} |")
    md.append("")
    notes = []
    for f in sorted(glob.glob(os.path.join(raw, "*", "notes.txt"))):
        for line in open(f):
            if line.strip() and line.strip() not in notes:
                notes.append(line.strip())
    if notes:
        md += ["**Notes from the runs:**", ""] + [f"- {n}" for n in notes] + [""]
    charts = []

    # 1. Regret.
    cands = jl(os.path.join(raw, "regret", "regret.jsonl"))
    cells = jl(os.path.join(raw, "regret", "cells.jsonl"))
    if cells:
        once = [c for c in cells if c.get("regret") is not None and not c.get("same_as")]
        regs = [c["regret"] for c in once]
        pre = [c["regret"] for c in once if c["phase"] == "prefill"]
        dec = [c["regret"] for c in once if c["phase"] == "decode"]
        status = {}
        for c in cands:
            status[c.get("status", "?")] = status.get(c.get("status", "?"), 0) + 1
        md += ["## 1. Regret", "",
               "Regret of a cell = measured time of the plan's decision / fastest measured candidate "
               "(the decision included), each a median of the timed runs after a checked warm-up.", ""]
        def summ(v):
            return f"median **{statistics.median(v):.3f}**, worst **{max(v):.3f}** over {len(v)} cells" if v else "no cells"
        md += [f"- all: {summ(regs)}", f"- prefill: {summ(pre)}", f"- decode: {summ(dec)}",
               f"- candidates: " + ", ".join(f"{k} {v}" for k, v in sorted(status.items())),
               "- a cell with the same GEMMs and decision as an earlier one (the lm_head in prefill, prefill 1 and "
               "decode 1) is measured once and counted once", ""]
        md += ["| op | cell | M | plan's decision | its time | fastest measured | its time | regret | run / candidates |",
               "|---|---|---|---|---|---|---|---|---|"]
        for c in cells:
            cell = c["cell"] + (f" (= {c['same_as']})" if c.get("same_as") else "")
            if c.get("status") == "error":
                md.append(f"| {c['op']} | {cell} | | error: {escape(str(c.get('reason', '')))[:160]} | | | | | |")
                continue
            md.append(f"| {c['op']} | {cell} | {c.get('m', '–')} | {c.get('chosen') or '–'} | {us(c.get('chosen_us'))} | "
                      f"{c.get('best') or '–'} | {us(c.get('best_us'))} | {fnum(c.get('regret'), 3)} | {c.get('measured', 0)} / {c.get('candidates', 0)} |")
        md.append("")
        md += ["<details><summary>Every candidate (predicted against measured)</summary>", "",
               "| op | cell | candidate | chosen | predicted | measured | measured / predicted | parts: each processor's own time in it (device timer where it has one) and prediction | status |",
               "|---|---|---|---|---|---|---|---|---|"]
        for c in cands:
            m = c.get("measured_us")
            r = (m / c["predicted_us"]) if m and c.get("predicted_us") else None
            st = c.get("status", "?") + (f" ({c['reason']})" if c.get("reason") and c.get("status") != "ok" else "")
            parts = " / ".join(f"{p['processor']} {us(p.get('measured_us'))} (pred. {us(p.get('predicted_us'))})" for p in c.get("parts", []))
            md.append(f"| {c['op']} | {c['cell']} | {c['label']} | {'✓' if c.get('chosen') else ''} | {us(c.get('predicted_us'))} | "
                      f"{us(m)} | {fnum(r, 2)} | {parts} | {escape(st)[:160]} |")
        md += ["", "</details>", ""]
        if bar_chart(os.path.join(out, "regret.svg"), "Regret per cell (plan's decision / fastest measured)",
                     [(f"{c['op']} {c['cell']}", [("regret", c.get("regret"))]) for c in once],
                     "measured / best measured", ref=1.0):
            charts.append("regret.svg")

        # 2. Splits.
        md += ["## 2. Splits against the perfect-overlap bound", "",
               "For a split over processors a, b with Ta, Tb their measured times for the whole operator alone: "
               "bound T* = Ta·Tb/(Ta+Tb) (1/Σ1/Ti for three); speedup = min(Ta, Tb) / T_split; "
               "the most any split can give is min(Ta, Tb)/T* = (Ta+Tb)/max(Ta, Tb); efficiency = T*/T_split.", ""]
        md += ["| op | cell | split | plan's | alone (each) | split | bound | speedup | max speedup | efficiency |",
               "|---|---|---|---|---|---|---|---|---|---|"]
        rows_chart = []
        nsplit = 0
        for c in once:
            for s in c.get("splits", []):
                g = s.get("gain")
                alone = " / ".join(us(x) for x in (s.get("singles_us") or [])) or "not measured"
                if g:
                    nsplit += 1
                    md.append(f"| {c['op']} | {c['cell']} | {s['label']} | {'✓' if s['chosen'] else ''} | {alone} | {us(g['split_us'])} | "
                              f"{us(g['bound_us'])} | {g['speedup']:.3f} | {g['bound_speedup']:.3f} | {g['efficiency']:.3f} |")
                    rows_chart.append((f"{c['op']} {c['cell']}{' *' if s['chosen'] else ''}",
                                       [("speedup", g["speedup"]), ("bound", g["bound_speedup"])]))
                else:
                    md.append(f"| {c['op']} | {c['cell']} | {s['label']} | {'✓' if s['chosen'] else ''} | {alone} | | | | | |")
        chosen_splits = sum(1 for c in once for s in c.get("splits", []) if s["chosen"])
        md += ["", f"{nsplit} measured splits with both processors measured alone; the plan chose a split in {chosen_splits} cells.", ""]
        if bar_chart(os.path.join(out, "speedup.svg"), "Split speedup over the best processor alone, and its bound (* = plan's)",
                     rows_chart, "min(Ta,Tb) / time", ref=1.0):
            charts.append("speedup.svg")

    # 3. Handoff.
    micro = []
    for f in sorted(glob.glob(os.path.join(raw, "microbench-*.out"))):
        for r in jl(f):
            if r.get("type") == "microbench" and r.get("status", "ok") == "ok":
                micro.append(r)
    hand = jl(os.path.join(raw, "handoff", "handoff.jsonl"))
    if micro or hand:
        md += ["## 3. Handoff: polling against blocking", ""]
        if micro:
            md += ["The agent's microbenchmarks (host µs, median and p90): `sync_block` / `sync_poll` are the time "
                   "from a kernel's end to the host seeing it, blocking vs spinning on a host flag; "
                   "`submit_empty` a launch + wait of an empty kernel.", "",
                   "| processor | bench | median | p90 | samples |", "|---|---|---|---|---|"]
            for r in micro:
                st = r.get("stats", {})
                md.append(f"| {r.get('processor')} | {r.get('bench')} | {fnum(st.get('median_us'), 2)} | {fnum(st.get('p90_us'), 2)} | {st.get('count', '')} |")
            md.append("")
        if hand:
            md += ["An operator alone on each processor through the runtime (`attn_k`), time = the runtime's operator "
                   "time (input copy, run, wait, output copy), medians. *poll*: sleep through the predicted time, then "
                   "spin on the completion flag (HeteroLLM §4.2); *block*: the backend's blocking wait, alternated run "
                   "by run with poll; *spin*: poll with a prediction of zero (spins at once), alternated with *block again*. "
                   "A poll whose prediction is too long waits for it: poll − spin is the cost of the prediction's error.", "",
                   "| processor | cell | predicted | poll | block | block − poll | spin | block again | block − spin | status |",
                   "|---|---|---|---|---|---|---|---|---|---|"]
            rows_chart = []
            for h in hand:
                d1 = h["block_median_us"] - h["poll_median_us"] if h.get("poll_median_us") is not None else None
                d2 = h["block_again_median_us"] - h["spin_median_us"] if h.get("spin_median_us") is not None else None
                md.append(f"| {h['processor']} | {h['cell']} | {us(h.get('predicted_us'))} | {us(h.get('poll_median_us'))} | {us(h.get('block_median_us'))} | "
                          f"{fnum(d1, 1)} µs | {us(h.get('spin_median_us'))} | {us(h.get('block_again_median_us'))} | {fnum(d2, 1)} µs | "
                          f"{h.get('status')} {escape(str(h.get('reason', '')))[:100]} |")
                if h.get("poll_median_us"):
                    rows_chart.append((f"{h['processor']} {h['cell']}", [(k, h.get(k + "_median_us")) for k in ("poll", "block", "spin", "block_again")]))
            md.append("")
            if bar_chart(os.path.join(out, "handoff.svg"), "attn_k through the runtime: polling vs blocking wait",
                         rows_chart, "µs (median)", log=True):
                charts.append("handoff.svg")

    # 4. Offload.
    off = jl(os.path.join(raw, "offload", "offload.jsonl"))
    if off:
        md += ["## 4. Offload-mode decode", ""]
        pl = [r for r in off if r.get("kind") == "placement"]
        if pl:
            p = pl[0]
            md += [f"Model `{p['model']}`: {p['weights'] / 1e9:.3f} G weights in the linear operators; GPU memory budget "
                   f"{gib(p['budget_bytes'])}, {gib(p['resident_bytes'])} resident on {p['gpu']} "
                   f"(the rest on {p['cpu']}, copied to {p['gpu']} every step where the plan says CG).", "",
                   "| op | layers | decision (decode, 1 token) | predicted per layer |", "|---|---|---|---|"]
            for d in p["decisions"]:
                md.append(f"| {d['op']} | {d['layers']} | {d['label']} | {us(d['predicted_us'])} |")
            md.append("")
        var = [r for r in off if r.get("kind") == "variant"]
        md += ["| variant | what | per token | tokens/s | vs stream | vs cpu | check | status |", "|---|---|---|---|---|---|---|---|"]
        by = {r["variant"]: r for r in var if r.get("status") == "ok"}
        for r in var:
            t = r.get("tokens_per_s")
            vs = lambda k: fnum(t / by[k]["tokens_per_s"], 2) + "×" if t and k in by and by[k].get("tokens_per_s") else "–"
            c = r.get("check") or {}
            md.append(f"| {r['variant']} | {r.get('what', '')} | {us(r.get('per_token_us'))} | {fnum(t, 2)} | {vs('stream')} | {vs('cpu')} | "
                      f"{c.get('passed', '–')}/{c.get('outputs', '–')} | {r.get('status')} {escape(str(r.get('reason', '')))[:120]} |")
        md += ["", "Decode of one token per step, linear operators only (attention and the rest are not run); "
               "synthetic weights, distinct per layer; blocking waits.", ""]
        if bar_chart(os.path.join(out, "offload.svg"), "Decode tokens/s under the GPU memory budget",
                     [(r["variant"], [("tokens/s", r.get("tokens_per_s"))]) for r in var if r.get("tokens_per_s")],
                     "tokens/s"):
            charts.append("offload.svg")

    # 5. Predictor accuracy.
    fr = os.path.join(raw, "fit-report.json")
    if os.path.exists(fr):
        rep = json.load(open(fr))
        md += ["## 5. Predictor accuracy on held-out rows (k-fold)", "",
               "`hetero fit datasets/gpu-host-h200 --report` (made before the run, no GPU needed): every row is "
               "predicted by a model fitted without its fold.", "",
               "| processor | dtype | model | held-out MAPE | within ±10 % | within ±20 % | rows |", "|---|---|---|---|---|---|---|"]
        for e in rep.get("entries", []):
            md.append(f"| {e['processor']} | {e['dtype']} | {e['model']} | {e['mape']:.1f} % | {100 * e['within_10pct']:.0f} % | "
                      f"{100 * e['within_20pct']:.0f} % | {e['samples']} |")
        for s in rep.get("skipped", []):
            md.append(f"| {s} | | skipped (too few rows) | | | | |")
        md.append("")
    if charts:
        md += ["## Charts", ""] + [f"![{c}]({c})" for c in charts] + [""]
    open(os.path.join(out, "summary.md"), "w").write("\n".join(md) + "\n")
    print(f"wrote {os.path.join(out, 'summary.md')} and {', '.join(charts) or 'no charts'}", file=sys.stderr)


if __name__ == "__main__":
    main()
