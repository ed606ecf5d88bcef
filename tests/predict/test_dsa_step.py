"""DeepSeek's sparse attention (DSA) in a GLM-5 step, as SGLang 0.5.10 runs it: the indexer scores every
earlier token, the attention reads at most index_topk of them; prefill is dense multi-head attention on
Hopper while the batch fits index_topk, sparse (absorbed, FlashMLA's heads padded) otherwise, and always
sparse for GLM-5 on Blackwell. No table measures these ops: the roofline prices them and says so."""

import pytest

from servelab.perfdb.db import perfdb_for
from servelab.perfdb.keys import DsaDecode, DsaIndexer, DsaPrefill
from servelab.perfdb.roofline import Roofline
from servelab.predict.graph import OpCategory, StepShape, op_category, step_ops
from servelab.specs import Parallel, load_model, load_system

H200, B200 = load_system("h200_sxm"), load_system("b200_sxm")
GLM5 = load_model("zai-org/GLM-5-FP8", hub=False)
TP8 = Parallel(tp=8)
TOPK = 2048


def _prefill(seq: int, heads: int = 8, kv_len: int | None = None, kv: str = "bf16") -> DsaPrefill:
    return DsaPrefill(1, seq, seq if kv_len is None else kv_len, heads, 64, TOPK, 256, 256, kv)


def _us(system, key) -> float:
    return Roofline(system).latency(key).us


def test_decode_attention_reads_only_the_top_k_keys():
    """Past index_topk cached tokens the attention costs the same; the indexer grows with the cache."""
    at_topk, longer = DsaDecode(32, TOPK, 8, 64, TOPK), DsaDecode(32, 4 * TOPK, 8, 64, TOPK)
    assert _us(H200, longer) == pytest.approx(_us(H200, at_topk))
    assert _us(H200, DsaDecode(32, TOPK // 2, 8, 64, TOPK)) < _us(H200, at_topk)
    index = [_us(H200, DsaIndexer(32, 1, n - 1, 32, 128)) for n in (TOPK, 4 * TOPK, 16 * TOPK)]
    assert index[0] < index[1] < index[2]


def test_an_fp8_cache_reads_fewer_bytes_in_decode():
    """Memory-bound decode: FlashMLA's 656-byte FP8 entry against BF16's 1,152 bytes."""
    bf16, fp8 = DsaDecode(256, TOPK, 8, 64, TOPK, "bf16"), DsaDecode(256, TOPK, 8, 64, TOPK, "fp8")
    assert _us(H200, fp8) < _us(H200, bf16)


def test_hopper_prefill_is_dense_within_top_k_and_sparse_beyond():
    """Within index_topk: multi-head attention of 8 heads (qk 256, v 256). Beyond it the sparse kernel runs
    the rank's 8 heads padded to 64, over the absorbed 576 / 512 dims: the step costs several times more
    than the dense quadratic growth alone would give."""
    dense = _us(H200, _prefill(TOPK))
    sparse_same_batch = _us(H200, _prefill(TOPK, kv_len=TOPK + 1))
    assert sparse_same_batch > 5 * dense
    # a rank's 8 heads cost what 64 do in the sparse kernel, not in the dense one
    padded = _us(H200, _prefill(4 * TOPK, heads=64))
    assert _us(H200, _prefill(4 * TOPK, heads=8)) == pytest.approx(padded, rel=0.05)
    assert _us(H200, _prefill(TOPK, heads=8)) < _us(H200, _prefill(TOPK, heads=64)) / 4


def test_glm5_on_blackwell_is_sparse_from_the_first_token():
    """SGLang sets the dense threshold to 0 for GLM-5 on Blackwell: a short prefill costs as the sparse
    kernel does, whatever the batch's longest sequence."""
    assert _us(B200, _prefill(1024, kv_len=1024)) == pytest.approx(_us(B200, _prefill(1024, kv_len=TOPK + 1)))


def test_the_sparse_prefill_caps_each_query_at_top_k_keys():
    """Sparse attention grows linearly past index_topk: twice the tokens, about twice the time."""
    one, two = _us(B200, _prefill(8 * TOPK, kv="fp8")), _us(B200, _prefill(16 * TOPK, kv="fp8"))
    assert two / one == pytest.approx(2.0, rel=0.1)


def _names(ops) -> list[str]:
    return [op.name for op in ops]


def test_a_step_runs_the_indexer_where_sglang_does():
    """Prefill chunks within index_topk only store their indexer keys (no logits); longer ones score every
    earlier token; every decode step scores the whole cache."""
    short = step_ops(GLM5, TP8, StepShape(prefill=((1024, 0),)))
    long = step_ops(GLM5, TP8, StepShape(prefill=((4096, 4096),)))
    decode = step_ops(GLM5, TP8, StepShape(decode_batch=16, decode_kv_len=3000))
    assert "dsa_prefill" in _names(short) and "dsa_indexer" not in _names(short)
    assert "dsa_indexer" in _names(long)
    assert {"dsa_decode", "dsa_indexer", "indexer_q_proj", "indexer_k_proj"} <= set(_names(decode))
    assert {op_category(n) for n in _names(decode) if n.startswith("dsa_")} == {OpCategory.attention}
    # the chunk after 4,096 cached tokens: F(8192) - F(4096), both priced as the batch's longest picks
    counts: dict[tuple[int, int], float] = {}
    for op in long:
        if op.name == "dsa_prefill":
            counts[op.key.seq, op.key.kv_len] = counts.get((op.key.seq, op.key.kv_len), 0) + op.count
    assert counts == {(8192, 8192): 78, (4096, 8192): -78}  # every layer, dense and MoE


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_dsa_ops_are_priced_by_the_roofline_and_say_so(backend):
    """Where tables exist (the H200's vLLM tables), none answers a DSA op: their source is the roofline."""
    db = perfdb_for(H200, backend)
    shape = StepShape(prefill=((4096, 0),), decode_batch=8, decode_kv_len=4096)
    dsa = [op for op in step_ops(GLM5, TP8, shape) if op.name.startswith("dsa_")]
    assert {op.name for op in dsa} == {"dsa_prefill", "dsa_decode", "dsa_indexer"}
    for op in dsa:
        answer = db.query(op.key)
        assert answer.source == "roofline" and answer.us > 0, (op.name, answer)
