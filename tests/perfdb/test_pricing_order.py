"""The pricing order of an engine backend (perfdb/db.py): its kernel and own tables by release, then torch
rows times a fitted torch-to-engine ratio, then rows carried from another system, then the roofline; the
fits behind the ratio and the transfer (perfdb/fitting.py); and the share of a prediction's kernel time by
source, with the warning when the roofline alone prices more than a fifth of it."""

import json
import math

import pytest
import synth
from typer.testing import CliRunner

from servelab.cli.main import app
from servelab.engines import KERNEL_CHOICES, Engine
from servelab.engines.kernels import KernelChoice
from servelab.engines.version import Version, version_of_image
from servelab.errors import ServelabError
from servelab.perfdb import db as db_mod
from servelab.perfdb import keys
from servelab.perfdb import tables as tables_mod
from servelab.perfdb.db import PerfDB
from servelab.perfdb.fitting import fit_all, fit_ratios, fit_transfers
from servelab.perfdb.merge import merge
from servelab.perfdb.ratios import fit_family, read_ratios
from servelab.perfdb.roofline import Roofline
from servelab.perfdb.transfer import DEFAULT_BAND, TransferFile, TransferFit
from servelab.predict.provenance import roofline_warning, time_shares
from servelab.specs import load_system

ENGINE_NK = [(4096, 4096), (8192, 4096)]  # the engine was timed on two of the torch tables' five shapes
TORCH_ONLY = keys.Gemm(64, 4096, 14336)
RATIO = 0.8


def _merge(root, system: str, backend: str, version: str, rows: list[dict], gpu: str = synth.GPU) -> None:
    camp = synth.write_campaign(
        root / "campaigns" / f"{system}-{backend}-{version}", rows, synth.provenance(gpu=gpu)
    )
    merge([camp], root / "tables" / system / backend / version)


def _scaled(rows: list[dict], factor: float) -> list[dict]:
    return [{**r, **{k: r[k] * factor for k in ("latency_us", "p10_us", "p90_us")}} for r in rows]


@pytest.fixture()
def root(tmp_path, monkeypatch, request):
    """Torch GEMM rows on the H200; vLLM 0.25 GEMM rows on two shapes, 0.8x torch's; vLLM 0.12 rows 2x."""
    _merge(tmp_path, "h200_sxm", "torch", "2.11", synth.gemm_rows())
    _merge(tmp_path, "h200_sxm", "vllm", "0.25.0", _scaled(synth.gemm_rows(nks=ENGINE_NK), RATIO))
    _merge(tmp_path, "h200_sxm", "vllm", "0.12.0", _scaled(synth.gemm_rows(nks=ENGINE_NK[:1]), 2.0))
    monkeypatch.setenv(tables_mod.ENV_PATH, str(tmp_path / "tables"))
    monkeypatch.setitem(KERNEL_CHOICES, Engine.VLLM, ())
    PerfDB.clear_shared()
    request.addfinalizer(PerfDB.clear_shared)
    return tmp_path


def _use_fits(root, monkeypatch) -> None:
    fit_all(root / "fits")
    monkeypatch.setattr(
        db_mod, "read_ratios", lambda backend, _: read_ratios(backend, root / "fits" / "ratios")
    )


def test_versions_order_as_releases_and_come_from_image_tags():
    assert (
        Version("0.9")
        < Version("0.12.0")
        < Version("0.25.0rc1")
        < Version("0.25.0")
        < Version("0.25.0.post1")
    )
    assert Version("v0.25") == Version("0.25.0")
    assert version_of_image("vllm/vllm-openai:v0.25.0") == Version("0.25.0")
    assert version_of_image("nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc2") == Version("1.2.0rc2")
    assert version_of_image("lmsysorg/sglang:latest") is None
    assert version_of_image("localhost:5000/vllm") is None


def test_a_kernel_choice_is_by_key_dtype_gpu_and_release():
    choice = KernelChoice(
        table="k", op="moe", dtypes=frozenset({"fp8_block"}), why="test", multiple_of=(("inter", 128),),
        since="0.12.0", until="0.20.0", compute_capabilities=frozenset({90}),
    )  # fmt: skip
    moe = keys.Moe(16, 4096, 768, 128, 8, 1, "fp8_block")
    assert choice.runs(moe, Version("0.12.0"), 90)
    assert not choice.runs(moe, Version("0.11.0"), 90) and not choice.runs(moe, Version("0.20.0"), 90)
    assert not choice.runs(moe, Version("0.13"), 100)  # another GPU runs another kernel
    assert not choice.runs(moe._replace(inter=192), Version("0.13"), 90)
    assert not choice.runs(moe._replace(dtype="bf16"), Version("0.13"), 90)
    assert not choice.runs(moe, None, 90)  # the newest release no longer runs it (until 0.20)


def test_the_ratio_is_the_median_of_pairs_and_its_band_the_leave_one_out_error():
    torch = [10.0, 20.0, 40.0, 80.0, 160.0, 320.0]
    assert fit_family([1.0] * 4, [1.0] * 4) is None  # too few pairs
    ratio, lo, hi = fit_family([0.8 * t for t in torch], torch)
    assert ratio == pytest.approx(0.8) and lo == pytest.approx(0.0, abs=1e-12) and hi == pytest.approx(0.0)
    noisy = [t * f for t, f in zip(torch, (0.7, 0.8, 0.9, 0.8, 0.75, 0.85), strict=True)]
    ratio, lo, hi = fit_family(noisy, torch)
    assert 0.7 < ratio < 0.9 and lo < 0 < hi


def test_an_engine_prices_what_its_tables_lack_from_torch_times_its_ratio(root, monkeypatch, h200):
    fits = fit_ratios(Engine.VLLM, [h200])
    fam = fits.find("vllm", "gemm")
    assert fam is not None and fam.ratio == pytest.approx(RATIO) and fam.rows == 2 * len(synth.GEMM_M)
    _use_fits(root, monkeypatch)
    db = PerfDB(h200, backend="vllm")
    own = db.query(keys.Gemm(64, 4096, 4096))
    assert own.source == "measured" and "vllm/0.25.0" in own.note
    got = db.query(TORCH_ONLY)
    torch = PerfDB(h200, backend="torch").query(TORCH_ONLY)
    assert got.source == "calibrated" and got.us == pytest.approx(RATIO * torch.us)
    assert "vllm/torch ratio of gemm" in got.note
    # without a fitted ratio the engine's own table lends another shape's utilisation, as before ratios
    monkeypatch.setattr(db_mod, "read_ratios", lambda backend, _: None)
    borrowed = PerfDB(h200, backend="vllm").query(TORCH_ONLY)
    assert borrowed.source == "interpolated" and "utilisation borrowed from" in borrowed.note


def test_an_engine_release_reads_its_own_tables_and_older_ones(root, h200):
    old = PerfDB(h200, backend="vllm", version="0.12.0").query(keys.Gemm(64, 4096, 4096))
    assert "vllm/0.12.0" in old.note and old.us == pytest.approx(2.0 * synth.gemm_us(64, 4096, 4096))
    new = PerfDB(h200, backend="vllm").query(keys.Gemm(64, 4096, 4096))
    assert "vllm/0.25.0" in new.note and new.us == pytest.approx(RATIO * synth.gemm_us(64, 4096, 4096))
    # an engine's release does not filter torch's tables (they are versioned by torch)
    assert PerfDB(h200, backend="vllm", version="0.1").roofline is not None


def test_a_system_without_tables_takes_another_systems_rows_over_their_rooflines(root, h200):
    # efficiencies of the target's own (B200 otherwise borrows the H200's fit), which a transfer must not use
    b200 = load_system("b200_sxm").model_copy(update={"efficiencies": {"memory": 0.5, "kernel_us": 9.0}})
    key = keys.Gemm(4096, 4096, 4096)
    here = PerfDB(h200).query(key)
    got = PerfDB(b200).query(key)
    # the datasheets' ratio: both rooflines with the H200's fitted efficiencies, not B200's own
    h200_roof = Roofline(h200)
    ratio = Roofline(b200, efficiencies_of=h200_roof.eff).latency(key).us / h200_roof.latency(key).us
    assert ratio != pytest.approx(Roofline(b200).latency(key).us / h200_roof.latency(key).us)
    assert got.source == "transferred" and "transferred from h200_sxm" in got.note
    assert got.us == pytest.approx(here.us * ratio)
    lo, hi = DEFAULT_BAND
    assert got.low_us == pytest.approx(here.low_us * ratio * (1 + lo))
    assert got.high_us == pytest.approx(here.high_us * ratio * (1 + hi))
    # what no system's table answers stays the roofline's
    moe = keys.Moe(16, 4096, 768, 128, 8, 1, "fp4")
    assert PerfDB(b200).query(moe).source == "roofline"


def test_the_transfer_efficiency_is_fitted_where_two_systems_measured_the_same_keys(root, monkeypatch, h200):
    h100 = load_system("h100_sxm")
    rows = []
    for r in synth.gemm_rows(nks=ENGINE_NK):
        key = keys.Gemm(r["m"], r["n"], r["k"])
        # the datasheets' ratio (both rooflines with the H200's efficiencies), and 10 % more
        h200_roof = Roofline(h200)
        factor = (
            1.1 * Roofline(h100, efficiencies_of=h200_roof.eff).latency(key).us / h200_roof.latency(key).us
        )
        rows += _scaled([r], factor)
    _merge(root, "h100_sxm", "torch", "2.11", rows, gpu="NVIDIA H100 80GB HBM3")
    PerfDB.clear_shared()
    fits = fit_transfers(["torch"], [h200, h100])
    there = fits.find("h200_sxm", "h100_sxm", "torch", "gemm")
    assert there is not None and there.efficiency == pytest.approx(1.1) and there.rows == len(rows)
    back = fits.find("h100_sxm", "h200_sxm", "torch", "gemm")
    # the way back prices both with the H100's efficiencies, whose ratio differs from the H200's a little
    assert back is not None and back.efficiency == pytest.approx(1 / 1.1, rel=0.1)
    # a fitted efficiency is applied, with its own band
    fit = TransferFit(
        source="h200_sxm",
        target="b200_sxm",
        backend="torch",
        family="gemm",
        efficiency=1.1,
        lo=-0.05,
        hi=0.1,
        rows=9,
    )
    monkeypatch.setattr(db_mod, "read_transfer", lambda _: TransferFile(provenance="test", fits=[fit]))
    b200 = load_system("b200_sxm")
    key = keys.Gemm(4096, 4096, 4096)
    got = PerfDB(b200).query(key)
    ratio = (
        Roofline(b200, efficiencies_of=Roofline(h200).eff).latency(key).us / Roofline(h200).latency(key).us
    )
    assert (
        got.us == pytest.approx(PerfDB(h200).query(key).us * ratio * 1.1) and "fitted on 9 keys" in got.note
    )


def test_fit_all_writes_ratio_and_transfer_files(root, h200):
    report = fit_all(root / "fits")
    saved = json.loads((root / "fits" / "ratios" / "vllm.json").read_text())
    assert saved["kernels"]["vllm"]["gemm"]["ratio"] == pytest.approx(RATIO)
    assert report["ratios"]["vllm"]["vllm"]["gemm"]["rows"] == 2 * len(synth.GEMM_M)
    assert not (root / "fits" / "ratios" / "sglang.json").exists()  # no SGLang tables: no ratio
    assert json.loads((root / "fits" / "transfer.json").read_text())["fits"] == []


def test_kernel_time_shares_add_up_and_warn_past_a_fifth_of_roofline():
    shares = time_shares({"roofline": 30.0, "measured": 60.0, "transferred": 10.0})
    assert list(shares) == ["measured", "transferred", "roofline"]
    assert math.isclose(sum(shares.values()), 1.0) and shares["roofline"] == pytest.approx(0.3)
    assert roofline_warning(shares) is not None and "30 %" in roofline_warning(shares)
    assert roofline_warning(time_shares({"roofline": 20.0, "measured": 80.0})) is None
    assert time_shares({}) == {}


@pytest.mark.slow  # 1.0 s of CPU a case: plans priced again, some in processes
def test_estimate_plan_and_report_say_what_the_kernel_time_rests_on(tmp_path):
    """SGLang has no table of its own and no fitted ratio here: its DeepSeek-R1 kernels are the roofline's,
    which every answer says, with the warning."""
    runner = CliRunner()
    args = ["deepseek-ai/DeepSeek-R1", "--system", "h200_sxm", "--tp", "8", "--ep", "8", "--batch", "8"]
    text = runner.invoke(app, ["estimate", *args, "--isl", "1024", "--osl", "64", "--backend", "sglang"])
    assert text.exit_code == 0, text.output
    assert (
        "kernel time by source: roofline 100.0 %" in text.output
        and "warning: 100 % of the kernel" in text.output
    )
    data = json.loads(runner.invoke(app, ["estimate", *args, "--backend", "torch", "--json"]).stdout)
    shares = data["provenance"]["kernel_time_by_source"]
    assert math.isclose(sum(shares.values()), 1.0, abs_tol=1e-3) and shares.get("roofline", 0) < 0.2
    plan = tmp_path / "plan.json"
    out = runner.invoke(
        app,
        ["plan", "deepseek-ai/DeepSeek-R1", "--gpus", "8", "--backend", "sglang", "--mode", "agg", "--json"],
    )
    plan.write_text(out.stdout)
    best = json.loads(out.stdout)["candidates"][0]["kernel_time_by_source"]
    assert best == {"roofline": 1.0}
    page = tmp_path / "r.html"
    assert runner.invoke(app, ["report", "--predicted", str(plan), "-o", str(page)]).exit_code == 0
    assert "predicted kernel time by source: roofline 100.0 %" in page.read_text()


def test_merge_takes_only_the_ops_named(tmp_path):
    camp = synth.write_campaign(tmp_path / "c", synth.gemm_rows() + synth.dsv4_rows())
    report = merge([camp], tmp_path / "t" / "h200_sxm" / "torch" / "2.11", ops={"gemm"})
    assert set(report["tables"]) == {"gemm"} and report["tables"]["gemm"]["rows"] == len(synth.gemm_rows())
    with pytest.raises(ServelabError, match="unknown op 'gem'"):
        merge([camp], tmp_path / "t2" / "h200_sxm" / "torch" / "2.11", ops={"gem"})
