"""accuracy/gemm_vs_aic.py and accuracy/aic_gemm_whatif.py: the twin's GEMM prices against a table in
AIConfigurator's layout (<system>/gemm/<engine>/<version>/gemm_perf.parquet: gemm_dtype, m, n, k, latency in
milliseconds)."""

import pandas as pd
import pytest

from servelab.perfdb.db import PerfDB
from servelab.perfdb.keys import Gemm
from servelab.specs import load_system
from tests.accuracy_python import ACCURACY, run_accuracy_python

SCRIPT = str(ACCURACY / "gemm_vs_aic.py")
WHATIF = str(ACCURACY / "aic_gemm_whatif.py")


def line_of(out: str, label: str, dtype: str) -> list[str]:
    line = next(x for x in out.splitlines() if x.startswith(label) and x[26:].startswith(dtype))
    return line[26:].split()


@pytest.mark.slow  # an accuracy-script process that prices 60 keys
def test_fp8_rows_timed_at_twice_the_twins_price_read_as_half(tmp_path):
    # B200 vLLM rows: the FP8 ones took twice what the twin prices them at, the bf16 ones exactly its price;
    # the report must read 0.50 and 1.00 in every band (its ms -> us, dtypes and path read right)
    db = PerfDB(load_system("b200_sxm"), backend="vllm")
    rows = []
    for m in (1, 16, 64, 512, 4096):
        for n, k in ((8192, 1024), (7168, 8192), (1024, 16384)):
            rows.append(("fp8", m, n, k, 2 * db.query(Gemm(m, n, k, "fp8")).us / 1e3))
            rows.append(("bfloat16", m, n, k, db.query(Gemm(m, n, k, "bf16")).us / 1e3))
    rows.append(("fp8", 16, 32, 8192, 1.0))  # a corner of the table's grid, no model's projection: left out
    folder = tmp_path / "b200_sxm" / "gemm" / "vllm" / "0.24.0"
    folder.mkdir(parents=True)
    pd.DataFrame(rows, columns=["gemm_dtype", "m", "n", "k", "latency"]).to_parquet(
        folder / "gemm_perf.parquet"
    )
    out = run_accuracy_python([SCRIPT, str(folder / "gemm_perf.parquet")])
    fp8 = line_of(out, "b200_sxm vllm 0.24.0", "fp8")
    bf16 = line_of(out, "b200_sxm vllm 0.24.0", "bf16")
    assert fp8[1] == "0.50" and fp8[3] == "0.50" and fp8[5] == "0.50"
    assert bf16[1] == "1.00" and bf16[3] == "1.00" and bf16[5] == "1.00"
    # weight streaming at 1-64 tokens, in TB/s of the B200's 7.7: below the roofline's own rate
    assert fp8[8] == "of" and fp8[9] == "7.7" and 0 < float(fp8[7]) < 7.7
    assert "roofline" in fp8[10:]  # no B200 table answers vLLM's FP8 GEMMs: the twin says so


@pytest.mark.slow  # two accuracy-script processes
def test_a_file_outside_aiconfigurators_layout_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "gemm_perf.parquet"
    pd.DataFrame({"m": [1]}).to_parquet(path)
    err = run_accuracy_python([SCRIPT, str(path)], returncode=2)
    assert err.startswith(f"error: {path}: expected AIConfigurator's layout") and err.count("\n") == 1
    # the what-if reads its table the same way, before pricing anything
    err = run_accuracy_python([WHATIF, str(path), "--part", "dev"], returncode=2)
    assert err.startswith(f"error: {path}: expected AIConfigurator's layout") and err.count("\n") == 1


def test_a_table_without_aiconfigurators_columns_is_one_line_and_exit_2(tmp_path):
    folder = tmp_path / "b200_sxm" / "gemm" / "vllm" / "0.24.0"
    folder.mkdir(parents=True)
    pd.DataFrame({"m": [1]}).to_parquet(folder / "gemm_perf.parquet")
    err = run_accuracy_python([SCRIPT, str(folder / "gemm_perf.parquet")], returncode=2)
    assert err.startswith(f"error: {folder / 'gemm_perf.parquet'}: not AIConfigurator's gemm_perf table")
    assert err.count("\n") == 1
