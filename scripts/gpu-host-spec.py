#!/usr/bin/env python3
"""Writes the sweep specs of scripts/gpu-host-profile.sh.

Reads the agent's probe (`hetero-agent probe --json`) and the operators of
the bundled models (`hetero model show --json`, one file per model), and
writes one `SweepSpec` (JSON, see plan-format's `SweepSpec`) per processor:

    spec-<slug>.json   cases for that processor, most important first

The profile script runs each spec under a time budget and keeps the rows
measured when the budget runs out, so the order of the cases is the
priority (`plan_for`): headline shapes, then decode (M = 1..8), then
prefill M in tiers from coarse to fine. The vocabulary projection (lm_head)
is swept at decode lengths only: a prompt needs logits for its last token
alone.

Standard library only: the GPU host has python3 but nothing of ours.
"""

import argparse
import json
import pathlib
import re
import sys

DECODE = [1, 2, 3, 4, 5, 6, 7, 8]
# Prefill tiers, coarse to fine; 129/257/513/1025 sit just past the GPU's
# tile edges (the staircase), 100/1000/3000 between them.
TIER1 = [16, 64, 256, 1024, 4096]
TIER2 = [32, 128, 512, 2048]
TIER3 = [129, 257, 513, 1025, 100, 1000, 3000]


def slug(pid: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", pid).strip("-")


def load_ops(ops_dir: pathlib.Path):
    """Unique (k, n, kind) over every model; kind is 'head' for lm_head."""
    seen = {}
    models = []
    for f in sorted(ops_dir.glob("*.json")):
        doc = json.loads(f.read_text())
        models.append(doc.get("name", f.stem))
        for op in doc["ops"]:
            kind = "head" if op["name"] == "lm_head" else "body"
            key = (int(op["k"]), int(op["n"]))
            # A shape shared by a body op and a head stays a body op.
            if key not in seen or kind == "body":
                seen[key] = kind
    if not seen:
        sys.exit(f"no operators found in {ops_dir}/*.json")
    body = sorted(k for k, v in seen.items() if v == "body")
    head = sorted(k for k, v in seen.items() if v == "head")
    return models, body, head


def plan_for(proc):
    """(blocks, run params) for a processor, by API and capabilities. A block
    is (dtype, order, Ms, which ops: 'body' or 'head'); blocks are measured
    in order, so the list is the priority."""
    api = proc["api"]
    dtypes = proc["capabilities"]["dtypes"]
    edges = [129, 257, 513, 1025]
    if api == "cuda":
        run = {"warmups": 3, "repetitions": 10, "timeout_ms": 30000}
        blocks = [
            ("f16", "transposed", DECODE, "body"),
            ("f16", "aw", DECODE, "body"),
            ("f16", "transposed", [1, 8], "head"),
            ("f16", "transposed", TIER1, "body"),
            ("f16", "aw", TIER1, "body"),
            ("f16", "transposed", TIER2, "body"),
            # cuBLAS's staircase: `aw` puts M on the output's leading
            # dimension, and loses the tensor cores when M is odd.
            ("f16", "aw", edges, "body"),
            ("f16", "transposed", TIER3, "body"),
            ("bf16", "transposed", DECODE + TIER1, "body"),
            ("f32", "transposed", [1, 8, 64, 1024, 4096], "body"),
            ("f16", "aw", TIER2, "body"),
        ]
    elif api == "opencl" and proc["kind"] == "gpu":
        run = {"warmups": 2, "repetitions": 7, "timeout_ms": 30000}
        dt = "f16" if "f16" in dtypes else "f32"
        blocks = [
            (dt, "aw", DECODE, "body"),
            (dt, "aw", [1, 8], "head"),
            (dt, "aw", TIER1, "body"),
            (dt, "transposed", [1, 8, 64, 1024], "body"),
            (dt, "aw", TIER2, "body"),
            (dt, "aw", TIER3, "body"),
            (dt, "transposed", [2, 3, 4, 5, 6, 7, 16, 256, 4096], "body"),
        ]
    elif api == "opencl":  # PoCL and other CPU OpenCL devices: slow, sample thinly
        run = {"warmups": 1, "repetitions": 5, "timeout_ms": 20000}
        blocks = [
            ("f32", "aw", [1, 8], "body"),
            ("f32", "aw", [64, 256], "body"),
            ("f32", "aw", [2, 4, 16], "body"),
            ("f32", "aw", [1], "head"),
            ("f32", "aw", [3, 5, 6, 7, 32, 128, 512], "body"),
        ]
    elif api == "cpu":
        run = {"warmups": 1, "repetitions": 5, "timeout_ms": 20000}
        blocks = [
            ("f32", "aw", DECODE, "body"),
            ("f32", "aw", [1, 8], "head"),
            ("f32", "aw", [16, 64, 256, 1024], "body"),
            ("f16", "aw", DECODE, "body"),
            ("f32", "aw", [32, 128, 512, 2048], "body"),
            ("f16", "aw", [64, 256], "body"),
            ("f32", "aw", [4096], "body"),
        ]
    else:
        return None
    return [blk for blk in blocks if blk[0] in dtypes], run


def headline(proc):
    """Extra cases measured first, with more repetitions: the figures of
    docs/benchmarks.md."""
    api = proc["api"]
    many = {"warmups": 10, "repetitions": 50, "timeout_ms": 60000}
    if api == "cuda":
        return [
            ((4096, 4096, 4096), "f16", "transposed", many),
            ((4096, 4096, 4096), "f16", "aw", many),
            ((4096, 4096, 4096), "bf16", "transposed", many),
            ((4096, 4096, 4096), "f32", "transposed", many),
            ((8192, 8192, 8192), "f16", "transposed", many),
        ]
    if api == "cpu":
        few = {"warmups": 2, "repetitions": 7, "timeout_ms": 60000}
        return [((4096, 4096, 4096), "f32", "aw", few), ((1024, 1024, 1024), "f32", "aw", few)]
    if api == "opencl" and proc["kind"] == "gpu":
        few = {"warmups": 3, "repetitions": 10, "timeout_ms": 60000}
        dt = "f16" if "f16" in proc["capabilities"]["dtypes"] else "f32"
        return [((4096, 4096, 4096), dt, "aw", few)]
    return []


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--probe", required=True, type=pathlib.Path)
    ap.add_argument("--ops-dir", required=True, type=pathlib.Path)
    ap.add_argument("--out", required=True, type=pathlib.Path)
    ap.add_argument("--skip", default="npu-sim", help="comma list of processor ids to leave out")
    ap.add_argument("--limit", type=int, default=0, help="keep the first N cases of each spec (smoke test)")
    args = ap.parse_args()

    probe = json.loads(args.probe.read_text())
    models, body, head_shapes = load_ops(args.ops_dir)
    skip = set(filter(None, args.skip.split(",")))
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"models": models, "body_shapes": body, "head_shapes": head_shapes, "specs": []}
    for proc in probe["processors"]:
        if proc["id"] in skip or proc.get("simulated"):
            continue
        planned = plan_for(proc)
        if planned is None:
            continue
        blocks, run = planned
        dtypes = proc["capabilities"]["dtypes"]
        cases, ids = [], set()

        def add(m, k, n, dtype, order, run_override=None):
            cid = f"{proc['id']}/{m}x{k}x{n}/{dtype}/{order}"
            if cid in ids or dtype not in dtypes:
                return
            ids.add(cid)
            case = {
                "id": cid,
                "processor": proc["id"],
                "shape": {"m": m, "k": k, "n": n},
                "dtype": dtype,
                "order": order,
                "weights": "static",
            }
            if run_override:
                case["run"] = run_override
            cases.append(case)

        for (m, k, n), dtype, order, r in headline(proc):
            add(m, k, n, dtype, order, r)
        for dtype, order, ms, ops in blocks:
            for m in ms:
                for k, n in body if ops == "body" else head_shapes:
                    add(m, k, n, dtype, order)
        if args.limit:
            # Keep the headline cases' shapes but with the sweep's run params.
            cases = [dict(c, run=None) for c in cases[: args.limit]]
            for c in cases:
                c.pop("run")
        spec = {"schema_version": 1, "run": run, "cases": cases, "microbench": []}
        path = args.out / f"spec-{slug(proc['id'])}.json"
        path.write_text(json.dumps(spec, indent=1))
        summary["specs"].append({"processor": proc["id"], "name": proc["name"], "file": path.name, "cases": len(cases)})
        print(f"{path.name}: {proc['id']} ({proc['name']}): {len(cases)} cases", file=sys.stderr)
    (args.out / "plan.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
