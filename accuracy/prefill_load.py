"""Can a silicon row's own figures hold together? The prefill load they imply, and what the twin needs
changed to reproduce them (docs/accuracy.md, "vLLM's Llama-3.1-8B rows").

    PYTHONPATH=src python accuracy/prefill_load.py --csv silicon_sample.csv       # or --aic-python PATH
    PYTHONPATH=src python accuracy/prefill_load.py --csv FILE --engine vllm --model llama-3.1-8b \\
        [--loads-only]

1. Every row the calibration reads on the system (calibrate.rows.build_cases), by engine, model family and
   weight dtype: the prefill load its own figures imply (`prefill_load`), its largest value and the rows above
   1, which no GPU of that kind could have run as measured.
2. The rows of one engine and model (default vLLM's llama-3.1-8b): measured TTFT / TPOT, the twin's replay of
   the row as the calibration replays it (calibrate.price.Pricer, aggregated, the documented defaults), as
   AIConfigurator's generator launches vLLM (`aiconfigurator_vllm_launch`), and the replay with one thing
   changed, the value of each kind that comes nearest both measured figures (sum of
   |log(predicted / measured)|): fewer clients in flight, a share of every prompt already in the prefix cache,
   longer outputs.

--json FILE writes the rows of part 2 (and their load). Bad input: one line, exit 2.
"""

import argparse
import json
import math
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from prefill_stall import AIC_BUDGET_SPARE  # the sibling script (run from accuracy/)

from servelab.calibrate.aic import aic_csv
from servelab.calibrate.price import Pricer
from servelab.calibrate.recipes import RunSettings
from servelab.calibrate.rows import Case, build_cases, read_rows
from servelab.errors import ServelabError
from servelab.specs import Dtype, ModelSpec, SystemSpec, load_system

# the GPU's best measured GEMM rates (TFLOP/s) by the weights' dtype: a row cannot have run faster than these
GEMM_CEILINGS = {
    Dtype.bf16: ("gemm_bf16_tflops", "gemm_bf16_burst_tflops"),
    Dtype.fp16: ("gemm_bf16_tflops", "gemm_bf16_burst_tflops"),
    Dtype.fp8: ("gemm_fp8_tflops", "gemm_fp8_rowwise_tflops"),
    Dtype.fp8_block: ("gemm_fp8_tflops", "gemm_fp8_rowwise_tflops"),
}
# what-ifs of part 2: clients in flight (x nominal), share of each prompt cached, output length (x nominal)
CLIENT_SHARES = (0.75, 0.5, 0.35, 0.25)
PREFIX_HITS = (0.5, 0.75, 0.9)
OUTPUT_TIMES = (2, 4)


def gemm_ceiling_tflops(system: SystemSpec, dtype: Dtype) -> float | None:
    """The fastest GEMM rate measured on the system at this dtype, or None where none was measured."""
    rates = [system.measured[k].value for k in GEMM_CEILINGS.get(dtype, ()) if k in system.measured]
    return max(rates) if rates else None


def prompt_gemm_weights(model: ModelSpec) -> int:
    """The weights a prompt token meets in GEMMs: attention projections, MLPs, the experts it is routed to and
    routers; not norms and other small modules (`other`), the embedding lookup nor the LM head (a prefill
    takes logits of its last token only). Leaving any out keeps the load a lower bound."""
    counts = model.params
    embedding = counts.embedding if model.active_counts_embedding and counts.lm_head else 0
    return counts.active - counts.other - (counts.lm_head or counts.embedding) - embedding


def prefill_load(case: Case, system: SystemSpec) -> float | None:
    """A lower bound on the share of the GPUs' time that a row's prompts take at the rate its own figures
    imply: requests per second by Little's law (clients / (TTFT + (OSL - 1) x TPOT)) x ISL tokens x 2 x
    `prompt_gemm_weights` FLOPs a token, over the GPUs' fastest measured GEMM rate at the weights' dtype.
    Attention, decode steps and all else are left out, so a load above 1 says the figures cannot hold
    together: C clients at those lengths would need more prefill than the GPUs can do. None where the system
    has no measured GEMM rate for the dtype."""
    ceiling = gemm_ceiling_tflops(system, case.model.precision.weights)
    if ceiling is None:
        return None
    e2e_s = (case.ttft_ms + (case.osl - 1) * case.tpot_ms) / 1000
    tokens_per_s = case.concurrency / e2e_s * case.isl
    return tokens_per_s * 2 * prompt_gemm_weights(case.model) / (ceiling * 1e12 * case.parallel.gpus)


def load_table(cases: list[Case], system: SystemSpec) -> list[str]:
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for case in cases:
        load = prefill_load(case, system)
        key = (case.engine.value, case.family, case.model.precision.weights.value)
        groups[key].append(math.nan if load is None else load)
    out = [f"  {'engine':8s} {'family':10s} {'weights':10s} {'rows':>5s} {'max load':>9s} {'above 1':>8s}"]
    for (engine, family, weights), loads in sorted(groups.items()):
        known = [x for x in loads if not math.isnan(x)]
        top = f"{max(known):9.2f}" if known else f"{'no GEMM':>9s}"
        out.append(
            f"  {engine:8s} {family:10s} {weights:10s} {len(loads):5d} {top} {sum(x > 1 for x in known):8d}"
        )
    return out


def _err(got: tuple[float, float], case: Case) -> float:
    return abs(math.log(got[0] / case.ttft_ms)) + abs(math.log(got[1] / case.tpot_ms))


def _priced(pricer: Pricer, case: Case, hit: float = 0.0) -> tuple[float, float]:
    est = pricer.estimate(case, {}, prefix_hit_rate=hit)
    return est.ttft_ms, est.tpot_ms


def aiconfigurator_vllm_launch(case: Case) -> Case:
    """The case as AIConfigurator's config generator launches an aggregated vLLM worker: max-num-seqs the
    batch, max-num-batched-tokens the batch + ISL + 1,500, CUDA graphs for every batch up to it
    (ai-dynamo/aiconfigurator 095f58a, src/aiconfigurator/generator/rule_plugin/vllm.rule). The batch is the
    row's concurrency, as its batch_size writes it."""
    launched = RunSettings(
        recipe="AIConfigurator's generator launch",
        max_num_batched_tokens=case.concurrency + case.isl + AIC_BUDGET_SPARE,
        max_num_seqs=case.concurrency,
        cuda_graph_max_batch=case.concurrency,
    )
    return replace(case, settings=launched)


def what_ifs(pricer: Pricer, case: Case) -> dict[str, dict]:
    """The twin's replay of the row as measured ("nominal"), launched as AIConfigurator's generator launches
    vLLM, and, per kind of change, the value of it nearest the measured pair."""
    kinds: dict[str, list[tuple[float, tuple[float, float]]]] = {
        "clients": [
            (s, _priced(pricer, replace(case, concurrency=max(1, round(case.concurrency * s)))))
            for s in CLIENT_SHARES
        ],
        "prefix_hit": [(h, _priced(pricer, case, hit=h)) for h in PREFIX_HITS],
        "output": [(m, _priced(pricer, replace(case, osl=case.osl * m))) for m in OUTPUT_TIMES],
    }
    out = {}
    for kind, priced in (("nominal", case), ("aic_launch", aiconfigurator_vllm_launch(case))):
        ttft, tpot = _priced(pricer, priced)
        out[kind] = {"value": 1.0, "ttft_ms": ttft, "tpot_ms": tpot}
    for kind, tries in kinds.items():
        value, (ttft, tpot) = min(tries, key=lambda t: _err(t[1], case))
        out[kind] = {"value": value, "ttft_ms": ttft, "tpot_ms": tpot}
    return out


def chosen_rows(cases: list[Case], system: SystemSpec, engine: str, model: str, twin: bool) -> list[dict]:
    pricer = Pricer(system, "aggregated")
    rows = []
    for case in cases:
        if case.engine.value != engine or case.model.name != model:
            continue
        row = {
            "id": case.row_id,
            "parallel": case.parallel.label(),
            "concurrency": case.concurrency,
            "isl": case.isl,
            "osl": case.osl,
            "ttft_ms": case.ttft_ms,
            "tpot_ms": case.tpot_ms,
            "prefill_load": prefill_load(case, system),
        }
        if twin:
            row["twin"] = what_ifs(pricer, case)
        rows.append(row)
    return sorted(rows, key=lambda r: (r["osl"], r["isl"], r["parallel"]))


def _pair(got: dict) -> str:
    return f"{got['ttft_ms']:6.0f} / {got['tpot_ms']:5.1f}"


def row_lines(rows: list[dict]) -> list[str]:
    head = f"  {'ISL x OSL':11s} {'layout':7s} {'C':>4s} {'load':>5s}  {'measured':>14s}"
    if rows and "twin" in rows[0]:
        head += f"  {'twin':>14s}  {'AIC launch':>14s}"
        head += f"  {'clients x':>22s}  {'prefix hit':>22s}  {'output x':>22s}"
    out = [head]
    for r in rows:
        load = "-" if r["prefill_load"] is None else f"{r['prefill_load']:.2f}"
        line = f"  {r['isl']:>5d}x{r['osl']:<5d} {r['parallel']:7s} {r['concurrency']:4d} {load:>5s}  "
        line += f"{r['ttft_ms']:6.0f} / {r['tpot_ms']:5.1f}"
        if "twin" in r:
            t = r["twin"]
            line += f"  {_pair(t['nominal'])}  {_pair(t['aic_launch'])}"
            for kind in ("clients", "prefix_hit", "output"):
                line += f"  {t[kind]['value']:5g}: {_pair(t[kind])}"
        out.append(line)
    return out


def silicon_csv(args: argparse.Namespace) -> Path:
    if args.csv is not None:
        if not args.csv.is_file():
            raise ServelabError(f"--csv {args.csv}: not found (AIConfigurator's silicon_sample.csv)")
        return args.csv
    return aic_csv(args.aic_python)[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--csv", type=Path, help="AIConfigurator's silicon_sample.csv")
    ap.add_argument("--aic-python", type=Path, help="else: the python of an environment with AIConfigurator")
    ap.add_argument("--system", default="h200_sxm")
    ap.add_argument("--engine", default="vllm")
    ap.add_argument("--model", default="llama-3.1-8b", help="servelab's model name (ModelSpec.name)")
    ap.add_argument("--loads-only", action="store_true", help="part 2 without the twin")
    ap.add_argument("--json", type=Path, help="write the rows of part 2 here")
    args = ap.parse_args(argv)
    try:
        system = load_system(args.system)
        cases, _ = build_cases(read_rows(silicon_csv(args)), args.system)
    except ServelabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"prefill load implied by each row's own figures, {len(cases)} rows on {args.system} (lower bound;")
    print("above 1: more prefill than the GPUs' fastest measured GEMM rate allows)")
    print("\n".join(load_table(cases, system)))
    rows = chosen_rows(cases, system, args.engine, args.model, twin=not args.loads_only)
    print(f"\n{args.engine} {args.model}: {len(rows)} rows, TTFT / TPOT (ms)")
    print("\n".join(row_lines(rows)))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
