import math
from itertools import pairwise

import pytest

from servelab.traffic.schedule import arrival_offsets, rate_at, split_limit, split_round_robin


def test_closed_loop_has_no_offsets():
    assert arrival_offsets(10, math.inf) is None


def test_offsets_are_seeded_cumulative_and_rescaled_to_n_over_rate():
    a = arrival_offsets(200, 10.0, burstiness=1.0, seed=3)
    assert a == arrival_offsets(200, 10.0, burstiness=1.0, seed=3)
    assert a != arrival_offsets(200, 10.0, burstiness=1.0, seed=4)
    assert all(y >= x for x, y in pairwise(a))
    assert a[-1] == pytest.approx(200 / 10.0)  # vLLM's normalisation


def test_infinite_burstiness_is_uniform():
    a = arrival_offsets(5, 2.0, burstiness=math.inf)
    assert a == pytest.approx([0.5, 1.0, 1.5, 2.0, 2.5])


def test_ramp_up_linear_rates():
    assert rate_at(0, 11, math.inf, "linear", 1.0, 11.0) == 1.0
    assert rate_at(5, 11, math.inf, "linear", 1.0, 11.0) == 6.0
    assert rate_at(10, 11, math.inf, "exponential", 1.0, 100.0) == pytest.approx(100.0)
    a = arrival_offsets(100, math.inf, 1.0, 0, "linear", 1.0, 50.0)
    gaps = [y - x for x, y in pairwise([0.0] + a)]
    assert sum(gaps[:10]) > sum(gaps[-10:])  # arrivals speed up


def test_splits():
    assert split_round_robin(list(range(7)), 3) == [[0, 3, 6], [1, 4], [2, 5]]
    assert split_limit(256, 3) == [86, 85, 85]
    assert sum(split_limit(5, 2)) == 5
    assert split_limit(None, 2) == [None, None]
