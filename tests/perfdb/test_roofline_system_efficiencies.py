"""A system spec's own `efficiencies` replace the shipped ones in the fitted roofline: a system fitted
outside perfdb/data/efficiencies.json (the CPU that accuracy/twin_vs_vllm_cpu.py fits) prices attention at its
own rate and, with "tile_quantized": false, its GEMMs without a GPU's 128-wide tiles."""

import pytest

from servelab.perfdb.keys import AttentionPrefill, Gemm
from servelab.perfdb.reference import SmoothRoofline
from servelab.perfdb.roofline import Roofline, efficiencies
from servelab.specs import load_system

H200 = load_system("h200_sxm")
# compute-bound at every M below: bandwidth so high that no GEMM or attention here waits on memory
FAST_MEMORY = H200.model_copy(update={"name": "compute_bound_test", "hbm_bw_tbs": 1e6})
PROMPT = AttentionPrefill(batch=1, seq=4096, heads=32, kv_heads=8, head_dim=128)


def compute_us(roof: Roofline, key) -> float:
    return roof.latency(key).us - roof.kernel_us


def test_shipped_systems_keep_the_shipped_efficiencies():
    assert H200.efficiencies == {}
    assert Roofline(H200).eff == efficiencies("h200_sxm")
    assert Roofline(H200).tile_quantized


def test_without_tiles_a_gemm_costs_its_own_rows():
    tiled = Roofline(FAST_MEMORY)
    flat = Roofline(FAST_MEMORY.model_copy(update={"efficiencies": {"tile_quantized": False}}))

    def us(roof: Roofline, m: int) -> float:
        return compute_us(roof, Gemm(m, 4096, 4096))

    # with tiles, M = 8 to 128 all pay for one 128-row tile (and below 8, 16 times their own rows)
    assert us(tiled, 8) == pytest.approx(us(tiled, 16))
    assert us(tiled, 8) == pytest.approx(us(tiled, 128))
    assert us(flat, 16) == pytest.approx(2 * us(flat, 8))
    assert us(flat, 128) == pytest.approx(us(tiled, 128))  # a full tile costs the same either way
    assert us(flat, 8) * 16 == pytest.approx(us(tiled, 8))


def test_an_attention_rate_of_the_systems_own():
    base = Roofline(FAST_MEMORY)
    rate = 4 * base.eff.attention_compute
    faster = Roofline(FAST_MEMORY.model_copy(update={"efficiencies": {"attention_compute": rate}}))
    assert compute_us(faster, PROMPT) * 4 == pytest.approx(compute_us(base, PROMPT))
    assert compute_us(faster, Gemm(256, 4096, 4096)) == pytest.approx(compute_us(base, Gemm(256, 4096, 4096)))


def test_the_interpolation_reference_never_takes_a_fit():
    custom = FAST_MEMORY.model_copy(update={"efficiencies": {"attention_compute": 9.0, "kernel_us": 0.0}})
    assert SmoothRoofline(custom).eff == efficiencies("")
