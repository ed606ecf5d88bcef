"""One request-length rule for the load generator and the simulator (vLLM's random dataset)."""

import numpy as np

from servelab.bench.config import BenchConfig
from servelab.bench.datasets import build_dataset
from servelab.predict.serving import Workload
from servelab.predict.serving.simulator import ClosedLoop, OpenLoop
from servelab.traffic.lengths import LengthStream, length_bounds, sample_lengths


def test_bounds_are_vllms_floor_and_ceil():
    assert length_bounds(1000, 0.2) == (800, 1200)
    assert length_bounds(7, 0.5) == (3, 11)  # floor(3.5), ceil(10.5)
    assert length_bounds(1, 0.5, minimum=1) == (1, 2)


def test_random_dataset_lengths_follow_the_rule():
    cfg = BenchConfig(
        base_url="http://127.0.0.1:1",
        num_prompts=64,
        random_input_len=100,
        random_output_len=50,
        random_range_ratio=0.3,
        seed=7,
    )
    items = build_dataset(cfg, None).items
    ins, outs = sample_lengths(np.random.default_rng(7), 64, 100, 50, 0.3)
    assert [it.output_len for it in items] == outs.tolist()
    assert [it.prompt_len for it in items] == ins.tolist()  # no tokenizer: one word per token


def test_simulator_draws_the_same_lengths_as_the_load_generator():
    wl = Workload(isl=100, osl=50, rate=4.0, num_requests=64, range_ratio=0.3, seed=7)
    source = OpenLoop(wl)
    reqs = [source._new() for _ in range(64)]
    ins, outs = sample_lengths(np.random.default_rng(7), 64, 100, 50, 0.3)
    assert [r.prompt for r in reqs] == ins.tolist()
    assert [r.osl for r in reqs] == outs.tolist()


def test_stream_continues_past_the_first_block():
    stream = LengthStream(100, 50, 0.3, np.random.default_rng(1), block=4)
    lengths = [stream[i] for i in range(10)]
    assert all(70 <= i <= 130 and 35 <= o <= 65 for i, o in lengths)
    again = LengthStream(100, 50, 0.3, np.random.default_rng(1), block=4)
    assert [again[i] for i in range(10)] == lengths


def test_closed_loop_without_spread_has_exact_lengths():
    source = ClosedLoop(Workload(isl=100, osl=50, concurrency=2, num_requests=8, range_ratio=0.0))
    assert {(r.prompt, r.osl) for r in (source._new() for _ in range(8))} == {(100, 50)}
