"""The H100's roofline against kernels timed on H100s, at decode sizes: which efficiencies price them.

A decode step of a dense model is weight-streaming GEMMs (1-64 tokens against a rank's weights) and small
kernels (norms, activations, rope), so two of the roofline's numbers price most of it: `memory` (the fraction
of the datasheet's 3.35 TB/s a kernel streams at) and `kernel_us` (the launch floor each kernel pays). This
prices the rows of one of AIConfigurator's H100 GEMM tables (ai-dynamo/aiconfigurator 095f58a, aic-core/src/
aiconfigurator_core/systems/data/h100_sxm/gemm/<engine>/<version>/gemm_perf.parquet: the GEMMs SGLang,
vLLM or TensorRT-LLM run, timed on an H100 80GB HBM3) and servelab's own H100 elementwise and bf16 GEMM tables
(perfdb/data/h100_sxm/torch/2.11.0) with each candidate set of efficiencies, and prints the median of
log(roofline / measured), signed and absolute, by dtype and weight size. Writes nothing (docs/accuracy.md,
"Dense decode on H100").

    python accuracy/h100_decode_efficiency.py --aic-gemm PATH/gemm_perf.parquet
"""

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from bad_input import one_line_on_bad_input  # this folder's rule for bad input

from servelab.calibrate.roofline import fit_roofline, load_rows
from servelab.errors import ServelabError
from servelab.perfdb.efficiencies import Efficiencies, efficiencies
from servelab.perfdb.keys import Gemm
from servelab.perfdb.roofline import Roofline
from servelab.perfdb.tables import load_tables, table_dirs
from servelab.specs import SystemSpec, load_system

MAX_DECODE_TOKENS = 64  # the GEMM rows a decode step of up to 64 sequences runs
# weight sizes, MB: a rank's smaller projections of a dense 8B-70B model at tp 1-8, and its larger ones
SIZES_MB = ((10, 50), (50, None))
AIC_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}  # AIConfigurator's gemm_dtype -> servelab's key dtype


def aic_decode_gemms(path: Path) -> pd.DataFrame:
    """The table's bf16 and FP8 rows at 1-64 tokens: m, n, k, dtype (servelab's) and latency_us."""
    try:
        d = pd.read_parquet(path, columns=["gemm_dtype", "m", "n", "k", "latency"])
    except (OSError, ValueError, KeyError) as e:
        # pyarrow's reason runs over several lines (the file's schema): its first one
        reason = next(iter(str(e).splitlines()), type(e).__name__)
        raise ServelabError(f"{path}: not AIConfigurator's gemm_perf table ({reason})") from None
    d = d[d.gemm_dtype.isin(list(AIC_DTYPES)) & (d.m >= 1) & (d.m <= MAX_DECODE_TOKENS)]
    # AIConfigurator's latency column is milliseconds
    return d.assign(dtype=d.gemm_dtype.map(AIC_DTYPES), latency_us=d.latency * 1e3)


def weight_mb(dtype: str, n: int, k: int) -> float:
    return n * k * (1 if dtype == "fp8" else 2) / 1e6


def gemm_sets(aic: pd.DataFrame, name: str) -> dict[str, list[tuple[Gemm, float]]]:
    """The AIConfigurator rows by dtype and weight size: label -> (key, measured us)."""
    out = {}
    for dtype in AIC_DTYPES.values():
        rows = [
            (Gemm(int(r.m), int(r.n), int(r.k), dtype), float(r.latency_us))
            for r in aic[aic.dtype == dtype].itertuples()
        ]
        for low, high in SIZES_MB:
            label = f"{name} {dtype}, {low}-{high or ''} MB"
            out[label] = [
                (key, us) for key, us in rows if low <= weight_mb(dtype, key.n, key.k) < (high or math.inf)
            ]
    return out


def candidates(system: SystemSpec) -> dict[str, Efficiencies]:
    """The efficiencies the H100 prices with now (the defaults), the same with the H200's launch floor, a fit
    on the H100's own tables (`servelab calibrate roofline --system h100_sxm`, not written) and the H200's."""
    default = efficiencies("")
    _, own = fit_roofline(system.name, None, note=lambda _: None)
    return {
        "defaults": default,
        "defaults, 2 us": default.over({"kernel_us": 2.0}),
        "H100 tables' fit": default.over({k: v for k, v in own.items() if not k.startswith("_")}),
        "h200_sxm's fit": efficiencies("h200_sxm"),
    }


def bias_and_error(system: SystemSpec, eff: Efficiencies, rows: list[tuple]) -> str:
    roof = Roofline(system, efficiencies_of=eff)
    logs = np.array([math.log(roof.latency(k).us / us) for k, us in rows])
    return f"{np.median(logs):+.3f} ({np.median(np.abs(logs)):.3f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--aic-gemm", type=Path, required=True, help="one of AIConfigurator's H100 gemm_perf.parquet"
    )
    args = ap.parse_args(argv)
    return one_line_on_bad_input(lambda: report(args))


def report(args: argparse.Namespace) -> int:
    """The report for parsed arguments; a ServelabError for bad input."""
    aic = aic_decode_gemms(args.aic_gemm)
    system = load_system("h100_sxm")
    own = load_tables(table_dirs(system.name, backend="torch")[0], system, strict=True)
    own_gemms = [
        (k, us)
        for k, us in load_rows(own, ("gemm",))["gemm"]
        if k.dtype == "bf16" and k.m <= MAX_DECODE_TOKENS and weight_mb(k.dtype, k.n, k.k) >= SIZES_MB[0][0]
    ]
    sets = {
        **gemm_sets(aic, f"{args.aic_gemm.parent.parent.name} {args.aic_gemm.parent.name}"),
        "H100 torch bf16, 10- MB": own_gemms,
        "H100 torch elementwise": load_rows(own, ("elementwise",))["elementwise"],
    }
    effs = candidates(system)
    print("median log(roofline / measured) at 1-64 tokens, signed (absolute); weights in MB")
    print(f"{'rows':<34}{'n':>6}" + "".join(f"{name:>20}" for name in effs))
    for label, rows in sets.items():
        if rows:
            cells = "".join(f"{bias_and_error(system, eff, rows):>20}" for eff in effs.values())
            print(f"{label:<34}{len(rows):>6}{cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
