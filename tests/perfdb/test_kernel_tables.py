"""Kernel tables: vLLM prices block-FP8 MoE from its DeepGEMM table where vLLM 0.12 runs DeepGEMM (N and K
multiples of 128) and the table holds the shape, and from its Triton fused-MoE table everywhere else; MXFP4
MoE (gpt-oss) from its Marlin table."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.engines.vllm.kernels import DEEPGEMM_MOE, MARLIN_MXFP4_MOE
from servelab.perfdb import keys
from servelab.perfdb import tables as tables_mod
from servelab.perfdb.db import PerfDB
from servelab.perfdb.merge import merge
from servelab.perfdb.roofline import Roofline
from servelab.perfdb.table_files import read_meta
from servelab.perfdb.tables import data_root, load_tables
from servelab.specs import load_system

REPO = Path(__file__).resolve().parents[2]
CONVERTER = REPO / "scripts" / "vllm_moe_campaign.py"
TOKENS = (1, 4, 16, 64)
BASE = {"experts": 128, "topk": 8, "hidden": 4096}
STAGES = ("permute", "gate_up", "act_quant", "down", "unpermute", "moe", "moe_graph")
COMMIT = "594953acce41793ae00a1233eb516044d604bcb6"
# gpt-oss-120b's experts, and the Marlin script's stages (the expert compute first)
GPT_OSS = {"experts": 128, "topk": 4, "hidden": 2880}
MARLIN_STAGES = ("gate_up_graph", "act_graph", "down_graph", "pad_graph", "routing_graph", "align_graph")
MARLIN_STAGES += ("sum_graph", "moe_graph", "moe_host", "gate_up", "moe")


def triton_us(tokens: int) -> float:
    """A made-up Triton time per layer (both GEMMs together): small at decode."""
    return 20.0 + 5.0 * tokens


def deepgemm_us(tokens: int, stage: str) -> float:
    """Made-up DeepGEMM stage times: a large floor (the padded M_sum rows), each stage distinct."""
    return 300.0 + tokens + 10.0 * STAGES.index(stage)


def write_env(path: Path) -> Path:
    path.write_text(
        "name, driver_version, clocks.max.sm [MHz]\nNVIDIA H200, 580.159.04, 1980 MHz\n"
        "torch 2.11.0+cu130 triton 3.6.0 cuda 13.0\n"
    )
    return path


def write_triton_csv(path: Path) -> Path:
    """Triton rows at TP1, TP2 and TP8 widths of a Qwen3-235B-like shape (1536, 768, 192)."""
    fields = ["vllm", "model", "tp", *BASE, "inter", "tokens", "gemm", "latency_us", "p10_us", "p90_us"]
    fields += ["config_file", "config", "path", "check_rel_err"]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fields)
        w.writeheader()
        for tp in (1, 2, 8):
            for t in TOKENS:
                for gemm in ("gate_up", "down"):
                    us = triton_us(t) / 2
                    w.writerow(
                        dict(vllm="0.12.0", model="qwen3-235b", tp=tp, **BASE, inter=1536 // tp, tokens=t,
                             gemm=gemm, latency_us=us, p10_us=0.98 * us, p90_us=1.03 * us,
                             config_file="default", config="{}", path="aligned", check_rel_err="")
                    )  # fmt: skip
    return path


def triton_ep_us(tokens: int) -> float:
    """A made-up Triton time of rank 0 under EP8 (whole experts, an eighth of them): unlike triton_us."""
    return 11.0 + 3.0 * tokens


def write_triton_ep_csv(path: Path) -> Path:
    """Triton rows at TP8 EP8 (16 of 128 experts each rank, the full 1536 width), as scripts/
    time_vllm_fused_moe.py --ep 8 writes them: experts is the global count, local_experts the rank's."""
    fields = ["vllm", "model", "tp", "ep", "experts", "local_experts", "topk", "hidden", "inter", "tokens"]
    fields += ["gemm", "latency_us", "p10_us", "p90_us", "config_file", "config", "path", "check_rel_err"]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fields)
        w.writeheader()
        for t in TOKENS:
            for gemm in ("gate_up", "down"):
                us = triton_ep_us(t) / 2
                w.writerow(
                    dict(vllm="0.12.0", model="qwen3-235b", tp=8, ep=8, experts=128, local_experts=16, topk=8,
                         hidden=4096, inter=1536, tokens=t, gemm=gemm, latency_us=us, p10_us=0.98 * us,
                         p90_us=1.03 * us, config_file="default", config="{}", path="aligned",
                         check_rel_err="0.0017" if t == 4 else "")
                )  # fmt: skip
    return path


def marlin_us(tokens: int, stage: str) -> float:
    """Made-up Marlin stage times, each stage distinct."""
    return 40.0 + 2.0 * tokens + 3.0 * MARLIN_STAGES.index(stage)


def write_marlin_csv(path: Path, drop_stage: str | None = None) -> Path:
    """Marlin MXFP4 rows at gpt-oss-120b's TP2 width (1440), as scripts/time_vllm_marlin_moe.py writes
    them."""
    fields = ["vllm", "tp", "ep", *GPT_OSS, "inter", "inter_padded", "tokens", "stage", "latency_us"]
    fields += ["p10_us", "p90_us", "check_rel_err", "hidden_padded", "block_size_m", "sorted_len"]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fields)
        w.writeheader()
        for t in TOKENS:
            for stage in MARLIN_STAGES:
                if stage == drop_stage:
                    continue
                us = marlin_us(t, stage)
                w.writerow(
                    dict(vllm="0.12.0", tp=2, ep=1, **GPT_OSS, inter=1440, inter_padded=1536, tokens=t,
                         stage=stage, latency_us=us, p10_us=0.99 * us, p90_us=1.02 * us,
                         check_rel_err="0.0040" if t == 4 and stage == "moe" else "", hidden_padded=3072,
                         block_size_m=8, sorted_len=64)
                )  # fmt: skip
    return path


def write_deepgemm_csv(path: Path, drop_stage: str | None = None) -> Path:
    """DeepGEMM rows at the TP2 width only (768), as scripts/time_vllm_deepgemm_moe.py writes them."""
    fields = ["vllm", "tp", *BASE, "inter", "tokens", "m_sum", "stage", "latency_us", "p10_us", "p90_us"]
    fields += ["check_rel_err"]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fields)
        w.writeheader()
        for t in TOKENS:
            for stage in STAGES:
                if stage == drop_stage:
                    continue
                us = deepgemm_us(t, stage)
                w.writerow(
                    dict(vllm="0.12.0", tp=2, **BASE, inter=768, tokens=t, m_sum=16384, stage=stage,
                         latency_us=us, p10_us=0.99 * us, p90_us=1.02 * us,
                         check_rel_err="0.0254" if t == 4 and stage.startswith("moe") else "")
                )  # fmt: skip
    return path


def convert(csv_path: Path, env: Path, out: Path, *extra: str | Path) -> subprocess.CompletedProcess:
    """The converter on csv_path; Path arguments in extra are further CSVs, the rest its options."""
    more = [str(p) for p in extra if isinstance(p, Path)]
    extra = tuple(str(e) for e in extra if not isinstance(e, Path))
    return subprocess.run(
        [sys.executable, str(CONVERTER), "--csv", str(csv_path), *more, "--env", str(env),
         "--vllm-version", "0.12.0", "--date", "2026-12-01", "--command", "python3 ...", "--out", str(out),
         *extra],
        capture_output=True, text=True,
    )  # fmt: skip


@pytest.fixture()
def kernel_root(tmp_path, monkeypatch, request) -> Path:
    """A search-path root with a vLLM Triton MoE table, a vLLM DeepGEMM MoE table and a vLLM Marlin MXFP4 MoE
    table, each made from device output by the converter and `merge`."""
    env = write_env(tmp_path / "env.txt")
    root = tmp_path / "root" / "h200_sxm"
    assert convert(write_triton_csv(tmp_path / "triton.csv"), env, tmp_path / "c_triton").returncode == 0
    # the EP rows come from a second device CSV, converted with the first into one campaign
    done = convert(
        tmp_path / "triton.csv", env, tmp_path / "c_triton_ep", write_triton_ep_csv(tmp_path / "ep.csv")
    )
    assert done.returncode == 0, done.stderr
    merge([tmp_path / "c_triton_ep"], root / "vllm" / "9.0")
    done = convert(
        write_deepgemm_csv(tmp_path / "dg.csv"), env, tmp_path / "c_dg", "--kernel", "deepgemm",
        "--deepgemm-commit", COMMIT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    merge([tmp_path / "c_dg"], root / "vllm-deepgemm" / "9.0")
    done = convert(
        write_marlin_csv(tmp_path / "marlin.csv"), env, tmp_path / "c_marlin", "--kernel", "marlin"
    )
    assert done.returncode == 0, done.stderr
    merge([tmp_path / "c_marlin"], root / "vllm-marlin" / "9.0")
    monkeypatch.setenv(tables_mod.ENV_PATH, str(tmp_path / "root"))
    PerfDB.clear_shared()
    request.addfinalizer(PerfDB.clear_shared)
    return root


def moe(tokens: int, inter: int, dtype: str = "fp8_block") -> keys.Moe:
    return keys.Moe(tokens, BASE["hidden"], inter, BASE["experts"], BASE["topk"], 1, dtype, "uniform")


def test_ep_rows_are_keyed_by_ep_with_all_experts_and_the_ranks_width(kernel_root, tmp_path):
    rows = [
        json.loads(line)
        for line in (tmp_path / "c_triton_ep" / "rows" / "moe.jsonl").read_text().splitlines()
    ]
    ep_rows = [r for r in rows if r["ep"] > 1]
    assert len(rows) == 4 * len(TOKENS) and len(ep_rows) == len(TOKENS)
    for r in ep_rows:
        assert (r["ep"], r["experts"], r["inter"], r["local_experts"], r["tp"]) == (8, 128, 1536, 16, 8)
        assert r["latency_us"] == pytest.approx(triton_ep_us(r["tokens"]))
    # rows of a CSV without the ep column are ep=1 and carry no local expert count
    assert all(r["ep"] == 1 and "local_experts" not in r for r in rows if r not in ep_rows)
    prov = json.loads((tmp_path / "c_triton_ep" / "provenance.json").read_text())
    assert "expert map" in prov["expert_parallel"]
    assert "expert_parallel" not in json.loads((tmp_path / "c_triton" / "provenance.json").read_text())


def test_vllm_prices_tep_experts_from_the_ep_rows_never_from_the_same_width_at_ep1(kernel_root, h200):
    db = PerfDB(h200, backend="vllm")
    for t in TOKENS:
        # EP8 at 1536 wide: DeepGEMM would run the width, but its table lacks the split; the Triton EP rows
        tep = db.query(keys.Moe(t, 4096, 1536, 128, 8, 8, "fp8_block", "uniform"))
        assert tep.source == "measured" and "vllm/9.0 moe table" in tep.note
        assert tep.us == pytest.approx(triton_ep_us(t))
        # TP1 (ep=1) has the same width and expert count: its own rows, not the EP ones
        assert db.query(moe(t, 1536)).us == pytest.approx(triton_us(t))
    # an ep the table lacks (EP4 at 1536 would be TP4 EP4) is not borrowed from EP8's rows
    ep4 = db.query(keys.Moe(16, 4096, 1536, 128, 8, 4, "fp8_block", "uniform"))
    assert ep4.us != pytest.approx(triton_ep_us(16)) and "vllm/9.0 moe table" not in ep4.note


def test_deepgemm_rows_are_the_graph_replayed_whole_path_with_the_stages_alongside(kernel_root, tmp_path):
    meta = read_meta(kernel_root / "vllm-deepgemm" / "9.0" / "moe.parquet")
    prov = meta["provenance"][0]
    assert prov["deepgemm_commit"] == COMMIT and prov["vllm"] == "0.12.0"
    assert "DeepGemmExperts" in prov["kernel"]
    rows = [json.loads(line) for line in (tmp_path / "c_dg" / "rows" / "moe.jsonl").read_text().splitlines()]
    assert [r["tokens"] for r in rows] == list(TOKENS)
    for r in rows:
        assert r["latency_us"] == pytest.approx(deepgemm_us(r["tokens"], "moe_graph"))
        assert r["gate_up_us"] == pytest.approx(deepgemm_us(r["tokens"], "gate_up"))
        assert r["m_sum"] == 16384 and r["inter"] == 768 and r["dtype"] == "fp8_block"
    assert rows[1]["check_rel_err"] == "0.0254"


def test_vllm_prices_deepgemm_where_it_runs_and_the_triton_kernel_elsewhere(kernel_root, h200):
    db = PerfDB(h200, backend="vllm")
    for t in TOKENS:
        # TP2 width 768, a multiple of 128: DeepGEMM's rows, though the Triton table holds the shape too
        dg = db.query(moe(t, 768))
        assert dg.source == "measured" and "vllm-deepgemm/9.0 moe table" in dg.note
        assert dg.us == pytest.approx(deepgemm_us(t, "moe_graph"))
        # TP8 width 192, not a multiple of 128: vLLM falls back to Triton, and so does the price
        tr = db.query(moe(t, 192))
        assert tr.source == "measured" and "vllm/9.0 moe table" in tr.note
        assert tr.us == pytest.approx(triton_us(t))
    # between collected token counts: interpolated from DeepGEMM's rows (by the table's reference curve, so
    # near their values, far from the Triton kernel's)
    mid = db.query(moe(8, 768))
    assert mid.source == "interpolated" and "vllm-deepgemm" in mid.note
    assert 0.9 * deepgemm_us(4, "moe_graph") < mid.us < 1.1 * deepgemm_us(16, "moe_graph")
    # a width DeepGEMM runs but its table lacks (TP1's 1536): the Triton rows, not another shape's borrowed
    wide = db.query(moe(16, 1536))
    assert wide.source == "measured" and wide.us == pytest.approx(triton_us(16))
    # an expert dtype DeepGEMM does not run and neither table has: not a kernel table's answer (the torch
    # rows times the engine's fitted ratio where the tables have them, else the roofline)
    # (fp16: bf16 at this shape, Qwen3-235B's at TP2, is measured on the H100 since, and transferred here)
    fp16 = db.query(moe(16, 768, "fp16"))
    assert fp16.source in ("calibrated", "roofline") and "vllm-deepgemm" not in fp16.note


def gpt_oss_moe(tokens: int, inter: int = 1440) -> keys.Moe:
    return keys.Moe(
        tokens, GPT_OSS["hidden"], inter, GPT_OSS["experts"], GPT_OSS["topk"], 1, "mxfp4", "uniform"
    )


def test_marlin_rows_are_the_expert_compute_with_the_rest_of_the_path_alongside(kernel_root, tmp_path):
    prov = read_meta(kernel_root / "vllm-marlin" / "9.0" / "moe.parquet")["provenance"][0]
    assert "fused_marlin_moe" in prov["kernel"] and "dtype" not in prov
    rows = [
        json.loads(line) for line in (tmp_path / "c_marlin" / "rows" / "moe.jsonl").read_text().splitlines()
    ]
    assert [r["tokens"] for r in rows] == list(TOKENS)
    for r in rows:
        expert = [marlin_us(r["tokens"], s) for s in ("gate_up_graph", "act_graph", "down_graph")]
        assert r["latency_us"] == pytest.approx(sum(expert))
        assert r["p90_us"] == pytest.approx(1.02 * sum(expert))
        assert r["moe_graph_us"] == pytest.approx(marlin_us(r["tokens"], "moe_graph"))
        assert (r["dtype"], r["inter"], r["inter_padded"], r["hidden_padded"]) == ("mxfp4", 1440, 1536, 3072)
    assert rows[1]["check_rel_err"] == "0.0040"


def test_vllm_prices_mxfp4_moe_from_marlin_and_other_dtypes_elsewhere(kernel_root, h200):
    db = PerfDB(h200, backend="vllm")
    for t in TOKENS:
        got = db.query(gpt_oss_moe(t))
        assert got.source == "measured" and "vllm-marlin/9.0 moe table" in got.note
        assert got.us == pytest.approx(
            sum(marlin_us(t, s) for s in ("gate_up_graph", "act_graph", "down_graph"))
        )
    # block-FP8 keys still go to DeepGEMM, whatever the Marlin table holds
    assert "vllm-deepgemm/9.0" in db.query(moe(4, 768)).note
    # a width the Marlin table lacks (TP8's 360): not the TP2 rows borrowed (another system's rows of that
    # very shape, carried over, or the roofline)
    tp8 = db.query(gpt_oss_moe(16, 360))
    assert tp8.source in ("transferred", "roofline") and "vllm-marlin/9.0" not in tp8.note
    # the torch backend never reads an engine's kernel tables
    torch_price = PerfDB(h200, backend="torch").query(gpt_oss_moe(16))
    assert "vllm-marlin" not in torch_price.note and torch_price.source != "measured"


def test_the_marlin_rule_is_mxfp4_experts():
    assert MARLIN_MXFP4_MOE.runs(gpt_oss_moe(1)) and MARLIN_MXFP4_MOE.runs(gpt_oss_moe(8192, 360))
    assert not MARLIN_MXFP4_MOE.runs(moe(1, 768))  # block-FP8: DeepGEMM's or Triton's
    assert not MARLIN_MXFP4_MOE.runs(
        keys.Moe(1, 7168, 2048, 256, 8, 1, "fp4", "uniform")
    )  # DeepSeek-V4's FP4
    assert not MARLIN_MXFP4_MOE.runs(keys.Gemm(512, 2880, 2880))


def test_the_converter_refuses_marlin_output_missing_a_stage(tmp_path):
    env = write_env(tmp_path / "env.txt")
    broken = convert(
        write_marlin_csv(tmp_path / "m.csv", drop_stage="act_graph"),
        env,
        tmp_path / "c",
        "--kernel",
        "marlin",
    )
    assert broken.returncode != 0 and "lacks stage(s) act_graph" in broken.stderr


def test_tables_the_caller_names_are_used_alone(kernel_root, h200):
    named = load_tables(kernel_root / "vllm" / "9.0", h200)
    got = PerfDB(h200, tables=named, backend="vllm").query(moe(16, 768))
    assert got.source == "measured" and got.us == pytest.approx(triton_us(16))


def test_the_deepgemm_rule_is_block_fp8_with_both_widths_multiples_of_128():
    assert DEEPGEMM_MOE.runs(moe(1, 768)) and DEEPGEMM_MOE.runs(moe(8192, 384))
    assert not DEEPGEMM_MOE.runs(moe(1, 192))  # Qwen3-235B at TP8
    assert not DEEPGEMM_MOE.runs(moe(1, 768, "fp8"))  # per-tensor FP8: not DeepGEMM's block scales
    assert not DEEPGEMM_MOE.runs(keys.Moe(1, 2880, 768, 128, 8, 1, "fp8_block", "uniform"))
    assert not DEEPGEMM_MOE.runs(keys.Gemm(512, 4096, 4096))


def test_the_converter_refuses_deepgemm_output_missing_a_stage_or_the_commit(tmp_path):
    env = write_env(tmp_path / "env.txt")
    broken = convert(
        write_deepgemm_csv(tmp_path / "dg.csv", drop_stage="moe_graph"), env, tmp_path / "c", "--kernel",
        "deepgemm", "--deepgemm-commit", COMMIT,
    )  # fmt: skip
    assert broken.returncode != 0 and "lacks stage(s) moe_graph" in broken.stderr
    no_commit = convert(write_deepgemm_csv(tmp_path / "d2.csv"), env, tmp_path / "c2", "--kernel", "deepgemm")
    assert no_commit.returncode != 0 and "--deepgemm-commit" in no_commit.stderr


def test_shipped_deepgemm_table_covers_qwen3_235b_at_tp2_and_tp4_and_is_slower_at_decode(h200):
    """The shipped DeepGEMM rows were timed (p10 <= median <= p90); at decode they cost more than the Triton
    kernel's, since vLLM's DeepGEMM path computes at least experts x 128 padded rows whatever the tokens."""
    data = load_tables(data_root() / "h200_sxm" / "vllm-deepgemm" / "0.12.0", h200, strict=True).index("moe")
    assert data is not None
    assert data.data.meta["provenance"][0]["deepgemm_commit"] == COMMIT
    triton = load_tables(data_root() / "h200_sxm" / "vllm" / "0.12.0", h200, strict=True)
    for i in range(len(data.data)):
        assert data.data.p10_us[i] <= data.data.latency_us[i] <= data.data.p90_us[i]
    for inter in (768, 384):
        dg = PerfDB(h200, backend="vllm").query(moe(4, inter))
        assert dg.source == "measured" and "vllm-deepgemm/0.12.0" in dg.note
        tr = triton.lookup(moe(4, inter))
        assert tr is not None and tr.source == "measured" and dg.us > tr.us
    # with expert parallelism (TP2 EP2, TP4 EP4: experts 1536 wide) the Triton table has no rows; these do
    for ep in (2, 4):
        key = keys.Moe(16, 4096, 1536, 128, 8, ep, "fp8_block", "uniform")
        assert triton.lookup(key).source == "roofline"
        assert PerfDB(h200, backend="vllm").query(key).source == "measured"


def test_shipped_marlin_table_covers_gpt_oss_120b_at_every_tp_and_costs_past_the_roofline_at_prefill(h200):
    """The shipped Marlin rows were timed (p10 <= median <= p90) for gpt-oss-120b's expert widths at TP 1, 2,
    4 and 8 (2880 / TP), and vLLM prices gpt-oss's MoE from them; at prefill sizes the kernel runs more than
    twice the roofline's time (docs/accuracy.md section 2), which is what the table corrects."""
    root = data_root() / "h200_sxm" / "vllm-marlin" / "0.24.0"
    data = load_tables(root, h200, strict=True).index("moe")
    assert data is not None
    for i in range(len(data.data)):
        assert data.data.p10_us[i] <= data.data.latency_us[i] <= data.data.p90_us[i]
    roofline = Roofline(h200, backend="vllm")
    for tp in (1, 2, 4, 8):
        key = gpt_oss_moe(8192, 2880 // tp)
        got = PerfDB(h200, backend="vllm").query(key)
        assert got.source == "measured" and "vllm-marlin/0.24.0" in got.note
        assert got.us > 2 * roofline.latency(key).us


def test_vllm_prices_bf16_linears_from_torchs_rows_and_bandwidth_bound_ops_from_its_rms_norm(h200):
    """The shipped tables: vLLM's bf16 linear layers are torch's cuBLAS (TORCH_LINEAR), so torch's rows answer
    them on a system that has them and carry them to one that has none; its bandwidth-bound ops are priced
    from its own RMSNorm rows (H100), carried to H200 and B200 by the rooflines."""
    router = keys.Gemm(8, 256, 4096, "bf16")  # DeepSeek-V4-Flash's MoE router at an 8-token step
    vllm, torch = PerfDB(h200, backend="vllm").query(router), PerfDB(h200, backend="torch").query(router)
    assert vllm == torch and vllm.source in ("measured", "interpolated") and "h200_sxm/torch/" in vllm.note
    b200 = load_system("b200_sxm")
    carried = PerfDB(b200, backend="vllm").query(router)
    assert carried.source == "transferred" and "from h200_sxm" in carried.note
    norm = keys.Memory(8 * 4096 * 4)  # an RMSNorm of 8 tokens of DeepSeek-V4-Flash's width
    h100 = PerfDB(load_system("h100_sxm"), backend="vllm").query(norm)
    assert h100.source == "measured" and "h100_sxm/vllm/0.25.0" in h100.note
    for system in (h200, b200):
        got = PerfDB(system, backend="vllm").query(norm)
        assert got.source == "transferred" and "transferred from h100_sxm" in got.note
    # fp8 linears keep their own kernels' rows: CUTLASS block-FP8 on Hopper
    block = PerfDB(load_system("h100_sxm"), backend="vllm").query(keys.Gemm(64, 4096, 1024, "fp8_block"))
    assert "vllm-cutlass" in block.note


LAYOUT_PROBE = """
import json
import moe_ep as ep
print(json.dumps({
    "shapes": [ep.rank_shape(*a) for a in ((256, 1536, 8, 8), (256, 1536, 8, 2), (256, 1536, 8, 1),
                                            (256, 1536, 4, 8), (96, 1536, 8, 8), (100, 1536, 8, 8))],
    "map": ep.expert_map(16, 4),
    "map2": ep.expert_map(16, 4, rank=2),
    "grid": list(ep.rank_grid({"m": (256, 8, 3072, 1536)}, ["m"], [4, 8], [2, 8])),
}))
"""


def test_the_timing_script_lays_out_tep_ranks_as_vllm_does():
    # scripts/moe_ep.py as the timing script finds it: a sibling module on a python path holding scripts/
    done = subprocess.run(
        [sys.executable, "-c", LAYOUT_PROBE],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "scripts")},
        timeout=60,
        check=True,
    )
    *said, answer = done.stdout.strip().splitlines()
    got = json.loads(answer)
    # MiniMax-M2.5 (256 experts, 1536 wide) at TP8: EP8 holds 32 whole experts, EP2 128 experts split 4 ways;
    # ep larger than tp is not TEP; the experts must split evenly
    assert got["shapes"] == [[32, 1536], [128, 384], [256, 192], None, [12, 1536], None]
    # the linear placement: rank 0 holds the first experts / ep, every other expert maps to -1
    assert got["map"][:4] == [0, 1, 2, 3] and set(got["map"][4:]) == {-1}
    assert got["map2"][8:12] == [0, 1, 2, 3] and got["map2"].count(-1) == 12
    assert got["grid"] == [["m", 4, 2, 128, 768], ["m", 8, 2, 128, 384], ["m", 8, 8, 32, 1536]]
    assert said == ["skipped m tp4 ep8: ep must divide tp, the experts and the width"]


def test_shipped_tep_rows_price_minimax_tep8_past_the_roofline_on_h100_and_carried_to_h200(h200):
    """The shipped H100 rows of vLLM 0.12.0's fused-MoE kernel under expert parallelism (rank 0 of TEP) were
    timed (p10 <= median <= p90) and keep all experts with ep > 1; MiniMax-M2.5's TEP8 experts at an 8K
    prefill cost about 3x the roofline there, and the H200, which has no such rows, carries them over
    instead of falling to its roofline."""
    h100 = load_system("h100_sxm")
    data = load_tables(data_root() / "h100_sxm" / "vllm" / "0.12.0", h100, strict=True).index("moe")
    assert data is not None
    assert "expert map" in data.data.meta["provenance"][0]["expert_parallel"]
    for i in range(len(data.data)):
        assert data.data.p10_us[i] <= data.data.latency_us[i] <= data.data.p90_us[i]
    tep8 = keys.Moe(8192, 3072, 1536, 256, 8, 8, "fp8_block", "uniform")
    got = PerfDB(h100, backend="vllm").query(tep8)
    assert got.source == "measured" and "h100_sxm/vllm/0.12.0" in got.note
    assert got.us > 2.5 * Roofline(h100, backend="vllm").latency(tep8).us
    carried = PerfDB(h200, backend="vllm").query(tep8)
    assert carried.source == "transferred" and "from h100_sxm" in carried.note
    assert carried.us > 2.5 * Roofline(h200, backend="vllm").latency(tep8).us
