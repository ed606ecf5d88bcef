"""vLLM's fused-MoE Triton kernel on bf16 experts, on the CPU: which config vLLM picks (its tuned table for
the device, else its default rule), the keys the entry plans, the kernel's arguments for unquantised weights
(torch and triton needed, no GPU: the kernel itself is compiled and timed only on the device, by
scripts/device_vllm/collect_moe.sh), and the path from the device's rows to the shipped table
(scripts/device_vllm/ingest_moe.sh on a copy of the repository, with made-up rows)."""

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from servelab.collect.engines import catalogue
from servelab.collect.engines import vllm as vllm_entries
from servelab.collect.engines.vllm_moe_config import QUANT, config_file_name, pick_config
from servelab.perfdb.keys import Moe
from servelab.perfdb.merge import _rows_of
from servelab.perfdb.table_files import read_table
from servelab.predict.graph import StepShape, step_ops
from servelab.specs import Parallel, load_model

REPO = Path(__file__).resolve().parents[2]
H100 = "NVIDIA_H100_80GB_HBM3"
TABLE = "src/servelab/perfdb/data/h100_sxm/vllm/0.25.0"
CAMPAIGN = "campaigns/h100_sxm_vllm_0.25.0_bf16moe"


# ---- the config vLLM picks ---------------------------------------------------------------------------------
def test_file_names_follow_vllms_rule_for_each_dtype():
    assert config_file_name(128, 384, H100, QUANT["bf16"]) == f"E=128,N=384,device_name={H100}.json"
    assert (
        config_file_name(256, 256, "NVIDIA_H200_NVL", QUANT["fp8_block"])
        == "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"
    )


def default_rule(m, e, n, k, topk, dtype, block):
    """Stands for the wheel's get_default_config: its arguments, returned so the test sees them."""
    return {"BLOCK_SIZE_M": 16 if m <= 32 else 64, "args": [m, e, n, k, topk, dtype, block]}


def test_bf16_takes_the_tuned_table_of_the_device_at_the_nearest_batch(tmp_path):
    table = {"triton_version": "3.6.0", "1": {"BLOCK_SIZE_M": 16}, "64": {"BLOCK_SIZE_M": 32}}
    (tmp_path / f"E=128,N=384,device_name={H100}.json").write_text(json.dumps(table))
    # an FP8 table of the same shape is not the bf16 one
    (tmp_path / f"E=128,N=768,device_name={H100},dtype=fp8_w8a8,block_shape=[128,128].json").write_text(
        json.dumps({"1": {"BLOCK_SIZE_M": 128}})
    )
    shape = {"experts": 128, "hidden": 4096, "topk": 8}
    config, name = pick_config(tmp_path, default_rule, H100, QUANT["bf16"], tokens=48, n=384, **shape)
    assert config == {"BLOCK_SIZE_M": 32} and name == f"E=128,N=384,device_name={H100}.json"
    config, _ = pick_config(tmp_path, default_rule, H100, QUANT["bf16"], tokens=20, n=384, **shape)
    assert config == {"BLOCK_SIZE_M": 16}
    # no bf16 table for N=768 on this device: the default rule, asked with dtype None and no block
    config, name = pick_config(tmp_path, default_rule, H100, QUANT["bf16"], tokens=48, n=768, **shape)
    assert name == "default" and config["args"] == [48, 128, 768, 4096, 8, None, None]
    # the FP8 table is found for FP8 keys
    config, name = pick_config(tmp_path, default_rule, H100, QUANT["fp8_block"], tokens=48, n=768, **shape)
    assert config == {"BLOCK_SIZE_M": 128} and "dtype=fp8_w8a8" in name


# ---- the keys --------------------------------------------------------------------------------------------
def test_the_bf16_plan_holds_qwen3s_experts_at_every_tp_with_dense_decode_batches():
    entry = catalogue("vllm").entry("fused_moe_bf16")
    planned = entry.plan()
    shapes = {(k.hidden, k.inter, k.experts, k.topk, k.ep, k.dtype, k.distribution) for k in planned}
    assert shapes == {
        (2048, 768, 128, 8, 1, "bf16", "uniform"),  # Qwen3-30B-A3B, TP1
        *((4096, 1536 // tp, 128, 8, 1, "bf16", "uniform") for tp in (1, 2, 4, 8)),  # Qwen3-235B-A22B
    }
    tokens = sorted({k.tokens for k in planned})
    assert tokens == list(vllm_entries.BF16_MOE_TOKENS) and tokens[:5] == [1, 2, 4, 8, 16]
    assert len(planned) == len(shapes) * len(tokens) == 65
    # the keys are the predictor's own: what a decode step of Qwen3-30B-A3B asks for
    model = load_model("qwen3-30b-a3b")
    asked = {
        op.key for op in step_ops(model, Parallel(tp=1), StepShape(decode_batch=16)) if op.key.op == "moe"
    }
    assert asked == {Moe(16, 2048, 768, 128, 8, 1, "bf16")} and asked <= set(planned)
    assert entry.files[:2] == vllm_entries.FUSED_MOE_FILES[:2]  # the FP8 entry's sources, bf16's tables


# ---- the kernel's arguments --------------------------------------------------------------------------------
class RecordedLaunches:
    """Stands for the compiled fused_moe_kernel: keeps each launch's grid and arguments."""

    def __init__(self):
        self.launches: list = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((grid, args, kwargs))


def test_a_bf16_launch_passes_no_scales_no_block_and_no_swap():
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'servelab[collect]')")
    pytest.importorskip("triton", reason="triton is not installed")
    from servelab.collect.engines import vllm_fused_moe as fm  # noqa: PLC0415 - needs torch and triton

    kernel = RecordedLaunches()
    parts = SimpleNamespace(
        kernel=kernel, swap_ab=lambda m, n: True, args={"naive_block_assignment", "SWAP_AB"}
    )  # a wheel whose swap rule says yes: vLLM asks it for FP8 only
    m, hidden, n, experts, topk = 2, 256, 128, 16, 2
    ids = torch.arange(m * topk, dtype=torch.int32)
    config = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 256, "GROUP_SIZE_M": 1}
    route = (None, ids, torch.tensor([ids.numel() * 16], dtype=torch.int32))
    w = torch.zeros(experts, 2 * n, hidden, dtype=torch.bfloat16)
    a = torch.zeros(m, hidden, dtype=torch.bfloat16)
    c = torch.zeros(m, topk, 2 * n, dtype=torch.bfloat16)
    run, path = fm.launcher(parts, QUANT["bf16"], a, None, w, None, c, route, None, topk, False, config)
    run()
    grid, args, kw = kernel.launches[-1]
    assert path == "naive" and grid == (m * topk * 16 // 16 * (2 * n // 64),)
    assert args[0] is a and args[1] is w and args[2] is c
    assert args[3] is None and args[4] is None and args[5] is None  # no bias, no activation or weight scales
    assert args[10:14] == (2 * n, hidden, m * topk * 16, m * topk)  # N, K, EM, tokens x topk
    assert args[21:] == (0,) * 9  # scale and bias strides, and group_n / group_k: no quantisation block
    assert kw["use_fp8_w8a8"] is False and kw["SWAP_AB"] is False and kw["naive_block_assignment"] is True
    assert kw["BLOCK_SIZE_K"] == 256 and kw["compute_type"] is not None  # the config's K tile, not capped

    # the same launch for block-FP8 carries the scales, the 128 x 128 block, the swap and the capped K tile
    a8, a8s = fm.quantize_groups(a.float().add(1).to(torch.bfloat16))
    w8s = torch.ones(experts, 2 * n // 128, hidden // 128)
    run, path = fm.launcher(parts, QUANT["fp8_block"], a8, a8s, w, w8s, c, route, None, topk, False, config)
    run()
    _, args, kw = kernel.launches[-1]
    assert args[4] is a8s and args[5] is w8s and args[28:] == (128, 128)
    assert kw["use_fp8_w8a8"] is True and kw["SWAP_AB"] is True and kw["BLOCK_SIZE_K"] == 128
    assert path == "naive,swap_ab"


# ---- the rows into the shipped table ----------------------------------------------------------------------
def made_up_us(key: Moe) -> float:
    """Not a measurement: a floor plus a slope, so the test can find each row in the table again."""
    return 20.0 + 0.5 * key.tokens + key.inter / 100


def synthetic_campaign(root: Path, keys: list[Moe]) -> Path:
    """A campaign directory in the collector's format (rows as runtime.bench returns them, the provenance
    of the vLLM 0.25.0 campaign with this entry's name), packed as collect_moe.sh packs it."""
    out = root / CAMPAIGN / "vllm"
    (out / "rows").mkdir(parents=True)
    entry = catalogue("vllm").entry("fused_moe_bf16")
    rows = []
    for k in keys:
        us = made_up_us(k)
        rows.append(
            {**k._asdict(), "op": k.op.value, "source": "measured", "latency_us": us, "p10_us": us * 0.99,
             "p90_us": us * 1.01, "reps": 100, "inner": 8, "timing": "graph",
             "backend": "vllm fused_moe_kernel (Triton, bf16)", "config_file": "default",
             "config": {"BLOCK_SIZE_M": 16}, "path": "aligned", "routing": "uniform",
             "kernel_entry": entry.name, "engine_version": "0.25.0", "stand_ins": entry.stand_ins}
        )  # fmt: skip
    (out / "rows" / "moe.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    prov = json.loads((REPO / "campaigns/h100_sxm_vllm_0.25.0/vllm/provenance.json").read_text())
    prov["command"] = f"servelab collect --engine vllm --kernels fused_moe_bf16 --out {CAMPAIGN}"
    prov["engine"]["entries"] = {entry.name: {"kernel": entry.kernel}}
    (out / "provenance.json").write_text(json.dumps(prov))
    archive = root / "bf16moe.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(root / CAMPAIGN, arcname=CAMPAIGN)
    shutil.rmtree(root / "campaigns")
    return archive


@pytest.mark.slow
def test_the_ingest_puts_the_rows_in_vllms_table_and_names_the_campaign_for_generated_py(tmp_path):
    repo = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "src", repo / "src", ignore=ignore)
    (repo / "scripts/device_vllm").mkdir(parents=True)
    for f in ("scripts/generated.py", "scripts/device_vllm/ingest_moe.sh"):
        shutil.copy(REPO / f, repo / f)
    # the repository as it was before the H100's bf16 rows were ingested: generated.py without the campaign
    manifest = repo / "scripts/generated.py"
    manifest.write_text(manifest.read_text().replace(f'        "{CAMPAIGN}/vllm",\n', ""))
    for c in ("campaigns/h100_sxm_vllm_0.25.0/vllm", "campaigns/h100_sxm_vllm_0.25.0_elementwise/vllm"):
        shutil.copytree(REPO / c, repo / c)
    before = read_table(repo / TABLE / "moe.parquet")
    keys = [k for k in vllm_entries.fused_moe_bf16_plan() if k.hidden == 2048]
    archive = synthetic_campaign(tmp_path / "device", keys)

    def ingest():
        return subprocess.run(
            ["bash", "scripts/device_vllm/ingest_moe.sh", str(archive), sys.executable],
            cwd=repo, capture_output=True, text=True, check=False,
        )  # fmt: skip

    done = ingest()
    assert done.returncode == 0, done.stderr[-2000:]
    # the table: the FP8 rows as they were, and every bf16 row at its made-up time
    after = read_table(repo / TABLE / "moe.parquet")
    old = [r for r in _rows_of(before, 0) if r["dtype"] != "bf16"]  # the shipped table has the real ones
    new = [r for r in _rows_of(after, 0)]
    assert [r for r in new if r["dtype"] != "bf16"] == old
    bf16 = {r["tokens"]: r for r in new if r["dtype"] == "bf16"}
    assert sorted(bf16) == sorted(k.tokens for k in keys)
    assert all(r["latency_us"] == pytest.approx(made_up_us(k)) for k in keys for r in [bf16[k.tokens]])
    assert any(CAMPAIGN in p["source"] for p in after.meta["provenance"])  # provenance of each campaign
    # generated.py rebuilds it from the same campaigns; the query answers from the rows
    assert (repo / "scripts/generated.py").read_text().count(f'"{CAMPAIGN}/vllm"') == 1
    assert "measured" in done.stdout and f"{made_up_us(keys[4]):.2f} us" in done.stdout
    assert (repo / "src/servelab/perfdb/data/ratios/vllm.json").is_file()
    # a second ingest of the same campaign is refused in one line
    again = ingest()
    assert again.returncode == 2 and "already there" in again.stderr and again.stderr.count("\n") == 1
