"""The twin's routing and prefix-cache rules (predict/twin.py); whole twins: tests/bench/test_twin.py."""

from servelab.predict.twin import BenchStream, EngineSettings, route
from servelab.predict.twin import prefix_hits as prefix_hits_of
from servelab.specs import Parallel

DP4 = Parallel(tp=4, ep=4, dp_attn=True)


def _stream(**kw) -> BenchStream:
    fields = dict(
        random_input_len=100,
        random_output_len=10,
        random_range_ratio=0.0,
        random_prefix_len=40,
        num_prompts=6,
        max_concurrency=2,
        request_rate=float("inf"),
    )
    return BenchStream(**{**fields, **kw})


def prefix_hits(stream: BenchStream, settings: EngineSettings) -> list[int]:
    """The twin's rule with the first request's prompt as the twin draws it."""
    return prefix_hits_of(stream, settings, stream.lengths()[0][0])


def test_dp_ranks_get_requests_round_robin_and_share_the_concurrency():
    assert route(10, 8, DP4) == [([0, 4, 8], 2), ([1, 5, 9], 2), ([2, 6], 2), ([3, 7], 2)]
    assert route(5, None, DP4)[0] == ([0, 4], None)


def test_fewer_slots_than_ranks_use_only_as_many_ranks():
    assert route(6, 2, DP4) == [([0, 2, 4], 1), ([1, 3, 5], 1)]
    assert route(3, 1, Parallel(tp=1)) == [([0, 1, 2], 1)]


def test_prefix_hits_are_whole_blocks_after_the_first_wave_or_a_warmup():
    on = EngineSettings(enable_prefix_caching=True, block_size=16)
    assert prefix_hits(_stream(), EngineSettings(enable_prefix_caching=False)) == [0] * 6
    assert prefix_hits(_stream(ready_check=False), on) == [0, 0, 32, 32, 32, 32]
    assert prefix_hits(_stream(ready_check=False, request_rate=5.0), on) == [0] + [32] * 5
    assert prefix_hits(_stream(ready_check=False, random_prefix_len=0), on) == [0] * 6


def test_the_ready_check_or_a_warmup_leaves_the_first_prompt_cached():
    """Both send the first request's own prompt: the first request finds it all but its last token, in whole
    blocks (140 tokens: 139 looked up, 128 found); the others find the shared prefix."""
    on = EngineSettings(enable_prefix_caching=True, block_size=16)
    for stream in (_stream(), _stream(ready_check=False, num_warmups=1), _stream(request_rate=5.0)):
        assert prefix_hits(stream, on) == [128] + [32] * 5
    assert prefix_hits(_stream(random_prefix_len=0, random_input_len=17), on) == [16] + [0] * 5
    assert prefix_hits(_stream(random_prefix_len=0, random_input_len=16), on) == [0] * 6
    off = EngineSettings(enable_prefix_caching=False)
    assert prefix_hits(_stream(), off) == [0] * 6  # no prefix caching: nothing found


def test_prefix_caching_is_the_engines_default_where_not_set():
    """vLLM's prefix caching, SGLang's radix cache and TensorRT-LLM's block reuse are all on unless a launch
    turns them off (engines/<engine>/defaults.json)."""
    for engine in ("vllm", "sglang", "trtllm"):
        assert prefix_hits(_stream(), EngineSettings(engine=engine)) == [128] + [32] * 5, engine


def test_lengths_include_the_prefix():
    assert _stream().lengths() == [(140, 10)] * 6
    assert _stream(request_rate=5.0).offsets()[-1] > 0 and _stream().offsets() == [0.0] * 6
