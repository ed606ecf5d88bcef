"""Gated DeltaNet linear attention in a Qwen3.5 step, as SGLang 0.5.10 runs it: the linear layers' prefill
costs what the chunk's own tokens cost (the recurrent state carries the past), their decode reads and writes
each sequence's state once whatever the context; the full layers are gated GQA. No table measures the
linear-attention ops: the roofline prices them and says so."""

import pytest
from clirun import servelab

from servelab.perfdb.db import perfdb_for
from servelab.perfdb.keys import GdnDecode, GdnPrefill
from servelab.perfdb.roofline import Roofline
from servelab.predict.graph import OpCategory, StepShape, op_category, step_ops
from servelab.specs import Parallel, load_model, load_system

H200 = load_system("h200_sxm")
QWEN = load_model("Qwen/Qwen3.5-397B-A17B-FP8", hub=False)
TP8 = Parallel(tp=8)
RANK = (2, 8, 128, 128, 4)  # key heads, value heads, key dim, value dim, conv kernel on one of 8 ranks


def _us(key) -> float:
    return Roofline(H200).latency(key).us


def test_decode_reads_and_writes_the_state_once_a_token():
    """Memory-bound: 8 x 128 x 128 float32 a sequence read and written; a bf16 state halves it."""
    fp32, bf16 = GdnDecode(256, *RANK, "fp32"), GdnDecode(256, *RANK, "bf16")
    assert _us(bf16) < 0.6 * _us(fp32)
    assert _us(GdnDecode(512, *RANK)) == pytest.approx(2 * _us(GdnDecode(256, *RANK)), rel=0.05)


def test_prefill_grows_linearly_with_the_chunk():
    """Each further 8,192 tokens cost the same (beyond the launches and the state read once)."""
    t = [_us(GdnPrefill(1, n, *RANK)) for n in (8192, 16384, 24576)]
    assert t[2] - t[1] == pytest.approx(t[1] - t[0], rel=0.01)


def _names(ops) -> list[str]:
    return [op.name for op in ops]


def test_a_step_runs_linear_and_full_layers_where_the_config_puts_them():
    """45 linear layers and 15 gated GQA layers; a chunk after cached tokens is priced by its own tokens in
    the linear layers and by the causal prefix difference in the full ones; decode never reads a KV cache in
    the linear layers."""
    prefill = step_ops(QWEN, TP8, StepShape(prefill=((2048, 4096),)))
    counts: dict[str, float] = {}
    for op in prefill:
        counts[op.name] = counts.get(op.name, 0) + op.count
    assert counts["gdn_prefill"] == 45 and counts["gdn_in_proj"] == 45 and counts["gdn_out_proj"] == 45
    assert counts["attention_prefill"] == 0 and counts["attn_gate"] == 15  # +15 at 6,144 and -15 at 4,096
    assert {op.key.seq for op in prefill if op.name == "gdn_prefill"} == {2048}
    decode = step_ops(QWEN, TP8, StepShape(decode_batch=16, decode_kv_len=3000))
    assert sum(op.count for op in decode if op.name == "gdn_decode") == 45
    assert sum(op.count for op in decode if op.name == "attention_decode") == 15
    assert {op_category(n) for n in _names(decode) if n.startswith("gdn_")} == {
        OpCategory.attention,
        OpCategory.gemm,
        OpCategory.memory,
    }
    # the query projection makes the output gate too: 4 heads x 256 twice, and 1 KV head's K and V
    qkv = next(op.key for op in decode if op.name == "qkv_proj")
    assert qkv.n == 4 * 256 * 2 + 2 * 256


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_gdn_ops_are_priced_by_the_roofline_and_say_so(backend):
    db = perfdb_for(H200, backend)
    shape = StepShape(prefill=((4096, 0),), decode_batch=8, decode_kv_len=4096)
    gdn = [op for op in step_ops(QWEN, TP8, shape) if op.name in ("gdn_prefill", "gdn_decode")]
    assert {op.name for op in gdn} == {"gdn_prefill", "gdn_decode"}
    for op in gdn:
        answer = db.query(op.key)
        assert answer.source == "roofline" and answer.us > 0, (op.name, answer)


def test_estimate_answers_with_roofline_sources():
    r = servelab(
        "estimate", "Qwen/Qwen3.5-397B-A17B-FP8", "-s", "h200_sxm", "--tp", "8", "-b", "8",
        "--isl", "1024", "--osl", "256", "--backend", "sglang", "--breakdown",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "gdn_decode" in r.stdout and "gdn_prefill" in r.stdout and "roofline" in r.stdout


def test_estimate_refuses_a_split_of_the_linear_heads():
    r = servelab(
        "estimate", "qwen3.5-397b-a17b", "-s", "h200_sxm", "--tp", "32", "--isl", "128", "--osl", "8"
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "16 linear-attention key heads" in r.stderr
