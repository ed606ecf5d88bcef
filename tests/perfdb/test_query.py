"""Query resolution against synthetic tables whose true latency is a known function."""

import math
import random

import pytest
import synth

from servelab.errors import ServelabError
from servelab.perfdb import keys
from servelab.perfdb.db import BoundedCache, PerfDB
from servelab.perfdb.merge import merge
from servelab.perfdb.reference import reference_fn
from servelab.perfdb.tables import load_tables
from servelab.specs import load_system


def rel(a, b):
    return abs(a / b - 1)


def test_exact_hit_is_measured_with_its_measured_band(tables):
    truth = synth.gemm_us(512, 4096, 4096)
    lat = tables.lookup(keys.Gemm(512, 4096, 4096))
    assert lat.source == "measured"
    assert lat.us == pytest.approx(truth)
    assert lat.low_us <= truth * 0.99 + 1e-9 and lat.high_us >= truth * 1.01 - 1e-9
    assert lat.low_us <= lat.us * 0.975 + 1e-9 and lat.high_us >= lat.us * 1.035 - 1e-9  # repeatability floor


@pytest.mark.parametrize("m", [3, 100, 700, 3000, 5000, 11000])
def test_gemm_interpolates_in_log_m_close_to_truth(tables, m):
    lat = tables.lookup(keys.Gemm(m, 8192, 4096))
    assert lat.source == "interpolated"
    assert rel(lat.us, synth.gemm_us(m, 8192, 4096)) < 0.05
    assert lat.low_us <= lat.us <= lat.high_us


def test_gemm_never_collected_nk_borrows_utilisation_and_says_so(tables):
    lat = tables.lookup(keys.Gemm(1000, 6144, 4096))
    assert lat.source == "interpolated"
    assert "not collected" in lat.note and "borrowed" in lat.note
    assert rel(lat.us, synth.gemm_us(1000, 6144, 4096)) < 0.10


def test_gemm_beyond_the_data_holds_utilisation_with_a_wider_band(tables):
    inside = tables.lookup(keys.Gemm(12000, 4096, 4096))
    far = tables.lookup(keys.Gemm(200000, 4096, 4096))
    assert far.source == "extrapolated" and "held" in far.note
    assert rel(far.us, synth.gemm_us(200000, 4096, 4096)) < 0.15
    assert (far.high_us - far.low_us) / far.us > (inside.high_us - inside.low_us) / inside.us


def test_missing_dtype_falls_to_the_roofline_naming_why(tables, h200):
    lat = PerfDB(h200, tables=tables).query(keys.Gemm(1000, 4096, 4096, "fp8"))
    assert lat.source == "roofline" and "dtype=fp8" in lat.note


@pytest.mark.parametrize("batch,seq", [(1, 3000), (2, 700), (3, 1500), (1, 6000)])
def test_prefill_interpolates_in_sqrt_seq(tables, batch, seq):
    lat = tables.lookup(keys.AttentionPrefill(batch, seq, 32, 8, 128))
    assert lat.source == "interpolated"
    assert rel(lat.us, synth.prefill_us(batch, seq, 32, 128)) < 0.10


@pytest.mark.parametrize("batch,kv", [(5, 3000), (100, 700), (200, 20000), (50, 12345)])
def test_decode_interpolates_in_kv_len_and_batch(tables, batch, kv):
    lat = tables.lookup(keys.AttentionDecode(batch, kv, 32, 8, 128))
    assert lat.source == "interpolated"
    assert rel(lat.us, synth.decode_us(batch, kv, 8, 128)) < 0.05


def test_comm_interpolates_in_log_bytes(tables):
    lat = tables.lookup(keys.Comm(3_000_000, 4))
    assert lat.source == "interpolated"
    assert rel(lat.us, synth.allreduce_us(3_000_000, 4)) < 0.03


def test_dsv4_buckets_never_resolve_into_each_other_silently(table_dir, h200, tmp_path):
    # only V4-Flash (64 heads) is in the shared fixture: a V4-Pro query falls back and says so
    flash = load_tables(table_dir, h200)
    pro_q = keys.Dsv4Generation(128, 16, 4, 4096, "dsv4_csa_generation_module")
    lat = flash.lookup(pro_q)
    assert "fell back from model bucket [128][16]" in lat.note and "[64][" in lat.note
    # with V4-Pro collected too, the same query is answered from its own bucket (exact), no fallback note
    camp = synth.write_campaign(tmp_path / "c", synth.dsv4_rows(64) + synth.dsv4_rows(128))
    into = tmp_path / "h200_sxm" / "torch" / "2.11"
    merge([camp], into)
    both = load_tables(into, h200)
    lat = both.lookup(pro_q)
    assert lat.source == "measured" and "fell back" not in lat.note
    assert lat.us == pytest.approx(synth.dsv4_gen_us(128, 16, 4, 4096))
    off = both.lookup(keys.Dsv4Generation(128, 16, 3, 5000, "dsv4_csa_generation_module"))
    assert off.source == "interpolated" and "fell back" not in off.note
    # an op with no rows at all (hca) goes to the roofline
    hca = both.lookup(keys.Dsv4Generation(128, 16, 4, 4096, "dsv4_hca_generation_module"))
    assert hca.source == "roofline" and "op=dsv4_hca_generation_module" in hca.note


def test_no_table_for_an_op_means_roofline(tables, h200):
    lat = PerfDB(h200, tables=tables).query(keys.Moe(1024, 7168, 2048, 256, 8, 8, "fp8"))
    assert lat.source == "roofline"


def test_every_answer_has_a_source_and_an_ordered_band(tables):
    qs = (
        [keys.Gemm(m, 4096, 14336) for m in (1, 77, 4096, 99999)]
        + [keys.AttentionDecode(b, 5000, 8, 2, 128) for b in (1, 3, 300)]
        + [keys.Comm(2**33, 8)]
    )
    for q in qs:
        lat = tables.lookup(q)
        assert lat.source in ("measured", "interpolated", "extrapolated")
        assert 0 < lat.low_us <= lat.us <= lat.high_us and math.isfinite(lat.high_us)


def test_thousands_of_random_lookups_all_answer(tables):
    """How fast they answer is benchmarks/speed.py's job (a timed assertion here would depend on the load of
    the machine); this checks that every one answers, with a finite ordered band."""
    random.seed(1)
    qs = list(
        {keys.Gemm(random.randint(1, 30000), random.choice([4096, 8192, 5000]), 4096) for _ in range(3000)}
    )
    qs += list(
        {
            keys.AttentionDecode(random.randint(1, 256), random.randint(64, 40000), 32, 8, 128)
            for _ in range(3000)
        }
    )
    for q in qs:
        lat = tables.lookup(q)
        assert lat is not None and 0 < lat.low_us <= lat.us <= lat.high_us and math.isfinite(lat.high_us)


def _grid_rows(h200, keys_):
    """Rows whose latency is 1.3x the interpolation reference plus a 3 us floor: a smooth departure from the
    reference that interpolation should recover closely even from a coarse grid."""
    ref = reference_fn(h200)
    return [
        synth.row(k.op, 1.3 * ref(k) + 3.0, **{f: v for f, v in k._asdict().items() if f != "op"})
        for k in keys_
    ]


@pytest.mark.parametrize(
    "make,query",
    [
        (
            lambda: [keys.Moe(t, 7168, 256, 256, 8, 8, "fp8_block") for t in (16, 64, 256, 1024, 4096)],
            keys.Moe(500, 7168, 256, 256, 8, 8, "fp8_block"),
        ),
        (
            lambda: [keys.MlaDecode(b, kv, 16, 128) for b in (1, 16, 64) for kv in (1024, 4096, 16384)],
            keys.MlaDecode(30, 3000, 16, 128),
        ),
        (
            lambda: [keys.MlaPrefill(b, s, 16, 128) for b in (1, 4) for s in (512, 2048, 8192)],
            keys.MlaPrefill(2, 1000, 16, 128),
        ),
        (
            lambda: [
                keys.Dsv4Context(64, 8, b, s, "dsv4_hca_context_module")
                for b in (1, 4)
                for s in (1024, 4096, 16384)
            ],
            keys.Dsv4Context(64, 8, 3, 3000, "dsv4_hca_context_module"),
        ),
        (lambda: [keys.Memory(1 << p) for p in range(14, 30, 2)], keys.Memory(3 << 20)),
        (
            lambda: [keys.Comm(1 << p, 8, "alltoall") for p in range(10, 30, 2)],
            keys.Comm(3 << 20, 8, "alltoall"),
        ),
    ],
)
def test_every_family_round_trips_through_merge_and_query(h200, tmp_path, make, query):
    grid = make()
    camp = synth.write_campaign(tmp_path / "c", _grid_rows(h200, grid))
    into = tmp_path / "h200_sxm" / "torch" / "2.11"
    merge([camp], into)
    tables = load_tables(into, h200)
    hit = tables.lookup(grid[1])
    assert hit.source == "measured"
    lat = tables.lookup(query)
    assert lat.source == "interpolated"
    truth = 1.3 * reference_fn(h200)(query) + 3.0
    assert rel(lat.us, truth) < 0.08


def test_shared_perfdbs_are_bounded_and_cleared():
    cache: BoundedCache[int, str] = BoundedCache(2)
    for i in range(3):
        assert cache.get(i, lambda i=i: str(i)) == str(i)
    assert len(cache) == 2 and cache.get(0, lambda: "made again") == "made again"
    h200 = load_system("h200_sxm")
    db = PerfDB.shared(h200)
    assert PerfDB.shared(h200) is db
    PerfDB.clear_shared()
    assert PerfDB.shared(h200) is not db


def test_unknown_op_lists_the_known_ones():
    with pytest.raises(ServelabError, match=r"unknown op 'gemmm' \(did you mean gemm\?\); known ops: gemm, "):
        keys.key_from_dict("gemmm", {})
