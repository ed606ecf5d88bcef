"""Leave-one-family-out errors of a calibration's residual rows (calibrated.residuals.json: each row's
out-of-sample prediction, as written), by engine and by engine and family: median and p90 |predicted /
measured - 1| of TTFT and TPOT.

    python accuracy/residual_errors.py src/servelab/predict/data/calibrated.residuals.json
    python accuracy/residual_errors.py SHIPPED.residuals.json --rows REFIT.residuals.json --vllm VLLM.json

--rows: residual rows that replace the file's rows of the same ids (an engine's refit on its rows alone);
--vllm: vLLM's rows priced at its defaults by the code of now ({row id: [TTFT, TPOT]}, from
accuracy/lofo_proxy.py price ... vllm), where the file's were priced by the code that wrote it.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def rows_of(residuals: Path, replace: list[Path], vllm: Path | None) -> list[dict]:
    rows = {r["id"]: r for r in json.loads(residuals.read_text())["rows"]}
    for path in replace:
        rows.update({r["id"]: r for r in json.loads(path.read_text())["rows"]})
    if vllm is not None:
        priced = json.loads(vllm.read_text())
        rows.update({i: {**rows[i], "pred_ttft_ms": t, "pred_tpot_ms": d} for i, (t, d) in priced.items()})
    return list(rows.values())


def table(rows: list[dict]) -> dict[str, dict]:
    groups: dict[str, list[dict]] = {"all": rows}
    for r in rows:
        groups.setdefault(r["engine"], []).append(r)
        groups.setdefault(f"{r['engine']}/{r['family']}", []).append(r)
    out = {}
    for name in sorted(groups, key=lambda g: (g != "all", g)):
        got = groups[name]
        errors = {
            m: np.array([abs(r[f"pred_{m}_ms"] / r[f"{m}_ms"] - 1) for r in got]) for m in ("ttft", "tpot")
        }
        out[name] = {
            m: {"n": len(got), "median": float(np.median(e)), "p90": float(np.percentile(e, 90))}
            for m, e in errors.items()
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("residuals", type=Path)
    ap.add_argument("--rows", type=Path, action="append", default=[], help="residual rows that replace")
    ap.add_argument("--vllm", type=Path, help="vLLM's rows priced now: {row id: [TTFT, TPOT]}")
    ap.add_argument("--out", type=Path, help="also write the table as JSON here")
    args = ap.parse_args()
    try:
        got = table(rows_of(args.residuals, args.rows, args.vllm))
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as e:
        what = (
            "residual files as `servelab calibrate engines` writes them (rows with id, engine, family, times)"
        )
        print(
            f"error: {e.filename if isinstance(e, OSError) else args.residuals}: expected {what} "
            f"({type(e).__name__}: {e})",
            file=sys.stderr,
        )
        return 2
    print(f"{'rows':20s} {'n':>4s}  TTFT med / p90   TPOT med / p90")
    for name, e in got.items():
        cells = "  ".join(f"{e[m]['median']:6.1%} / {e[m]['p90']:6.1%}" for m in ("ttft", "tpot"))
        print(f"{name:20s} {e['ttft']['n']:4d}  {cells}")
    if args.out:
        args.out.write_text(json.dumps(got, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
