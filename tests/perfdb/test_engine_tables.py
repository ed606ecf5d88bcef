"""Engine tables: a backend with tables of its own kernels (the vLLM fused-MoE table) prices those ops from
them and everything else from its roofline, exactly as before; torch's tables stay the system's default."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.engines import KERNEL_CHOICES, Engine
from servelab.perfdb import keys
from servelab.perfdb import tables as tables_mod
from servelab.perfdb.admin import accuracy_report, status_report
from servelab.perfdb.db import PerfDB
from servelab.perfdb.merge import merge
from servelab.perfdb.roofline import Roofline
from servelab.perfdb.table_files import read_meta
from servelab.perfdb.tables import data_root, load_tables

REPO = Path(__file__).resolve().parents[2]
CONVERTER = REPO / "scripts" / "vllm_moe_campaign.py"
SHIPPED = data_root() / "h200_sxm" / "vllm" / "0.12.0"
TOKENS = (1, 2, 4, 8, 16, 32, 64)
# Qwen3-235B-A22B's experts at TP2: 128 experts, top-8, hidden 4096, 1536 / 2 wide
SHAPE = {"experts": 128, "topk": 8, "hidden": 4096, "inter": 768}


def gemm_us(tokens: int, gemm: str) -> float:
    """A made-up kernel time (not the roofline's): a floor plus a slope in the tokens."""
    return (30.0 if gemm == "gate_up" else 18.0) + (9.0 if gemm == "gate_up" else 5.0) * tokens


def write_device_output(directory: Path) -> tuple[Path, Path]:
    """A CSV and env.txt as scripts/time_vllm_fused_moe.py and the device run write them."""
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / "moe_vllm.csv"
    fields = ["vllm", "model", "tp", *SHAPE, "tokens", "gemm", "latency_us", "p10_us", "p90_us"]
    fields += ["config_file", "config", "path", "check_rel_err"]
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fields)
        w.writeheader()
        for version in ("0.12.0", "0.18.0"):  # the converter keeps one version's rows
            for t in TOKENS:
                for gemm in ("gate_up", "down"):
                    us = gemm_us(t, gemm) * (1.0 if version == "0.12.0" else 0.5)
                    w.writerow(
                        dict(vllm=version, model="qwen3-235b", tp=2, **SHAPE, tokens=t, gemm=gemm,
                             latency_us=us, p10_us=0.98 * us, p90_us=1.03 * us, config_file="default",
                             config='{"BLOCK_SIZE_M": 16}', path="aligned", check_rel_err="")
                    )  # fmt: skip
    env = directory / "env.txt"
    env.write_text(
        "name, driver_version, clocks.max.sm [MHz], clocks.current.sm [MHz]\n"
        "NVIDIA H200, 580.159.04, 1980 MHz, 345 MHz\n"
        "torch 2.11.0+cu130 triton 3.6.0 cuda 13.0\n"
    )
    return out, env


@pytest.fixture()
def engine_root(tmp_path, table_dir, monkeypatch, request) -> Path:
    """A search-path root with the synthetic torch tables and a vLLM MoE table made from device output by
    the converter and `merge`; the vLLM table's version sorts above torch's on purpose."""
    csv_path, env = write_device_output(tmp_path / "device")
    campaign = tmp_path / "campaign"
    subprocess.run(
        [sys.executable, str(CONVERTER), "--csv", str(csv_path), "--env", str(env), "--vllm-version",
         "0.12.0", "--date", "2026-12-01", "--command", "python3 time_vllm_fused_moe.py ...", "--out",
         str(campaign)],
        check=True, capture_output=True,
    )  # fmt: skip
    root = tmp_path / "root"
    torch_dir = root / "h200_sxm" / "torch" / "2.11"
    torch_dir.mkdir(parents=True)
    for f in table_dir.glob("*.parquet"):
        (torch_dir / f.name).write_bytes(f.read_bytes())
    merge([campaign], root / "h200_sxm" / "vllm" / "9.0")
    monkeypatch.setenv(tables_mod.ENV_PATH, str(root))
    # the engine's own table alone: the DeepGEMM kernel table beside it is tested in test_kernel_tables.py
    monkeypatch.setitem(KERNEL_CHOICES, Engine.VLLM, ())
    PerfDB.clear_shared()
    request.addfinalizer(PerfDB.clear_shared)
    return root


def moe(tokens: int, dtype: str = "fp8_block") -> keys.Moe:
    return keys.Moe(
        tokens, SHAPE["hidden"], SHAPE["inter"], SHAPE["experts"], SHAPE["topk"], 1, dtype, "uniform"
    )


def test_the_converter_keeps_one_version_and_sums_the_two_gemms(engine_root, h200):
    table = engine_root / "h200_sxm" / "vllm" / "9.0" / "moe.parquet"
    meta = read_meta(table)
    prov = meta["provenance"][0]
    assert prov["vllm"] == "0.12.0" and prov["triton"] == "3.6.0" and prov["driver"] == "580.159.04"
    assert "fused_moe_kernel" in prov["kernel"]
    db = PerfDB(h200, backend="vllm")
    for t in TOKENS:
        hit = db.query(moe(t))
        assert hit.source == "measured"
        assert hit.us == pytest.approx(gemm_us(t, "gate_up") + gemm_us(t, "down"), rel=1e-6)


def test_engine_backend_prices_its_moe_from_its_table_and_the_rest_from_its_roofline(engine_root, h200):
    vllm = PerfDB(h200, backend="vllm")
    roof = Roofline(h200, backend="vllm")
    # between collected token counts: interpolated from the engine's rows, not the roofline
    mid = vllm.query(moe(24))
    assert mid.source == "interpolated" and "vllm/9.0 moe table" in mid.note
    low, high = (gemm_us(t, "gate_up") + gemm_us(t, "down") for t in (16, 32))
    assert low < mid.us < high
    # ops the engine table lacks: the engine's own roofline, the same figure as without any table
    for key in (
        # an expert dtype no table has rows for (bf16 has since h100_sxm/vllm/0.25.0's Qwen3 rows, which
        # H200 borrows by transfer)
        moe(16, "fp16"),
        keys.Gemm(512, 4096, 4096),  # a family the engine directory has no file for
        keys.Comm(1 << 20, 8, keys.OpName.allreduce),  # vLLM's peer all-reduce in the roofline
    ):
        got = vllm.query(key)
        assert got.source == "roofline" and got.us == pytest.approx(roof.latency(key).us)
    # other engines have no tables: their MoE stays on the roofline
    other = PerfDB(h200, backend="sglang").query(moe(16))
    assert other.source == "roofline" and other.us == pytest.approx(roof.latency(moe(16)).us)
    # torch still reads its own tables
    assert PerfDB(h200, backend="torch").query(keys.Gemm(512, 4096, 4096)).source == "measured"


def test_torch_tables_stay_the_default_whatever_an_engine_version_says(engine_root, h200):
    found = tables_mod.table_dirs(h200.name, roots=[engine_root])
    assert [(d.parent.name, d.name) for d in found] == [("torch", "2.11"), ("vllm", "9.0")]
    assert tables_mod.load_default_tables(h200).dir.parent.name == "torch"
    # `db status` and `db accuracy` name the directory each backend reads, the engine's too
    in_use = {e["label"] for e in status_report("h200_sxm") if e["in_use"]}
    assert in_use == {
        "h200_sxm/torch/2.11",
        "h200_sxm/vllm/9.0",
        "h200_sxm/vllm-deepgemm/0.12.0",
        "h200_sxm/vllm-marlin/0.24.0",
    }
    assert {e["label"] for e in accuracy_report("h200_sxm")} == in_use


def test_shipped_vllm_table_holds_measured_decode_rows_no_faster_than_the_weights_they_read(h200):
    """Every shipped row was timed (p10 <= median <= p90) and takes at least the HBM time of the expert
    weights it must read: each token's top-k experts are distinct, so at least top-k experts' FP8 weights
    (3 x hidden x inter bytes each) come from HBM, at the H200's 4.8 TB/s."""
    tables = load_tables(SHIPPED, h200, strict=True)
    data = tables.index("moe").data
    assert len(data) > 100
    prov = data.meta["provenance"][0]
    assert prov["gpu_name"] == "NVIDIA H200" and prov["vllm"] == "0.12.0"
    for i in range(len(data)):
        row = dict(zip(data.family.fields, data.row_key(i), strict=True))
        assert row["dtype"] == "fp8_block" and row["ep"] == 1
        assert data.p10_us[i] <= data.latency_us[i] <= data.p90_us[i]
        least_bytes = row["topk"] * 3 * row["hidden"] * row["inter"]
        assert data.latency_us[i] >= least_bytes / 4.8e12 * 1e6, data.describe_row(i)
    # the Qwen3-235B-A22B-FP8 decode shapes the calibration rows run (TP2, TP4) are measured for vLLM
    for inter in (768, 384):
        key = keys.Moe(16, 4096, inter, 128, 8, 1, "fp8_block", "uniform")
        assert PerfDB(h200, backend="vllm").query(key).source == "measured"
        assert PerfDB(h200, backend="trtllm").query(key).source == "roofline"
