"""The fraction of HBM peak at which the engines' INT4 weight-only MoE kernels read the experts' weights at
decode sizes, fitted to AIConfigurator's measured tables of Kimi-K2.5's experts at TP8
(tests/data/aiconfigurator/int4_moe), beside the fraction the twin prices with
(perfdb/roofline.py INT4_EXPERTS_HBM_FRACTION).

    PYTHONPATH=src python accuracy/int4_moe_vs_aic.py [--csv FILE]

Per table (system, engine, release, kernel): its balanced-routing rows of 1 to 32 tokens, where AIConfigurator
routes each token to 8 experts no other token picks (helper.py balanced_logits), so 8 x tokens experts are
read; least squares of latency = floor + weight bytes / (fraction x HBM peak), weight bytes = experts read x
3 x 7168 x 256 x 0.5625 (INT4 with a bf16 scale per 32 values). The floor holds everything that does not
grow with the experts read: routing, alignment, launches, the top-k sum.
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from servelab.errors import ServelabError
from servelab.perfdb.roofline import INT4_EXPERTS_HBM_FRACTION
from servelab.specs import load_system
from servelab.specs.dtypes import Dtype

CSV = Path(__file__).resolve().parents[1] / "tests/data/aiconfigurator/int4_moe/kimi_k2_5_tp8.csv"
HIDDEN, INTER_PER_RANK, TOPK = 7168, 2048 // 8, 8
COLUMNS = ("system", "framework", "version", "kernel_source", "distribution", "num_tokens", "latency")
MAX_TOKENS = 32  # 8 x 32 = 256 of the 384 experts: each token's experts are its own
EXPERT_BYTES = 3 * HIDDEN * INTER_PER_RANK * Dtype.int4.bytes


def fit(rows: pd.DataFrame, peak_bytes_per_s: float) -> tuple[float, float]:
    """(floor us, fraction of HBM peak) of one table's balanced rows."""
    latency_us = rows.groupby("num_tokens").latency.median() * 1e3
    weight_bytes = np.array([TOPK * t * EXPERT_BYTES for t in latency_us.index], dtype=float)
    design = np.vstack([np.ones_like(weight_bytes), weight_bytes]).T
    (floor, us_per_byte), *_ = np.linalg.lstsq(design, latency_us.to_numpy(), rcond=None)
    return float(floor), 1e6 / us_per_byte / peak_bytes_per_s


def fits(table: pd.DataFrame) -> list[dict]:
    rows = table[(table.distribution == "balanced") & (table.num_tokens <= MAX_TOKENS)]
    out = []
    for (system, framework, version, kernel), group in rows.groupby(
        ["system", "framework", "version", "kernel_source"]
    ):
        peak = load_system(system).hbm_bw_tbs * 1e12
        floor, fraction = fit(group, peak)
        out.append(
            {
                "system": system,
                "engine": framework.lower(),
                "version": version,
                "kernel": kernel,
                "points": group.num_tokens.nunique(),
                "floor_us": floor,
                "fraction": fraction,
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--csv", type=Path, default=CSV, help="rows in the pinned file's layout")
    args = ap.parse_args(argv)
    try:
        table = pd.read_csv(args.csv)
        missing = [c for c in COLUMNS if c not in table.columns]
        if missing:
            raise ValueError(f"no column {', '.join(missing)}")
        found = fits(table)
    except (OSError, ValueError, KeyError, ServelabError, pd.errors.ParserError) as e:
        print(f"error: --csv {args.csv}: expected AIConfigurator moe_perf rows ({e})", file=sys.stderr)
        return 2
    print(
        f"{'system':9s} {'engine':7s} {'release':28s} {'floor us':>8s} {'fraction':>8s} {'twin':>5s}  kernel"
    )
    for f in found:
        twin = INT4_EXPERTS_HBM_FRACTION.get(f["system"])
        print(
            f"{f['system']:9s} {f['engine']:7s} {f['version']:28s} {f['floor_us']:8.1f} {f['fraction']:8.3f}"
            f" {twin if twin else '-':>5}  {f['kernel']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
