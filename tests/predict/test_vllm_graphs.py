"""vLLM V1 replays a CUDA graph for any step of at most its largest capture size in tokens, prompt chunks
included (FULL_AND_PIECEWISE: piecewise graphs for mixed batches, config/vllm.py _set_cudagraph_sizes and
v1/cudagraph_dispatcher.py, 0.25.0); a larger step runs eagerly. The largest size is the launch's
--max-cudagraph-capture-size, else min(2 x max_num_seqs, 512), never over the token budget. Other engines
replay graphs for decode-only steps alone."""

import pytest

from servelab.perfdb.db import perfdb_for
from servelab.predict.engines import engine_profile
from servelab.predict.graph import StepShape
from servelab.predict.serving.pricing import StepPricer
from servelab.predict.step import _part_prices, replays_graph, step_terms
from servelab.specs import load_model, load_system
from servelab.specs.parallel import Parallel

H100 = load_system("h100_sxm")
MOE = load_model("Qwen/Qwen3-30B-A3B")


def vllm(**given):
    return engine_profile("vllm", gpu_gib=H100.hbm_gib, gpu_name=H100.name, **given)


@pytest.mark.parametrize(
    ("given", "largest"),
    [
        ({"max_num_seqs": 32, "max_num_batched_tokens": 4096}, 64),  # the vllm_gpu_graphs20 server
        ({"max_num_seqs": 48, "max_num_batched_tokens": 2048}, 96),
        ({"max_num_seqs": 1024, "max_num_batched_tokens": 8192}, 512),
        ({"max_num_seqs": 256, "max_num_batched_tokens": 256}, 256),  # never over the token budget
        ({"max_num_seqs": 32, "max_num_batched_tokens": 4096, "cuda_graph_max_batch": 1024}, 1024),
    ],
)
def test_the_largest_graph_is_vllms_capture_size(given, largest):
    assert vllm(**given).cuda_graph_max_batch == largest


def test_mixed_steps_within_the_capture_size_replay_a_graph_on_vllm_only():
    engine = vllm(max_num_seqs=32, max_num_batched_tokens=4096)
    assert replays_graph(engine, num_seqs=3, decode_only=False, tokens=64)
    assert not replays_graph(engine, num_seqs=3, decode_only=False, tokens=65)
    assert replays_graph(engine, num_seqs=32, decode_only=True, tokens=32)
    sglang = engine_profile("sglang", cuda_graph_max_batch=64)
    assert not replays_graph(sglang, num_seqs=3, decode_only=False, tokens=64)
    assert replays_graph(sglang, num_seqs=32, decode_only=True, tokens=32)


def test_an_eager_launch_cost_is_paid_only_by_steps_over_the_capture_size():
    """With launches made dear enough to show (10 ms a kernel), a prompt step of 64 tokens pays none and
    one of 65 pays them all; between the two the simulator's price does not blend the sides."""
    engine = vllm(max_num_seqs=32, max_num_batched_tokens=4096).model_copy(update={"eager_launch_us": 10_000})
    db, parallel = perfdb_for(H100, "vllm"), Parallel(tp=1)
    part = _part_prices(MOE, parallel, db)
    shapes = [StepShape(prefill=((new, 0),), decode_batch=4, decode_kv_len=300) for new in (60, 61)]
    launches = [
        step_terms(part, MOE, parallel, shape, engine)["engine", "eager_launch_us"] for shape in shapes
    ]
    assert launches[0] == 0 and launches[1] > 1e6  # us: hundreds of kernels at 10 ms each
    pricer = StepPricer(MOE, parallel, engine, db)
    graphed, eager = (pricer.mixed([(new, 0)], 4, 300)[0] for new in (60, 61))
    assert eager - graphed > 1e6
    below = pricer.mixed([(50, 0)], 4, 300)[0]
    assert graphed - below < 0.05 * graphed  # no eager share blended into a graphed step's price
