"""accuracy/h100_decode_efficiency.py: the H100's roofline against a GEMM table in AIConfigurator's layout
(gemm_dtype, m, n, k, latency in milliseconds), by dtype and weight size, with each candidate set of
efficiencies."""

import math

import pandas as pd

from servelab.perfdb.efficiencies import efficiencies
from servelab.perfdb.keys import Gemm
from servelab.perfdb.roofline import Roofline
from servelab.specs import load_system
from tests.accuracy_python import ACCURACY, run_accuracy_python

SCRIPT = str(ACCURACY / "h100_decode_efficiency.py")


def cells(out: str, label: str) -> list[str]:
    """The signed medians of one row of the report, one per candidate."""
    line = next(x for x in out.splitlines() if x.startswith(label))
    return [c for c in line[len(label) :].split() if c[0] in "+-"]


def test_rows_timed_at_the_h100_defaults_read_as_no_error_in_the_defaults_column(tmp_path):
    # a table whose large bf16 decode GEMMs took exactly what the default roofline says, and whose FP8 ones
    # took twice that: the defaults column must read 0 and log(1/2) (its ms -> us and dtypes read right)
    roof = Roofline(load_system("h100_sxm"), efficiencies_of=efficiencies(""))
    rows = []
    for m in (1, 16, 64):
        for n, k in ((25600, 5120), (5120, 25600), (16384, 8192)):
            rows.append(("bfloat16", m, n, k, roof.latency(Gemm(m, n, k)).us / 1e3))
            rows.append(("fp8", m, n, k, 2 * roof.latency(Gemm(m, n, k, "fp8")).us / 1e3))
    rows.append(("bfloat16", 512, 5120, 5120, 1.0))  # a prefill row: not a decode size, left out
    folder = tmp_path / "sglang" / "0.5.9"
    folder.mkdir(parents=True)
    pd.DataFrame(rows, columns=["gemm_dtype", "m", "n", "k", "latency"]).to_parquet(
        folder / "gemm_perf.parquet"
    )
    out = run_accuracy_python([SCRIPT, "--aic-gemm", str(folder / "gemm_perf.parquet")])
    assert "defaults, 2 us" in out and "h200_sxm's fit" in out
    bf16 = cells(out, "sglang 0.5.9 bf16, 50- MB")
    fp8 = cells(out, "sglang 0.5.9 fp8, 50- MB")
    assert abs(float(bf16[0])) < 1e-3 and abs(float(fp8[0]) - math.log(0.5)) < 1e-3
    # the H200's fit streams faster than the H100's defaults: the roofline reads short of these rows
    assert float(bf16[3]) < 0
    assert "bf16, 10-50 MB" not in out  # no rows of that size: no line
    assert "H100 torch elementwise" in out


def test_a_file_that_is_not_such_a_table_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "gemm_perf.parquet"
    pd.DataFrame({"m": [1]}).to_parquet(path)
    err = run_accuracy_python([SCRIPT, "--aic-gemm", str(path)], returncode=2)
    assert err.startswith(f"error: {path}: not AIConfigurator's gemm_perf table")
    assert err.count("\n") == 1
