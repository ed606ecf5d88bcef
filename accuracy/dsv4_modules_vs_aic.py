"""servelab's DeepSeek-V4 attention-module prices for vLLM against AIConfigurator's measured vLLM 0.24.0
tables on H100, H200 and B200 (tests/data/aiconfigurator, pinned by scripts/refresh_aic_dsv4.py). Nothing of
servelab was fitted on these rows: they are held out.

    python accuracy/dsv4_modules_vs_aic.py [--json OUT] [--every N]

AIConfigurator times vLLM's whole DeepseekV4Attention forward of one layer
(collector/vllm/collect_dsv4_attn.py: the q / kv / compressor / indexer projections, the compressors, the
indexer and top-k, the sparse attention and the output projections; the pre-attention norm, mHC and the
all-reduce are ops of their own in its model). servelab prices the same work as several ops of its step
graph: the attention module key (compressors, indexer, sparse attention) and the projection GEMMs around it.
Per AIConfigurator row (heads per rank, split, batch, new tokens, cached tokens; milliseconds per layer) the
step graph of that shape is built at that split, and the ops of one CSA (or HCA) layer's attention block are
summed, priced twice on the same system with the vllm backend: as servelab does now (tables, ratios,
transfers) and by the roofline alone (how every DeepSeek-V4 op of an engine was priced before the
engine-kernel tables). Errors are predicted / measured - 1; `in band` is the share of rows whose measurement
lies inside the answer's band; the sources are those of the block's kernel time.
"""

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from servelab.perfdb.db import PerfDB
from servelab.predict.graph import StepShape, step_ops
from servelab.specs import Parallel, load_model, load_system

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "aiconfigurator"
SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm")
OPS = ("csa_context", "csa_generation", "hca_context", "hca_generation")
# the ops of servelab's step graph inside vLLM's DeepseekV4Attention forward (besides the module key)
BLOCK_GEMMS = ("q_a_kv_proj", "q_b_proj", "compressor_proj", "indexer_q_proj", "indexer_k_proj", "o_a_proj",
               "o_b_proj")  # fmt: skip
MODELS = {64: "sgl-project/DeepSeek-V4-Flash-FP8", 128: "sgl-project/DeepSeek-V4-Pro-FP8"}


def rows(system: str, op: str, every: int) -> list[dict]:
    path = DATA / system / "vllm" / "0.24.0" / f"dsv4_{op}_module_perf.parquet"
    table = pq.read_table(path).to_pylist()
    return table[::every]


def price(db: PerfDB, op: str, r: dict) -> tuple[float, float, float, dict]:
    """(us, low, high, kernel us by source) of one layer's attention block at the row's shape."""
    kind = op.split("_")[0]
    model = load_model(MODELS[r["num_heads"] * r["tp_size"]])
    parallel = Parallel(tp=r["tp_size"]).validate(model)
    if op.endswith("generation"):
        shape = StepShape(decode_batch=r["batch_size"], decode_kv_len=max(r["step"], 1))
    else:
        shape = StepShape(prefill=((r["isl"], r["step"]),) * r["batch_size"])
    total, low, high, layers, sources = 0.0, 0.0, 0.0, 0, defaultdict(float)
    group = None
    for o in step_ops(model, parallel, shape):
        name = str(o.key.op)
        if name.startswith("dsv4_"):
            group = name.split("_")[1]
            if group == kind and o.count > 0:
                layers += o.count
        elif name.endswith("attention_prefill") or name.endswith("attention_decode"):
            group = "swa"
        if group != kind or not (name.startswith("dsv4_") or o.name in BLOCK_GEMMS):
            continue
        lat = db.query(o.key)
        total += lat.us * o.count
        low += lat.low_us * o.count
        high += lat.high_us * o.count
        sources[lat.source] += lat.us * o.count
    return total / layers, low / layers, high / layers, dict(sources)


def stats(errors: list[float]) -> dict:
    a = np.abs(np.asarray(errors))
    signed = np.asarray(errors)
    return {
        "rows": len(errors),
        "median_abs_pct": round(100 * float(np.median(a)), 1),
        "p90_abs_pct": round(100 * float(np.quantile(a, 0.9)), 1),
        "median_signed_pct": round(100 * float(np.median(signed)), 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--every", type=int, default=1, help="every n-th row (quick runs)")
    args = ap.parse_args(argv)
    out: dict = {}
    print(f"{'system':9} {'module':15} {'rows':>5} {'servelab now: median / p90 / bias':>34} "
          f"{'in band':>8} {'roofline: median / p90 / bias':>31}  sources now")  # fmt: skip
    for system_name in SYSTEMS:
        system = load_system(system_name)
        now, roof = PerfDB(system, backend="vllm"), PerfDB(system, backend="vllm", use_tables=False)
        for op in OPS:
            errs, roof_errs, inside, sources = [], [], 0, defaultdict(float)
            for r in rows(system_name, op, args.every):
                measured = r["latency"] * 1000.0
                us, low, high, by_source = price(now, op, r)
                rus = price(roof, op, r)[0]
                if measured <= 0 or us <= 0 or rus <= 0:
                    continue
                errs.append(us / measured - 1)
                roof_errs.append(rus / measured - 1)
                inside += low <= measured <= high
                for k, v in by_source.items():
                    sources[k] += v
            s, rs = stats(errs), stats(roof_errs)
            s["in_band_pct"] = round(100 * inside / max(len(errs), 1), 1)
            total = sum(sources.values()) or 1.0
            shares = {k: round(v / total, 3) for k, v in sorted(sources.items())}
            out[f"{system_name}/{op}"] = {"now": s, "roofline": rs, "kernel_time_by_source": shares}
            print(
                f"{system_name:9} {op:15} {s['rows']:5d} "
                f"{s['median_abs_pct']:>12.1f} / {s['p90_abs_pct']:6.1f} / {s['median_signed_pct']:+6.1f} "
                f"{s['in_band_pct']:7.1f}% "
                f"{rs['median_abs_pct']:>12.1f} / {rs['p90_abs_pct']:6.1f} / "
                f"{rs['median_signed_pct']:+6.1f}  "
                + ", ".join(f"{k} {100 * v:.0f} %" for k, v in shares.items())
            )
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
