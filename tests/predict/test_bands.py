"""The serving-level bands (predict/bands.py): quantiles of what an unseen family's out-of-sample residuals
look like, per engine and metric, pooled where an engine has too few rows, the nested leave-one-family-out
coverage counter each band reports, and the residuals file's one-line refusals."""

import json
import math

import pytest

from servelab.errors import ServelabError
from servelab.predict.band_domain import Asked, Domain
from servelab.predict.bands import (
    POOLED,
    Residual,
    attach_band,
    band_for,
    build_bands,
    claimed_bands,
    coverage,
    covered,
    groups_of,
    quantiles,
    read_residuals,
    residuals_path,
    unseen_family,
)


def rows_of(engine: str, family: str, values: list[float], model: str = "") -> list[Residual]:
    return [Residual(engine, family, v, -v, model=model) for v in values]


def test_a_band_is_the_residuals_central_quantiles():
    # 101 residuals 0.00 .. 1.00: the 80 % band runs from the 10th to the 90th percentile
    rows = rows_of("vllm", "llama", [k / 100 for k in range(101)])
    bands = build_bands(rows, claim=0.8, min_rows=30)
    ttft, tpot = bands[("vllm", "ttft")], bands[("vllm", "tpot")]
    assert (ttft.low, ttft.high) == pytest.approx((0.10, 0.90))
    assert (tpot.low, tpot.high) == pytest.approx((-0.90, -0.10))
    assert ttft.rows == 101 and ttft.engine == "vllm" and not ttft.pooled_because
    assert ttft.around(100.0) == pytest.approx((100 * math.exp(0.1), 100 * math.exp(0.9)))
    assert ttft.describe() == "80 % band, LOFO residuals of 101 rows, vllm"
    assert quantiles([0.0, 1.0], 0.5) == pytest.approx((0.25, 0.75))


def test_an_engine_with_too_few_rows_takes_every_engines_residuals_and_says_so():
    rows = rows_of("vllm", "llama", [0.0] * 40) + rows_of("sglang", "qwen", [1.0] * 10)
    bands = build_bands(rows, claim=0.8, min_rows=30)
    own, pooled = bands[("vllm", "ttft")], bands[("sglang", "ttft")]
    assert (own.low, own.high, own.rows) == (0.0, 0.0, 40)
    assert pooled.engine == POOLED and pooled.rows == 50 and pooled.groups == 2
    # every engine's rows, widened: an unseen family may lie as far from their median (0) as llama and
    # qwen lay from each other (1), on either side
    assert pooled.low == pytest.approx(-1.0) and pooled.high == pytest.approx(1.0)
    assert "sglang has 10 rows, fewer than 30" in pooled.describe()
    # an engine with no row at all gets the pooled band too, saying so
    none = band_for(bands, "trtllm", "ttft", min_rows=30)
    assert none is not None and none.engine == POOLED and "trtllm has 0 rows" in none.describe()
    assert band_for({}, "vllm", "ttft") is None


def test_a_claim_outside_zero_and_one_is_refused():
    with pytest.raises(ValueError, match="claim"):
        build_bands(rows_of("vllm", "llama", [0.0]), claim=1.0)


def test_coverage_holds_each_family_out_of_the_bands_that_judge_it():
    # two families close to 0 and one far off: held out, the far family lies outside the others' band,
    # and each near family is judged by a band that includes the far family's rows
    near_a = rows_of("vllm", "a", [-0.01, 0.0, 0.01] * 10)
    near_b = rows_of("vllm", "b", [-0.02, 0.0, 0.02] * 10)
    far = rows_of("vllm", "c", [2.0] * 30)
    checked = coverage(near_a + near_b + far, claim=0.8, min_rows=10, widen=False)
    by_family: dict[str, list[bool]] = {}
    for r, inside in checked:
        by_family.setdefault(r.family, []).append(inside["ttft"])
    assert len(checked) == 90
    assert not any(by_family["c"])  # bands of a and b alone: within +-0.02
    # family a judged by b + c: 10th-90th percentile of {-0.02, 0, 0.02} x10 and {2.0} x30 spans a
    assert all(by_family["a"])
    # family b judged by a + c: [-0.01 .. 2.0]; b's -0.02 falls below
    assert sum(by_family["b"]) == 20


PROVENANCE = {"settings": {"system": "h200_sxm"}}


def residual_file(tmp_path, rows) -> tuple:
    calibration = tmp_path / "cal.json"
    path = residuals_path(calibration)
    path.write_text(json.dumps({"residuals_format": 1, "provenance": PROVENANCE, "rows": rows}))
    return calibration, path


GOOD = {"engine": "vllm", "family": "llama", "ttft_ms": 200.0, "tpot_ms": 10.0}
GOOD |= {"pred_ttft_ms": 100.0, "pred_tpot_ms": 20.0, "concurrency": 8, "isl": 1024, "osl": 128}


def test_the_residuals_file_is_read_as_log_ratios(tmp_path):
    calibration, path = residual_file(tmp_path, [GOOD, GOOD | {"engine": "trt"}])
    assert path.name == "cal.residuals.json"
    rows = read_residuals(path)
    assert rows[0].ttft == pytest.approx(math.log(2)) and rows[0].tpot == pytest.approx(math.log(0.5))
    assert rows[1].engine == "trtllm"  # an alias is the engine's name
    # where the row lies: the calibration's system (its provenance), the row's load and lengths
    assert (rows[0].system, rows[0].concurrency, rows[0].isl, rows[0].osl) == ("h200_sxm", 8, 1024, 128)
    assert rows[0].model == ""  # none given: counted with its family
    calibration, path = residual_file(tmp_path, [GOOD | {"model": "llama-3.1-8b"}])
    assert read_residuals(path)[0].model == "llama-3.1-8b"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "not JSON"),
        ('{"rows": []}', "non-empty list 'rows'"),
        ("[1, 2]", "non-empty list 'rows'"),
        (json.dumps({"rows": [GOOD]}), "expected provenance.settings.system"),
        (json.dumps({"provenance": PROVENANCE, "rows": [GOOD | {"ttft_ms": -1}]}), "rows[0]"),
        (json.dumps({"provenance": PROVENANCE, "rows": [GOOD, {"engine": "vllm"}]}), "rows[1]"),
        (json.dumps({"provenance": PROVENANCE, "rows": [GOOD | {"engine": "nope"}]}), "rows[0]"),
        (json.dumps({"provenance": PROVENANCE, "rows": [GOOD | {"osl": 0}]}), "positive concurrency"),
        (json.dumps({"provenance": PROVENANCE, "rows": [GOOD | {"isl": "long"}]}), "rows[0]"),
    ],
)
def test_a_bad_residuals_file_is_one_line_naming_it(tmp_path, content, message):
    path = tmp_path / "bad.residuals.json"
    path.write_text(content)
    with pytest.raises(ServelabError) as e:
        read_residuals(path)
    text = str(e.value)
    assert "\n" not in text and str(path) in text and message in text


def shifted_families(n_families: int = 5, rows: int = 40) -> list[Residual]:
    """Residuals alike within a family, each family off by its own amount (as a fit's unseen families are)."""
    out = []
    for f in range(n_families):
        shift = (f - (n_families - 1) / 2) * 0.15
        out += rows_of("vllm", f"family{f}", [shift + (k / (rows - 1) - 0.5) * 0.4 for k in range(rows)])
    return out


def test_an_unseen_familys_residuals_are_the_median_plus_a_groups_offset_plus_a_rows_spread():
    rows = rows_of("vllm", "a", [0.0, 0.2]) + rows_of("vllm", "b", [1.0, 1.2])
    draws, groups = unseen_family(rows, "ttft")
    # median 0.6; a lay 1.0 below b and b 1.0 above a, each taken either way; each row 0.1 from its family's
    # median
    assert groups == 2
    assert sorted(draws) == pytest.approx([-0.5] * 4 + [-0.3] * 4 + [1.5] * 4 + [1.7] * 4)
    band = build_bands(rows, 0.5, min_rows=1)[("vllm", "ttft")]
    assert (band.low, band.high) == pytest.approx(quantiles(draws, 0.5)) and band.groups == 2
    # one family: its own values, nothing widened
    one = rows_of("vllm", "a", [0.0, 0.2, 0.4])
    assert unseen_family(one, "ttft") == ([0.0, 0.2, 0.4], 1)


def test_a_family_splits_into_its_models_only_where_each_has_enough_rows():
    small, large = (
        rows_of("vllm", "llama", [0.0] * 5, "llama-8b"),
        rows_of("vllm", "llama", [1.0] * 9, "llama-70b"),
    )
    assert set(groups_of(small + large)) == {"llama-8b", "llama-70b"}
    assert set(groups_of(small[:4] + large)) == {"llama"}  # 4 rows of the 8B: too few to stand alone
    assert set(groups_of(small + large + rows_of("vllm", "llama", [0.5]))) == {"llama"}  # a row without model
    assert set(groups_of(large + rows_of("vllm", "qwen", [0.0], "qwen3"))) == {"llama", "qwen"}  # one model


def test_widening_covers_unseen_families_nearer_the_claim_than_the_claims_own_quantiles():
    rows = shifted_families()
    plain = covered(coverage(rows, 0.8, min_rows=10, widen=False))
    widened = covered(coverage(rows, 0.8, min_rows=10))
    assert plain < 0.7 and abs(widened - 0.8) < abs(plain - 0.8)


def test_coverage_holds_the_family_out_of_the_offsets_too():
    # two families alike and a third far off: held out, the far family is judged by a band whose offsets
    # (the two alike families') are small, so it lies outside; a near family, judged by a band with the far
    # family's offset in it, lies inside
    rows = rows_of("vllm", "a", [0.0, 0.1] * 20) + rows_of("vllm", "b", [0.05] * 40)
    rows += rows_of("vllm", "c", [3.0] * 40)
    checked = coverage(rows, 0.8, min_rows=10)
    inside = {f: sum(i["ttft"] for r, i in checked if r.family == f) for f in "abc"}
    assert inside == {"a": 40, "b": 40, "c": 0}


def test_each_engine_is_widened_on_its_own_rows():
    # vLLM's families are each off by their own amount, TensorRT-LLM's alike: TensorRT-LLM's band is what its
    # own rows give, not the width vLLM needs
    alike = [k / 39 - 0.5 for k in range(40)]
    trtllm = [Residual("trtllm", f"family{f}", v, v) for f in range(5) for v in alike]
    bands = build_bands(shifted_families() + trtllm, 0.8, min_rows=10)
    own = build_bands(trtllm, 0.8, min_rows=10)[("trtllm", "ttft")]
    assert (bands[("trtllm", "ttft")].low, bands[("trtllm", "ttft")].high) == (own.low, own.high)
    assert own.high - own.low == pytest.approx(quantiles(alike, 0.8)[1] - quantiles(alike, 0.8)[0])
    assert bands[("vllm", "ttft")].high - bands[("vllm", "ttft")].low > own.high - own.low


def test_a_band_says_how_often_it_held_left_out_families():
    rows = rows_of("vllm", "a", [0.0, 0.1] * 20) + rows_of("vllm", "b", [0.05] * 40)
    rows += rows_of("vllm", "c", [3.0] * 40)
    band = claimed_bands(rows, 0.8, min_rows=10)[("vllm", "ttft")]
    assert (
        band.held_out == pytest.approx(covered(coverage(rows, 0.8, min_rows=10))) == pytest.approx(80 / 120)
    )
    assert band.describe() == (
        "80 % band, LOFO residuals of 120 rows, vllm (widened by 3 model groups' offsets; held 67 % of "
        "left-out families' rows)"
    )
    assert band.as_dict(1.0)["held_out"] == pytest.approx(0.6667) and band.as_dict(1.0)["groups"] == 3


def placed(concurrency=(4, 64), isl=(1024, 8192), osl=(128, 1024)) -> list[Residual]:
    """Residual rows of two families on h200_sxm spanning the given load and lengths."""
    return [
        Residual("vllm", family, 0.0, 0.0, "h200_sxm", c, i, o)
        for family in ("llama", "qwen")
        for c, i, o in zip(concurrency, isl, osl, strict=True)
    ]


def test_the_domain_is_where_the_rows_lie():
    domain = Domain.of(placed())
    assert domain.systems == ("h200_sxm",) and domain.families == ("llama", "qwen")
    assert (domain.concurrency, domain.isl, domain.osl) == ((4, 64), (1024, 8192), (128, 1024))
    assert domain.outside(Asked("h200_sxm", "llama", 4, 8192, 128)) == []  # the ends are inside
    asked = Asked.of("deepseek-v3", "b200_sxm", 128, 512, 2048)
    assert asked.family == "deepseek"
    assert domain.outside(asked) == [
        "system b200_sxm, the rows' h200_sxm",
        "model family deepseek, the rows' llama, qwen",
        "concurrency 128, the rows' 4-64",
        "isl 512, the rows' 1024-8192",
        "osl 2048, the rows' 128-1024",
    ]


def test_a_pooled_band_lies_where_every_engines_rows_lie():
    rows = placed() + [Residual("sglang", "gpt-oss", 0.0, 0.0, "h200_sxm", 512, 100, 100)]
    pooled = build_bands(rows, 0.8, min_rows=3)[("sglang", "ttft")]
    assert pooled.engine == POOLED and pooled.domain is not None
    assert pooled.domain.families == ("gpt-oss", "llama", "qwen") and pooled.domain.concurrency == (4, 512)


def test_a_prediction_outside_the_rows_claims_nothing_and_says_why(tmp_path):
    rows = [GOOD | {"family": f, "concurrency": c} for f in ("llama", "qwen") for c in (4, 64)] * 10
    calibration, _ = residual_file(tmp_path, rows)
    estimate = {"ttft_ms": 100.0, "ttft_ms_low": 90.0, "ttft_ms_high": 120.0}
    estimate |= {"tpot_ms": 10.0, "tpot_ms_low": 9.0, "tpot_ms_high": 12.0}
    inside = attach_band(
        dict(estimate), "vllm", calibration, Asked.of("llama-3.1-8b", "h200_sxm", 8, 1024, 128)
    )
    assert inside["band"]["claim"] == 0.8
    assert inside["ttft_ms_low"] == pytest.approx(200.0) == inside["ttft_ms_high"]  # every residual log 2
    assert inside["band"]["ttft_ms"]["rows_lie"]["concurrency"] == [4, 64]
    outside = attach_band(
        dict(estimate), "vllm", calibration, Asked.of("llama-3.1-8b", "h200_sxm", 128, 1024, 128)
    )
    assert outside["band"]["claim"] is None
    assert outside["band"]["source"].endswith(
        "outside the residual rows' distribution: concurrency 128, the rows' 4-64"
    )
    assert (outside["ttft_ms_low"], outside["ttft_ms_high"]) == (90.0, 120.0)  # the kernel-source band stays
    unplaced = attach_band(dict(estimate), "vllm", calibration, None)
    assert unplaced["band"]["claim"] is None and "not known" in unplaced["band"]["source"]
