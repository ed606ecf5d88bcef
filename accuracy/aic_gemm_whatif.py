"""A what-if, not the twin: accuracy/closed_loop.py with one system's vLLM FP8 and NVFP4 GEMMs priced from an
AIConfigurator gemm_perf.parquet measured on that system (accuracy/gemm_vs_aic.py reads the same files)
instead of what servelab answers (docs/accuracy.md, "Dense decode steps on B200").

    python accuracy/aic_gemm_whatif.py PATH/b200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet \
        --part dev --systems b200_sxm --jobs 1 --out whatif.json

The table's rows are a running median over five neighbouring token counts (m) of one (n, k): single rows
twice their neighbours are in those tables. A key's (n, k) that the table has is read there, interpolated in
m; another (n, k) takes servelab's own price times the measured / roofline ratio of the table's (n, k) of
nearest weight size at the same m. Every other op is servelab's. The kept prices
(SERVELAB_PRICE_CACHE) are turned off here: they are keyed by the source, which this patch does not change.
"""

import math
import os
import runpy
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from bad_input import one_line_on_bad_input  # this folder's rule for bad input
from gemm_vs_aic import read_table  # this folder's reader of AIConfigurator's tables

from servelab.perfdb import db as perfdb
from servelab.perfdb.keys import Gemm
from servelab.perfdb.latency import OpLatency
from servelab.perfdb.price_cache import ENV_SWITCH

DTYPES = ("fp8", "nvfp4")
WINDOW = 5  # rows of neighbouring m in the running median


def smoothed(rows: pd.DataFrame) -> pd.Series:
    """latency_us by (dtype, n, k, m): the median of repeated rows, then a running median over m."""
    s = rows[rows.dtype.isin(DTYPES)].groupby(["dtype", "n", "k", "m"]).latency_us.median()
    return s.groupby(level=[0, 1, 2], group_keys=False).apply(
        lambda one: one.rolling(WINDOW, center=True, min_periods=1).median()
    )


def patch(path: Path) -> None:
    system, engine, rows = read_table(path)
    table = smoothed(rows)
    shapes = {d: sorted({(n, k) for (dt, n, k, _) in table.index if dt == d}) for d in DTYPES}

    def measured(dtype: str, n: int, k: int, m: int) -> float:
        one = table.loc[(dtype, n, k)]
        return float(np.interp(m, one.index.values, one.values))  # beyond the last m: its value

    resolve = perfdb.PerfDB._resolve

    def resolve_from_table(self: perfdb.PerfDB, key) -> OpLatency:
        found = resolve(self, key)
        if self.system.name != system or self.backend != engine or not isinstance(key, Gemm):
            return found
        if key.dtype not in DTYPES or not shapes[key.dtype]:
            return found
        if (key.n, key.k) in shapes[key.dtype]:
            us = measured(key.dtype, key.n, key.k, key.m)
        else:
            n, k = min(shapes[key.dtype], key=lambda s: abs(math.log(s[0] * s[1] / (key.n * key.k))))
            roof = self.roofline.latency(Gemm(key.m, n, k, key.dtype)).us
            us = found.us * measured(key.dtype, n, k, key.m) / roof
        return OpLatency(us, us, us, "measured", f"what-if: {path}")

    perfdb.PerfDB._resolve = resolve_from_table  # type: ignore[method-assign]


def patched(path: Path) -> int:
    patch(path)
    return 0


def main() -> None:
    if len(sys.argv) < 2:
        print(
            "error: expected an AIConfigurator gemm_perf.parquet, then closed_loop.py's options",
            file=sys.stderr,
        )
        sys.exit(2)
    path = Path(sys.argv[1])
    os.environ[ENV_SWITCH] = "0"  # read when prices are kept: the patched answers must not be
    if one_line_on_bad_input(lambda: patched(path)):
        sys.exit(2)
    sys.argv = [str(Path(__file__).with_name("closed_loop.py")), *sys.argv[2:]]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
