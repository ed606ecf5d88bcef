"""The twin's GEMM prices against AIConfigurator's GEMM tables measured on a GPU: by dtype and token count.

Each table is one of AIConfigurator's gemm_perf.parquet files (ai-dynamo/aiconfigurator, aic-core/src/
aiconfigurator_core/systems/data/<system>/gemm/<engine>/<version>/gemm_perf.parquet: an engine's linear layer
as it runs it, timed by AIConfigurator's collector on that GPU; vLLM's FP8 and NVFP4 rows include the
activation's quantization kernel, collector/vllm/collect_gemm.py). The system, engine and release are read
from the file's path. For each table, dtype and band of token counts (m), this prints the median of the
twin's price (servelab.perfdb.PerfDB.query, the engine's backend, the source it answers from) over the
measured latency, with its p10 and p90, and the weight-streaming rate the measured rows reach at 1-64 tokens.
It writes nothing (docs/accuracy.md, "Dense decode steps on B200").

    python accuracy/gemm_vs_aic.py PATH/b200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet [MORE ...]
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from bad_input import one_line_on_bad_input  # this folder's rule for bad input

from servelab.errors import ServelabError
from servelab.perfdb.db import perfdb_for
from servelab.perfdb.keys import Gemm
from servelab.specs import load_system

AIC_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "nvfp4": "nvfp4"}  # AIConfigurator's gemm_dtype -> servelab's
WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "nvfp4": 0.5 + 1 / 16}  # per weight; NVFP4: an FP8 scale per 16
M_BANDS = ((1, 64), (65, 1024), (1025, 16384))  # decode steps; small prefills; long prefills
# a dense 8B-70B model's rank-local projections at tp 1-8, not the far corners (n or k of 32, or 65,536)
N_K_RANGE = (1024, 16384)
SAMPLE = 400  # rows per cell, drawn at random (fixed seed): the twin prices each one


def read_table(path: Path) -> tuple[str, str, pd.DataFrame]:
    """The file's system and engine (from its path) and its rows in servelab's dtypes, latency in us."""
    parts = path.parts
    if len(parts) < 5 or parts[-4] != "gemm":
        raise ServelabError(
            f"{path}: expected AIConfigurator's layout <system>/gemm/<engine>/<version>/gemm_perf.parquet"
        )
    system, engine = parts[-5], parts[-3]
    try:
        d = pd.read_parquet(path, columns=["gemm_dtype", "m", "n", "k", "latency"])
    except (OSError, ValueError, KeyError) as e:
        reason = next(iter(str(e).splitlines()), type(e).__name__)  # pyarrow's reason runs over several lines
        raise ServelabError(f"{path}: not AIConfigurator's gemm_perf table ({reason})") from None
    d = d[d.gemm_dtype.isin(list(AIC_DTYPES))]
    # AIConfigurator's latency column is milliseconds
    return system, engine, d.assign(dtype=d.gemm_dtype.map(AIC_DTYPES), latency_us=d.latency * 1e3)


def report_table(path: Path) -> list[str]:
    system_name, engine, rows = read_table(path)
    try:
        system = load_system(system_name)
    except ServelabError as e:
        raise ServelabError(f"{path}: system {system_name!r} from the path: {e}") from None
    db = perfdb_for(system, engine)
    low, high = N_K_RANGE
    rows = rows[rows.n.between(low, high) & rows.k.between(low, high)]
    label = f"{system_name} {engine} {path.parent.name}"
    lines = []
    for dtype, of_dtype in rows.groupby("dtype", sort=False):
        cells, sources = [], set()
        for m_low, m_high in M_BANDS:
            band = of_dtype[of_dtype.m.between(m_low, m_high)]
            band = band.sample(min(len(band), SAMPLE), random_state=0)
            ratios = []
            for r in band.itertuples():
                price = db.query(Gemm(int(r.m), int(r.n), int(r.k), str(dtype)))
                ratios.append(price.us / r.latency_us)
                sources.add(price.source)
            cells.append(
                f"{np.median(ratios):5.2f} ({np.percentile(ratios, 10):.2f}-{np.percentile(ratios, 90):.2f})"
                if ratios
                else f"{'-':>16}"
            )
        decode = of_dtype[of_dtype.m <= M_BANDS[0][1]]
        rate = decode.n * decode.k * WEIGHT_BYTES[str(dtype)] / decode.latency_us / 1e6  # TB/s
        streamed = f"{rate.median():.2f} of {system.hbm_bw_tbs}" if len(rate) else "-"
        lines.append(f"{label:<26}{dtype:<7}{'  '.join(cells)}  {streamed:>14}  {', '.join(sorted(sources))}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("tables", type=Path, nargs="+", help="AIConfigurator gemm_perf.parquet files")
    args = ap.parse_args(argv)
    return one_line_on_bad_input(lambda: report(args.tables))


def report(tables: list[Path]) -> int:
    """The report for the files named; a ServelabError for bad input."""
    bands = "".join(f"{f'm {lo}-{hi}':<18}" for lo, hi in M_BANDS)
    print(
        f"the twin's price / measured, median (p10-p90), n and k in {N_K_RANGE[0]}-{N_K_RANGE[1]}; "
        "measured weight streaming at m <= 64, median TB/s"
    )
    print(f"{'table':<26}{'dtype':<7}{bands}{'TB/s':>12}  twin's sources")
    for path in tables:
        for line in report_table(path):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
