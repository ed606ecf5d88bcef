"""The serving-level bands (predict/bands.py): quantiles of out-of-sample residuals per engine and metric,
pooled where an engine has too few rows, the nested leave-one-family-out coverage counter, and the residuals
file's one-line refusals."""

import json
import math

import pytest

from servelab.errors import ServelabError
from servelab.predict.band_domain import Asked, Domain
from servelab.predict.bands import (
    LEVELS,
    POOLED,
    WIDEN,
    Residual,
    attach_band,
    band_for,
    build_bands,
    claimed_bands,
    coverage,
    covered,
    lofo_share,
    pick_level,
    quantiles,
    read_residuals,
    residuals_path,
)


def rows_of(engine: str, family: str, values: list[float]) -> list[Residual]:
    return [Residual(engine, family, v, -v) for v in values]


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
    assert pooled.engine == POOLED and pooled.rows == 50
    assert pooled.low == pytest.approx(0.0) and pooled.high == pytest.approx(1.0)
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
    checked = coverage(near_a + near_b + far, claim=0.8, min_rows=10)
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


def test_a_band_widens_until_unseen_families_are_covered_as_claimed():
    rows = shifted_families()
    # at the claim's own quantiles a held-out family falls outside the others' band far more than 20 %
    assert covered(coverage(rows, 0.8, min_rows=10)) < 0.7
    level = pick_level(rows, "ttft", 0.8)
    assert 0.8 < level < 1.0
    assert covered(coverage(rows, 0.8, min_rows=10, level=level)) >= 0.8
    # the smallest such level: one step narrower falls short
    narrower = max(x for x in LEVELS if x < level)
    assert narrower < 0.8 or covered(coverage(rows, 0.8, min_rows=10, level=narrower)) < 0.8
    band = claimed_bands(rows, 0.8, min_rows=10)[("vllm", "ttft")]
    assert band.claim == 0.8 and band.level == level
    assert band.describe().endswith(f"(their central {100 * level:.0f} %)")


def test_one_family_keeps_the_claims_own_quantiles():
    rows = rows_of("vllm", "llama", [k / 100 for k in range(101)])
    assert pick_level(rows, "ttft", 0.8) == 0.8
    assert claimed_bands(rows, 0.8)[("vllm", "ttft")].level == 0.0  # spans its claim: nothing to say


def test_widened_coverage_holds_the_family_out_of_the_level_choice_too():
    rows = shifted_families()
    checked = coverage(rows, 0.8, min_rows=10, level=WIDEN)
    assert len(checked) == len(rows)
    # the outermost families reach past every band the others build: about half of their rows outside
    # (counted: 23 of 40); the middle families lie inside the others' spread
    by_family = {
        f"family{f}": sum(i["ttft"] for r, i in checked if r.family == f"family{f}") for f in range(5)
    }
    assert by_family == {"family0": 23, "family1": 40, "family2": 40, "family3": 40, "family4": 23}
    assert covered(checked) == pytest.approx((3 * 40 + 2 * 23) / 200)


def test_each_engine_picks_its_own_level_on_its_own_rows():
    # vLLM's families are each off by their own amount, TensorRT-LLM's alike: vLLM's band widens,
    # TensorRT-LLM's keeps its claim's own quantiles instead of taking the share vLLM needs
    alike = [k / 39 - 0.5 for k in range(40)]
    trtllm = [Residual("trtllm", f"family{f}", v, v) for f in range(5) for v in alike]
    bands = claimed_bands(shifted_families() + trtllm, 0.8, min_rows=10)
    assert bands[("vllm", "ttft")].level == pick_level(shifted_families(), "ttft", 0.8) > 0.8
    assert bands[("trtllm", "ttft")].level == 0.0  # 0.8: its own rows need no widening
    assert (bands[("trtllm", "ttft")].low, bands[("trtllm", "ttft")].high) == pytest.approx(
        quantiles(alike, 0.8)
    )


def test_each_metric_picks_its_own_level():
    # TTFT off by family, TPOT alike: only TTFT's band widens
    rows = [Residual("vllm", r.family, r.ttft, (k % 40) / 39 - 0.5) for k, r in enumerate(shifted_families())]
    bands = claimed_bands(rows, 0.8, min_rows=10)
    assert bands[("vllm", "ttft")].level > 0.8 and bands[("vllm", "tpot")].level == 0.0


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


def test_a_band_that_no_share_makes_good_says_how_short_it_falls():
    # a third family far from the other two: no share of two families' residuals reaches the third's, so the
    # band spans them all and says what it held, leaving one family out: a's 0.1s (within b and c), all of
    # b (within a and c), none of c (beyond a and b): 60 of 120
    rows = rows_of("vllm", "a", [0.0, 0.1] * 20) + rows_of("vllm", "b", [0.05] * 40)
    rows += rows_of("vllm", "c", [3.0] * 40)
    band = claimed_bands(rows, 0.8, min_rows=10)[("vllm", "ttft")]
    assert band.level == 1.0 and (band.low, band.high) == (0.0, 3.0)
    assert band.short == pytest.approx(lofo_share(rows, "ttft", 1.0)) == pytest.approx(60 / 120)
    assert band.describe().endswith("(their central 100 %, holding only 50 % of left-out families' rows)")
    assert band.as_dict(1.0)["held_out"] == 0.5
    # where a share reaches the claim, nothing is said
    assert claimed_bands(shifted_families(), 0.8, min_rows=10)[("vllm", "ttft")].short == 0.0
