"""The one-GPU shard check (accuracy/gpu_tp_step_check.py --shard-of T) builds the rank the op graph prices,
and accuracy/compare_step_check.py prices such a file with no communication: the pure-Python parts, on the
CPU.

The scripts are not a package; each runs as `python accuracy/<script>.py` would (tests/accuracy_python.py).
"""

import json

import pytest
from accuracy_python import ACCURACY, run_accuracy_python

SHAPES = """
import json
from gpu_shard_shapes import read_config, shard_dims
out = {}
for model in ("minimax-m2.5", "qwen3-235b-a22b"):
    cfg = read_config(model)
    out[model] = {str(t): shard_dims(cfg, t, t - 1)._asdict() for t in (2, 8)}
try:
    shard_dims(read_config("minimax-m2.5"), 5)
except ValueError as e:
    out["refused"] = str(e)
print(json.dumps(out))
"""


def test_the_ranks_hold_what_vllm_gives_them(tmp_path):
    """MiniMax-M2.5 TP8: 48 / 8 query heads, its 8 KV heads one a rank, 256 / 8 experts of 1,536 (its config
    calls them num_local_experts and intermediate_size), rotary on 64 of 128 dims; Qwen3-235B's 4 KV heads
    replicated at TP8; the last rank holds the last block of experts; 5 ranks divide nothing."""
    out = json.loads(run_accuracy_python(["-c", SHAPES], tmp_path))
    mm8, mm2 = out["minimax-m2.5"]["8"], out["minimax-m2.5"]["2"]
    assert (mm8["heads"], mm8["kv_heads"], mm8["experts"], mm8["inter"]) == (6, 1, 32, 1536)
    assert (mm8["first_expert"], mm8["rotary_dim"], mm8["scoring"], mm8["qk_norm"]) == (
        224,
        64,
        "sigmoid",
        "per_layer",
    )
    assert (mm2["heads"], mm2["kv_heads"], mm2["experts"], mm2["first_expert"]) == (24, 4, 128, 128)
    q8 = out["qwen3-235b-a22b"]["8"]
    assert (q8["heads"], q8["kv_heads"], q8["experts"], q8["scoring"], q8["qk_norm"]) == (
        8,
        1,
        16,
        "softmax",
        "per_head",
    )
    assert "48 query heads do not divide over 5 ranks" in out["refused"]


@pytest.mark.slow  # 1.5 s of CPU a case: an accuracy script in a process
def test_a_shard_file_is_priced_without_communication(tmp_path):
    """A rank timed alone is priced on the tables of the GPU it ran on, with no collective, and its prefill
    also at the model's full depth; a regular TP file keeps its all-reduces."""
    rows = []
    for phase, batch, length in (("prefill", 1, 8192), ("decode", 16, 8192)):
        row = dict(phase=phase, batch=batch, ms=10.0, p10=9.9, p90=10.1, model="minimax-m2.5", layers=4)
        row |= dict(config="tests/data/closed_loop/aiconfigurator/minimax-m2.5/config.json", tp=8, ep=8)
        row |= dict(shard_of=8, rank=0)
        row["seq" if phase == "prefill" else "kv_len"] = length
        rows.append(row)
    shard = tmp_path / "shard.json"
    shard.write_text(json.dumps(dict(provenance=dict(gpu="NVIDIA H100 80GB HBM3"), rows=rows)))
    out = run_accuracy_python([str(ACCURACY / "compare_step_check.py"), str(shard)], tmp_path)
    assert "priced with h100_sxm tables" in out
    assert "prefill b1 s8192 rank 0 of tp8 ep8" in out and "decode b16 kv8192 rank 0 of tp8 ep8" in out
    assert "allreduce" not in out  # with them, the all-reduces would be among the decode step's top ops
    assert "all 62 layers: measured x layers 155.0 ms" in out  # 10 ms for 4 layers
    whole = run_accuracy_python(
        [str(ACCURACY / "compare_step_check.py"), str(ACCURACY / "results" / "tp_step_check_h200.json")],
        tmp_path,
    )
    assert "priced with h200_sxm tables" in whole and "attn_allreduce" in whole
    assert "layers: measured x layers" not in whole
