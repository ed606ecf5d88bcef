"""Numbers and values in human output: no exponents, no Python reprs (issue 31)."""

import math

import pytest

from servelab.readable import factor, number, typed, value


@pytest.mark.parametrize(
    ("x", "text"),
    [
        (14460.0, "14,460"),
        (1446.3, "1,446"),
        (1_234_567.8, "1,234,568"),
        (12.345, "12.35"),
        (0.5, "0.5"),
        (0.000123456, "0.0001235"),
        (-3.25, "-3.25"),
        (0.0, "0"),
        (7, "7"),
        (12345, "12,345"),
        (math.inf, "inf"),
        (math.nan, "nan"),
        (True, "yes"),
    ],
)
def test_number_never_has_an_exponent(x, text):
    assert number(x) == text and "e+" not in number(x) and "e-" not in number(x)


def test_typed_and_factor_are_g_without_the_exponent():
    assert [typed(2000.0), typed(0.5), typed(1e7), typed(1e-5)] == ["2000", "0.5", "10000000", "0.00001"]
    assert [factor(0.853), factor(1.5), factor(12.0), factor(1234.0)] == ["0.853", "1.5", "12", "1234"]


def test_value_writes_mappings_and_lists_as_words():
    assert value({"roofline": 324, "measured": 12}) == "roofline 324, measured 12"
    assert value({"bf16": 989.0, "fp8": 1979.0, "fp4": 0.0}) == "bf16 989, fp8 1,979, fp4 0"
    assert value({"weights": "fp8", "indexer_cache": None}) == "weights fp8, indexer_cache -"
    assert value({"prefill": {"a": 1.5}}) == "prefill (a 1.5)"
    assert value([1, 2.5, "x"]) == "1, 2.5, x" and value(False) == "no" and value([]) == "-"
