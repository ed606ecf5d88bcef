import pytest

from servelab.errors import ServelabError
from servelab.predict.memory import GIB, check_fits, memory_per_gpu, weight_bytes_per_gpu
from servelab.specs import Parallel, load_model, load_system

H200 = load_system("h200_sxm")


def test_weights_split_over_tp_and_sum_back():
    m = load_model("llama-3.1-70b")
    one = weight_bytes_per_gpu(m, Parallel(tp=1))
    assert one == pytest.approx(m.weight_bytes, rel=1e-9)
    assert weight_bytes_per_gpu(m, Parallel(tp=4)) * 4 == pytest.approx(m.weight_bytes, rel=1e-9)


def test_dp_attention_replicates_attention_but_not_experts():
    m = load_model("sgl-project/DeepSeek-V4-Flash-FP8")
    tp = weight_bytes_per_gpu(m, Parallel(tp=8, ep=8))
    dp = weight_bytes_per_gpu(m, Parallel(tp=8, ep=8, dp_attn=True))
    assert dp > tp
    # every rank of a DP-attention deployment keeps its own sequences: far more KV capacity in total
    mem_tp = memory_per_gpu(m, H200, Parallel(tp=8, ep=8))
    mem_dp = memory_per_gpu(m, H200, Parallel(tp=8, ep=8, dp_attn=True))
    ratio = mem_dp.max_sequences(9216, m, Parallel(tp=8, ep=8, dp_attn=True)) / mem_tp.max_sequences(
        9216, m, Parallel(tp=8, ep=8)
    )
    assert 6.5 < ratio < 8  # DP8 holds about 7.7x the KV capacity of TP8 (each rank its own sequences)


def test_kv_capacity_is_consistent():
    m, p = load_model("llama-3.1-8b"), Parallel(tp=1)
    mem = memory_per_gpu(m, H200, p)
    assert mem.fits
    assert mem.max_kv_tokens == int(mem.kv_gib * GIB // m.kv_bytes_per_token)
    assert mem.max_sequences(4096, m, p) == mem.max_kv_tokens // 4096
    total = mem.weights_gib + mem.activations_gib + mem.reserve_gib + mem.kv_gib
    assert total == pytest.approx(mem.total_gib)


def test_does_not_fit_is_a_clear_error():
    with pytest.raises(ServelabError, match="does not fit"):
        check_fits(load_model("deepseek-v3"), H200, Parallel(tp=4, ep=4))
    check_fits(load_model("deepseek-v3"), H200, Parallel(tp=8, ep=8))


@pytest.mark.parametrize("context", [0, -5, 10**12])
def test_no_sequences_of_a_length_outside_the_bounds(context):
    m, p = load_model("llama-3.1-8b"), Parallel(tp=1)
    with pytest.raises(ServelabError, match="expected 1 to 100,000,000 tokens") as err:
        memory_per_gpu(m, H200, p).max_sequences(context, m, p)
    assert err.value.field == "context"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_num_batched_tokens": 0}, "max_num_batched_tokens"),
        ({"max_num_batched_tokens": -8192}, "max_num_batched_tokens"),
        ({"gpu_memory_utilization": float("nan")}, "gpu_memory_utilization"),
        ({"gpu_memory_utilization": 0.0}, "gpu_memory_utilization"),
    ],
)
def test_memory_options_out_of_range_name_their_field(kwargs, field):
    with pytest.raises(ServelabError) as err:
        memory_per_gpu(load_model("llama-3.1-8b"), H200, Parallel(tp=1), **kwargs)
    assert err.value.field == field
