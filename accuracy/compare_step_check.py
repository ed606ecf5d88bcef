"""Compare GPU-timed steps (accuracy/gpu_step_check.py) with servelab's `torch` backend predictions.

python accuracy/compare_step_check.py accuracy/results/step_check_h200.json [--markdown]
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from servelab.perfdb.db import PerfDB
from servelab.predict.engines import engine_profile
from servelab.predict.graph import StepShape, step_ops
from servelab.predict.step import breakdown, step_time
from servelab.specs import Parallel, load_model, load_system
from servelab.specs.registry import DATA


def model_with_layers(name: str, layers: int):
    cfg = json.loads((DATA / "models" / f"{name}.json").read_text())
    cfg["num_hidden_layers"] = layers
    cfg.pop("layer_types", None)
    path = Path(tempfile.mkdtemp()) / name
    path.mkdir()
    (path / "config.json").write_text(json.dumps(cfg))
    return load_model(str(path))


def compare(results: dict, system: str = "h200_sxm", use_tables: bool = True) -> list[dict]:
    db = PerfDB(load_system(system), use_tables=use_tables)
    engine = engine_profile("torch")
    out = []
    for row in results["rows"]:
        model = model_with_layers(row["model"], row["layers"])
        if row["phase"] == "prefill":
            shape = StepShape(prefill=((row["seq"], 0),) * row["batch"])
            label = f"prefill b{row['batch']} s{row['seq']}"
        else:
            shape = StepShape(decode_batch=row["batch"], decode_kv_len=row["kv_len"])
            label = f"decode b{row['batch']} kv{row['kv_len']}"
        parallel = Parallel(tp=row.get("tp", 1), ep=row.get("ep", 1))
        if parallel.tp > 1:
            label += f" tp{parallel.tp} ep{parallel.ep}"
        ops = step_ops(model, parallel, shape)
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
            )
        )
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--system", default="h200_sxm")
    ap.add_argument("--roofline-only", action="store_true", help="ignore perf tables (roofline for every op)")
    args = ap.parse_args()
    results = json.loads(Path(args.results).read_text())
    rows = compare(results, args.system, use_tables=not args.roofline_only)
    print("| model | case | measured ms | predicted ms (band) | error | op sources |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['case']} | {r['measured_ms']:.3f} | {r['predicted_ms']:.3f} "
            f"({r['low_ms']:.3f}-{r['high_ms']:.3f}) | {r['error_pct']:+.1f} % | {r['sources']} |"
        )
    errs = [abs(r["error_pct"]) for r in rows]
    inside = sum(r["low_ms"] <= r["measured_ms"] <= r["high_ms"] for r in rows)
    print(
        f"\nmedian |error| {statistics.median(errs):.1f} %, max {max(errs):.1f} %, "
        f"{inside}/{len(rows)} measurements inside the predicted band"
    )


if __name__ == "__main__":
    main()
