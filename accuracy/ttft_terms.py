"""Which TTFT term transfers across model families: the rows of the engine calibration (AIConfigurator's H200
rows, as accuracy/calibrate_engines.py reads them) priced once at the engine profiles' documented defaults,
then each candidate term added to the predicted TTFT with its coefficient fitted per engine on the other
families (leave one family out). Prints the errors; writes nothing but --cache (the priced rows, reused when
it exists).

The cost per prompt token per MoE layer that this comparison picked is now the step model's own
`EngineProfile.moe_prompt_token_us`, fitted by `servelab calibrate engines`; the rows here are priced with its
documented default 0, so its line below still shows what the term buys over a step model without it.

    python accuracy/ttft_terms.py                      # about 1 min on 2 cores
    python accuracy/ttft_terms.py --cache /tmp/rows.json
"""

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from servelab.calibrate.fit import nelder_mead, rel_errors, soft_l1
from servelab.calibrate.price import LENGTH_SPREAD, PROMPTS_PER_CONCURRENCY, base_profiles
from servelab.calibrate.rows import Case
from servelab.calibrate.sources import Sources, gather
from servelab.errors import ServelabError
from servelab.perfdb.db import perfdb_for
from servelab.predict.graph import OpCategory, StepShape, op_category, step_ops
from servelab.predict.serving import Workload, estimate_aggregated
from servelab.predict.step import priced_step
from servelab.specs import SystemSpec, load_system

# Each term maps a priced row to its value in ms per unit of the fitted coefficient (coefficients >= 0).
TERMS: dict[str, Callable[[dict], float]] = {
    "fixed per request (ms)": lambda r: 1.0,
    "per request in flight (ms)": lambda r: float(r["concurrency"]),
    "per 1k prompt tokens (ms)": lambda r: r["isl"] / 1000.0,
    "first wave: clients x one prefill": lambda r: r["lane_clients"] * r["prefill_ms"],
    "x one prefill": lambda r: r["prefill_ms"],
    "x the MoE kernels of one prefill": lambda r: r["prefill_moe_ms"],
    "decode steps before the first token": lambda r: r["decode_step_ms"],
    # EngineProfile.moe_prompt_token_us, here on the prompt of the row's own request only
    "per prompt token per MoE layer (us)": lambda r: r["isl"] * r["moe_layers"] / 1000.0,
}
# `stream_interval` of InferenceX's H200 TensorRT-LLM recipes (benchmarks/single_node/fixed_seq_len/
# dsr1_fp8_h200_trt.sh: 10; .../deprecated/gptoss_fp4_h200_trt.sh: 20). The rows do not record it; the Llama
# rows are taken as run without it (they show no gap).
TRTLLM_STREAM_INTERVAL = {"deepseek": 10, "gpt-oss": 20}


def price_row(case: Case, system: SystemSpec) -> dict:
    """The simulator's TTFT and TPOT for the row (as the calibration replays it) and the pieces a term can
    use: one prompt's prefill alone (and its MoE kernel time), a decode step at the row's concurrency."""
    engine = base_profiles()[case.engine]
    db = perfdb_for(system, case.engine)
    wl = Workload(
        isl=case.isl,
        osl=case.osl,
        concurrency=case.concurrency,
        warmup=0,
        num_requests=PROMPTS_PER_CONCURRENCY * case.concurrency,
        range_ratio=LENGTH_SPREAD,
    )
    agg = estimate_aggregated(
        case.model, system, case.parallel, engine, case.concurrency, case.isl, case.osl, db=db, workload=wl
    )
    prefill_us = moe_us = 0.0
    for past in range(0, case.isl, engine.max_num_batched_tokens):  # chunked at the token budget
        shape = StepShape(prefill=((min(engine.max_num_batched_tokens, case.isl - past), past),))
        prefill_us += priced_step(case.model, case.parallel, shape, engine, db).us
        ops = step_ops(case.model, case.parallel, shape)
        moe_us += sum(db.query(op.key).us * op.count for op in ops if op_category(op.name) == OpCategory.moe)
    decode = StepShape(decode_batch=case.concurrency, decode_kv_len=case.isl + case.osl // 2)
    return {
        "row_id": case.row_id,
        "engine": case.engine,
        "family": case.family,
        "model": case.model_name,
        "concurrency": case.concurrency,
        "lane_clients": max(1, case.concurrency // case.parallel.attn_dp),
        "isl": case.isl,
        "moe_layers": case.model.num_moe_layers if case.model.is_moe else 0,
        "ttft_ms": case.ttft_ms,
        "pred_ttft_ms": agg.ttft_ms,
        "prefill_ms": prefill_us / 1000.0,
        "prefill_moe_ms": moe_us / 1000.0,
        "decode_step_ms": priced_step(case.model, case.parallel, decode, engine, db).us / 1000.0,
    }


def priced_rows(system_name: str, cache: Path | None) -> list[dict]:
    if cache and cache.exists():
        return json.loads(cache.read_text())
    system = load_system(system_name)
    cases = gather(Sources(aic_sample=True), system_name).cases
    rows = []
    for case in cases:
        try:
            rows.append(price_row(case, system))
        except ServelabError:  # the calibration leaves these out too
            continue
    if cache:
        cache.write_text(json.dumps(rows))
    return rows


def fit_coefficient(x: np.ndarray, pred: np.ndarray, meas: np.ndarray) -> float:
    """The coefficient c >= 0 of pred + c x closest to the measurements (soft-L1 of the log ratio)."""

    def loss(z: np.ndarray) -> float:
        return float(np.sum(soft_l1(np.log((pred + np.exp(z[0]) * x) / meas))))

    best = min((nelder_mead(loss, np.array([np.log(s)])) for s in (1e-3, 0.1, 10.0)), key=lambda b: b[1])
    return float(np.exp(best[0][0]))


def leave_one_family_out(rows: list[dict], term: Callable[[dict], float] | None) -> tuple[np.ndarray, dict]:
    """Relative TTFT errors of every row, its term fitted on its engine's other families; the coefficients
    by engine/family left out."""
    errors, coefficients = [], {}
    for engine in sorted({r["engine"] for r in rows}):
        mine = [r for r in rows if r["engine"] == engine]
        x = np.array([term(r) if term else 0.0 for r in mine])
        pred = np.array([r["pred_ttft_ms"] for r in mine])
        meas = np.array([r["ttft_ms"] for r in mine])
        family = np.array([r["family"] for r in mine])
        for left_out in sorted(set(family)):
            train, test = family != left_out, family == left_out
            c = fit_coefficient(x[train], pred[train], meas[train]) if term else 0.0
            coefficients[f"{engine}/{left_out}"] = c
            errors.extend(rel_errors(pred[test] + c * x[test], meas[test]))
    return np.array(errors), coefficients


def line(name: str, errors: np.ndarray) -> str:
    median, p90 = np.median(errors), np.percentile(errors, 90)
    return f"  {name:40s} n={errors.size:4d}  TTFT median {median:6.1%}  p90 {p90:7.1%}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", default="h200_sxm")
    ap.add_argument("--cache", type=Path, help="keep the priced rows in this JSON file (read when it exists)")
    args = ap.parse_args(argv)
    rows = priced_rows(args.system, args.cache)
    print(
        f"{len(rows)} rows priced at the documented defaults; each term fitted per engine, a family left out"
    )
    for engine in (None, "vllm", "sglang", "trtllm"):
        subset = [r for r in rows if engine in (None, r["engine"])]
        print(engine or "all engines")
        for name, term in {"none": None, **TERMS}.items():
            errors, coefficients = leave_one_family_out(subset, term)
            fitted = "  ".join(f"{k.split('/')[1]} {v:.3g}" for k, v in coefficients.items()) if term else ""
            print(line(name, errors) + (f"   fitted (family left out): {fitted}" if engine else ""))
    trt = [r for r in rows if r["engine"] == "trtllm"]
    pred = np.array([r["pred_ttft_ms"] for r in trt])
    waits = np.array([(TRTLLM_STREAM_INTERVAL.get(r["family"], 1) - 1) * r["decode_step_ms"] for r in trt])
    meas = np.array([r["ttft_ms"] for r in trt])
    print("trtllm, the recipes' stream_interval - 1 decode steps added (nothing fitted)")
    print(line("none", rel_errors(pred, meas)))
    print(line("stream_interval - 1 decode steps", rel_errors(pred + waits, meas)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
