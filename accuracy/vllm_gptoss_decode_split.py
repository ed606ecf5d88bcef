"""Where the twin's decode step for vLLM's gpt-oss-120b runs long: for each development point of one system
(vLLM, gpt-oss, one engine version), the twin's TPOT against the measured one, beside the static decode step's
kernel time by part at the point's clients and mean context, and the factor one part alone would need to
close the gap. Held-out points are dropped before anything is read or printed.

    python accuracy/vllm_gptoss_decode_split.py DEV.json --system h100_sxm --version 0.18.0

DEV.json: the --out of `accuracy/closed_loop.py --part dev` (its priced points).
"""

import argparse
from pathlib import Path

from closed_loop import DATA, read_priced  # the sibling script (run from accuracy/)

from servelab.calibrate.closed_loop import read_points
from servelab.perfdb.db import perfdb_for
from servelab.predict.graph import StepShape, step_ops
from servelab.specs import Parallel, load_model, load_system

LINEARS = ("qkv_proj", "o_proj", "router", "lm_head")


def part_of(name: str) -> str:
    if name == "moe_experts":
        return "moe"
    if name in LINEARS:
        return "linears"
    if name.startswith("attention"):
        return "attention"
    if "allreduce" in name or "allgather" in name:
        return "comm"
    return "other"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("priced", type=Path)
    ap.add_argument("--system", default="h100_sxm")
    ap.add_argument("--version", default="0.18.0")
    args = ap.parse_args()
    saved = read_priced(args.priced)
    if saved is None:
        return 2
    points, _ = read_points(DATA, (args.system,))
    dev = [p for p in points if not p.heldout]  # held out dropped first
    mine = [
        p
        for p in dev
        if p.case.engine.value == "vllm" and p.case.family == "gpt-oss" and p.case.version == args.version
    ]
    model, system = load_model("gpt-oss-120b"), load_system(args.system)
    db = perfdb_for(system, "vllm")
    print(
        "point                | TPOT ms: measured twin gap | kernels ms: moe linears attention comm other"
        " | x needed: moe alone, the rest alone"
    )
    for p in sorted(mine, key=lambda p: (p.case.parallel.tp, p.case.isl, p.case.osl, p.case.concurrency)):
        c = p.case
        if p.key not in saved or "tpot_p50" not in saved[p.key]:
            continue
        shape = StepShape(decode_batch=c.concurrency, decode_kv_len=c.isl + c.osl // 2)
        parts = dict.fromkeys(("moe", "linears", "attention", "comm", "other"), 0.0)
        for op in step_ops(model, Parallel(tp=c.parallel.tp), shape):
            parts[part_of(op.name)] += db.query(op.key).us * op.count / 1000
        twin = saved[p.key]["tpot_p50"]
        gap = twin - c.tpot_ms
        rest = sum(parts.values()) - parts["moe"]
        print(
            f"tp{c.parallel.tp} {c.isl:5d}/{c.osl:5d} c{c.concurrency:<4d} | "
            f"{c.tpot_ms:6.2f} {twin:6.2f} {gap:5.2f} | "
            + " ".join(f"{v:5.2f}" for v in parts.values())
            + f" | {1 - gap / parts['moe']:5.2f} {1 - gap / rest:5.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
