"""Compare GPU-timed steps (accuracy/gpu_step_check.py, accuracy/gpu_tp_step_check.py) with servelab's `torch`
backend predictions (kernel time only: the torch backend adds no engine overhead).

python accuracy/compare_step_check.py accuracy/results/step_check_h200.json

Rows of one rank timed alone (gpu_tp_step_check.py --shard-of T) are priced as that rank of a TP T / EP T
split with the communication ops left out (none ran), on the tables of the GPU the file names (h100_sxm for an
H100, h200_sxm for an H200) unless --system says otherwise; the per-rank shapes the script built
(gpu_shard_shapes.py) are checked against the op graph's first. Prefill rows also give the whole model's
depth: the measured time scaled by layers (its embedding and LM head, under 0.1 ms, scale with it) beside the
op graph's price of the full-depth step.
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from gpu_shard_shapes import shard_dims

from servelab.engines import Engine, router_dtype
from servelab.perfdb.db import PerfDB
from servelab.predict.engines import engine_profile
from servelab.predict.graph import OpCategory, StepShape, op_category, step_ops
from servelab.predict.step import breakdown, step_time
from servelab.specs import Parallel, load_model, load_system
from servelab.specs.registry import DATA

ROOT = Path(__file__).resolve().parents[1]
SYSTEM_OF_GPU = {"H100": "h100_sxm", "H200": "h200_sxm"}


def config_of(row: dict) -> dict:
    """The config the row's stack was built from: the file it names (relative to the repository), else the
    embedded model of its name."""
    path = ROOT / row["config"] if "config" in row else DATA / "models" / f"{row['model']}.json"
    return json.loads(path.read_text())


def model_with_layers(cfg: dict, name: str, layers: int):
    """The model at `layers` layers, in bf16 as the GPU scripts run it (no checkpoint quantization), with its
    router in the format vLLM runs it in, as the scripts build it (float32 for MiniMax-M2)."""
    cfg = dict(cfg, num_hidden_layers=layers)
    cfg.pop("layer_types", None)
    cfg.pop("quantization_config", None)
    path = Path(tempfile.mkdtemp()) / name
    path.mkdir()
    (path / "config.json").write_text(json.dumps(cfg))
    model = load_model(str(path))
    return model.with_router_dtype(router_dtype(Engine.VLLM, model.architecture))


def system_of(results: dict) -> str:
    """The system whose tables price the file: the GPU it was timed on."""
    gpu = results["provenance"]["gpu"]
    found = [system for name, system in SYSTEM_OF_GPU.items() if name in gpu]
    if not found:
        raise SystemExit(f"{gpu!r}: no system for this GPU; pass --system")
    return found[0]


def check_shard(row: dict, cfg: dict, model, parallel: Parallel) -> None:
    """The rank the script built holds what the op graph prices: heads, KV heads, experts."""
    d = shard_dims(cfg, row["shard_of"], row.get("rank", 0))
    graph = (
        parallel.heads_local(model),
        parallel.kv_heads_local(model),
        model.moe.num_experts // parallel.ep,
    )
    if (d.heads, d.kv_heads, d.experts) != graph:
        raise SystemExit(f"{row['model']}: the script built {d} but the op graph prices {graph}")


def shape_of(row: dict) -> tuple[StepShape, str]:
    if row["phase"] == "prefill":
        return StepShape(prefill=((row["seq"], 0),) * row["batch"]), f"prefill b{row['batch']} s{row['seq']}"
    return (
        StepShape(decode_batch=row["batch"], decode_kv_len=row["kv_len"]),
        f"decode b{row['batch']} kv{row['kv_len']}",
    )


def compare(results: dict, system: str = "h200_sxm", use_tables: bool = True) -> list[dict]:
    db = PerfDB(load_system(system), use_tables=use_tables)
    engine = engine_profile("torch")
    out = []
    for row in results["rows"]:
        cfg = config_of(row)
        model = model_with_layers(cfg, row["model"], row["layers"])
        shape, label = shape_of(row)
        parallel = Parallel(tp=row.get("tp", 1), ep=row.get("ep", 1))
        shard = "shard_of" in row
        if shard:
            check_shard(row, cfg, model, parallel)
            label += f" rank 0 of tp{parallel.tp} ep{parallel.ep}"
        elif parallel.tp > 1:
            label += f" tp{parallel.tp} ep{parallel.ep}"
        ops = step_ops(model, parallel, shape)
        if shard:  # one rank alone ran no collective
            ops = [op for op in ops if op_category(op.name) != OpCategory.communication]
        pred = step_time(ops, db, engine, row["batch"], decode_only=row["phase"] == "decode")
        pred_ms = pred.us / 1000
        out.append(
            dict(
                model=row["model"],
                case=label,
                measured_ms=row["ms"],
                predicted_ms=pred_ms,
                low_ms=pred.low_us / 1000,
                high_ms=pred.high_us / 1000,
                error_pct=100 * (pred_ms / row["ms"] - 1),
                sources=pred.sources,
                top_ops={k: round(v / 1000, 3) for k, v in list(breakdown(ops, db).items())[:3]},
                router_ms=breakdown(ops, db).get("router", 0.0) / 1000,
            )
        )
        if shard and row["phase"] == "prefill":
            out[-1].update(full_depth(row, cfg, parallel, shape, db, engine))
    return out


def full_depth(row: dict, cfg: dict, parallel: Parallel, shape: StepShape, db: PerfDB, engine) -> dict:
    """The measured step scaled to the model's depth, and the op graph's price of that step."""
    layers = cfg["num_hidden_layers"]
    model = model_with_layers(cfg, row["model"], layers)
    ops = [op for op in step_ops(model, parallel, shape) if op_category(op.name) != OpCategory.communication]
    return dict(
        full_layers=layers,
        full_measured_ms=row["ms"] * layers / row["layers"],
        full_predicted_ms=step_time(ops, db, engine, row["batch"], decode_only=False).us / 1000,
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--system", help="the tables to price with (default: those of the GPU the file names)")
    ap.add_argument("--roofline-only", action="store_true", help="ignore perf tables (roofline for every op)")
    args = ap.parse_args()
    results = json.loads(Path(args.results).read_text())
    system = args.system or system_of(results)
    rows = compare(results, system, use_tables=not args.roofline_only)
    print(f"{results['provenance']['gpu']}, priced with {system} tables")
    print(
        "| model | case | measured ms | predicted ms (band) | error | op sources | top ops (ms) | router ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['case']} | {r['measured_ms']:.3f} | {r['predicted_ms']:.3f} "
            f"({r['low_ms']:.3f}-{r['high_ms']:.3f}) | {r['error_pct']:+.1f} % | {r['sources']} "
            f"| {r['top_ops']} | {r['router_ms']:.3f} |"
        )
    errs = [abs(r["error_pct"]) for r in rows]
    inside = sum(r["low_ms"] <= r["measured_ms"] <= r["high_ms"] for r in rows)
    print(
        f"\nmedian |error| {statistics.median(errs):.1f} %, max {max(errs):.1f} %, "
        f"{inside}/{len(rows)} measurements inside the predicted band"
    )
    for r in rows:
        if "full_layers" in r:
            full, measured = r["full_predicted_ms"], r["full_measured_ms"]
            print(
                f"{r['case']}, all {r['full_layers']} layers: measured x layers {measured:.1f} ms, "
                f"op graph {full:.1f} ms ({100 * (full / measured - 1):+.1f} %)"
            )


if __name__ == "__main__":
    main()
