import gc
import itertools
import weakref

import pytest

from servelab.errors import ServelabError
from servelab.perfdb.db import PerfDB
from servelab.perfdb.keys import AttentionDecode, Comm, Dsv4Context, Dsv4Generation, Gemm, MlaDecode, Moe
from servelab.predict.engines import engine_profile
from servelab.predict.graph import MTP_PREFIX, OP_CATEGORY, StepShape, step_ops
from servelab.predict.static import estimate_static
from servelab.predict.step import priced_step, step_time
from servelab.specs import Parallel, list_models, load_model, load_system

H200 = load_system("h200_sxm")
FLASH = "sgl-project/DeepSeek-V4-Flash-FP8"


def keys(ops, cls):
    return [op for op in ops if isinstance(op.key, cls)]


def test_dense_gemm_flops_match_the_parameter_count():
    """2 x params x tokens: the GEMMs of a step account for every linear weight of the model."""
    m = load_model("llama-3.1-8b")
    ops = step_ops(m, Parallel(), StepShape(prefill=((512, 0),)))
    flops = sum(
        2 * op.key.m * op.key.n * op.key.k * op.count for op in keys(ops, Gemm) if op.name != "lm_head"
    )
    linear = m.params.total - m.params.embedding - m.params.lm_head - m.params.other
    assert flops == pytest.approx(2 * linear * 512, rel=1e-6)


def test_tp_splits_shapes_and_adds_allreduces():
    m = load_model("qwen3-32b")
    ops = step_ops(m, Parallel(tp=4), StepShape(decode_batch=8, decode_kv_len=1000))
    qkv = next(op for op in ops if op.name == "qkv_proj")
    assert qkv.key.n == (64 // 4 + 2 * 8 // 4) * 128 and qkv.count == 64
    decode = keys(ops, AttentionDecode)[0]
    assert (decode.key.heads, decode.key.kv_heads, decode.key.batch) == (16, 2, 8)
    allreduces = [op for op in keys(ops, Comm) if op.key.op == "allreduce"]
    assert sum(op.count for op in allreduces) == 2 * 64


def test_dsv4_modules_keyed_by_native_and_local_heads():
    """The module keys carry the rank's heads (a kernel that pads them has that in its price); the generic
    sliding-window attention keys carry the 64 heads the engines' DeepSeek-V4 kernel computes."""
    m = load_model(FLASH)
    ops = step_ops(
        m, Parallel(tp=8, ep=8), StepShape(prefill=((4096, 0),), decode_batch=16, decode_kv_len=8192)
    )
    ctx = keys(ops, Dsv4Context)
    gen = keys(ops, Dsv4Generation)
    assert {op.key.op for op in ctx} == {"dsv4_csa_context_module", "dsv4_hca_context_module"}
    assert all(op.key.native_heads == 64 and op.key.heads == 8 for op in ctx + gen)
    assert {op.key.heads for op in ops if op.name in ("swa_prefill", "swa_decode")} == {64}
    assert sum(op.count for op in gen if "csa" in op.key.op) == 21
    # every layer is MoE; the first three route by hash and have no router GEMM
    moe = keys(ops, Moe)
    assert sum(op.count for op in moe) == 43 and {op.key.ep for op in moe} == {8}
    assert sum(op.count for op in ops if op.name == "router") == 40


def test_chunked_prefill_subtracts_the_cached_prefix():
    m = load_model("llama-3.1-8b")
    ops = step_ops(m, Parallel(), StepShape(prefill=((1024, 3072),)))
    attn = [op for op in ops if op.name == "attention_prefill"]
    assert sorted((op.key.seq, op.count) for op in attn) == [(3072, -32), (4096, 32)]
    db = PerfDB(H200, use_tables=False)
    chunk = sum(db.query(op.key).us * op.count for op in attn)
    full = sum(
        db.query(op.key).us * op.count
        for op in step_ops(m, Parallel(), StepShape(prefill=((4096, 0),)))
        if op.name == "attention_prefill"
    )
    assert 0.3 * full < chunk < full  # the last quarter of a causal prefill costs most of it


def test_dp_attention_routes_through_all_to_all():
    m = load_model("deepseek-v3")
    ops = step_ops(m, Parallel(tp=8, ep=8, dp_attn=True), StepShape(decode_batch=64, decode_kv_len=4096))
    assert {op.key.op for op in keys(ops, Comm)} == {"alltoall"}
    assert keys(ops, MlaDecode)[0].key.batch == 8  # 64 sequences over 8 attention ranks
    assert keys(ops, Moe)[0].key.tokens == 64  # the EP group sees every token


def test_static_estimate_fields_and_bands():
    m = load_model(FLASH)
    r = estimate_static(m, H200, Parallel(tp=8, ep=8), engine_profile("vllm"), 32, 8192, 1024)
    assert r.ttft_ms_low < r.ttft_ms < r.ttft_ms_high
    assert r.tpot_ms_low < r.tpot_ms < r.tpot_ms_high
    assert r.tokens_per_s_per_user == pytest.approx(1000 / r.tpot_ms)
    assert sum(r.provenance["ops_by_source"].values()) > 0
    assert r.memory["weights_gib"] > 0


def test_backends_add_overhead_on_top_of_kernel_time():
    m, p = load_model("llama-3.1-8b"), Parallel()
    torch = estimate_static(m, H200, p, engine_profile("torch"), 8, 1024, 128)
    vllm = estimate_static(m, H200, p, engine_profile("vllm"), 8, 1024, 128)
    assert vllm.tpot_ms > torch.tpot_ms and vllm.ttft_ms > torch.ttft_ms


def test_decode_grows_with_batch_and_context():
    m, p, e = load_model("qwen3-32b"), Parallel(tp=2), engine_profile("torch")
    a = estimate_static(m, H200, p, e, 8, 1024, 256)
    b = estimate_static(m, H200, p, e, 64, 1024, 256)
    c = estimate_static(m, H200, p, e, 64, 8192, 256)
    assert a.tpot_ms < b.tpot_ms < c.tpot_ms
    assert b.output_tokens_per_s_per_gpu > a.output_tokens_per_s_per_gpu


def test_kv_capacity_and_bad_input_errors():
    m = load_model("llama-3.1-70b")
    with pytest.raises(ServelabError, match="at most"):
        estimate_static(m, H200, Parallel(tp=2), engine_profile("vllm"), 4096, 8192, 1024)
    with pytest.raises(ServelabError, match="backend: unknown engine"):
        engine_profile("tgi")


@pytest.mark.parametrize(
    "parallel", [Parallel(tp=8, ep=8), Parallel(tp=8, ep=8, dp_attn=True), Parallel(tp=4, pp=2)]
)
@pytest.mark.parametrize(
    "shape",
    [
        StepShape(prefill=((2048, 0),) * 8),
        StepShape(prefill=((1500, 300), (512, 0), (96, 4000)) * 8, decode_batch=160, decode_kv_len=5000),
        StepShape(decode_batch=64, decode_kv_len=8192),
    ],
)
def test_priced_step_parts_add_up_to_the_whole_step(parallel, shape):
    """Pricing in memoized parts (and the token grid) stays within 1 % of pricing every op of the step."""
    m, db, e = load_model(FLASH), PerfDB(H200), engine_profile("torch")
    whole = step_time(step_ops(m, parallel, shape), db, e, 1, decode_only=not shape.prefill)
    parts = priced_step(m, parallel, shape, e, db)
    assert parts.kernel_us == pytest.approx(whole.kernel_us, rel=0.01)


@pytest.mark.slow  # 0.8 s of CPU a case: steps priced from fresh tables
def test_step_prices_are_memoized_for_as_long_as_their_perfdb_lives():
    m, e, shape = (
        load_model("llama-3.1-8b"),
        engine_profile("vllm"),
        StepShape(decode_batch=4, decode_kv_len=99),
    )
    db = PerfDB(H200)
    first = priced_step(m, Parallel(), shape, e, db)
    assert priced_step(m, Parallel(), shape, e, db) is first
    assert priced_step(m, Parallel(), shape, e, PerfDB(H200)) == first  # another PerfDB prices anew
    gone = weakref.ref(db)
    del db
    gc.collect()
    assert gone() is None


def test_every_op_the_graph_emits_has_a_category():
    """explain groups step time by OP_CATEGORY: an op name missing there would be a KeyError, so every
    embedded model is walked at every layout it allows (pp 2 and MTP included)."""
    shape = StepShape(prefill=((512, 1024),), decode_batch=4, decode_kv_len=2048, spec_tokens=1)
    seen = set()
    for name in list_models():
        model = load_model(name)
        for tp, ep, dp_attn, pp in itertools.product((1, 8), (1, 8), (False, True), (1, 2)):
            parallel = Parallel(tp=tp, ep=ep, dp_attn=dp_attn, pp=pp)
            try:
                parallel.validate(model)
            except ServelabError:
                continue
            seen |= {op.name for op in step_ops(model, parallel, shape)}
    assert {name for name in seen if name.removeprefix(MTP_PREFIX) not in OP_CATEGORY} == set()
    assert {"ep_dispatch", "pp_send_recv", "mtp.mtp_proj", "swa_decode", "mla_decode"} <= seen
