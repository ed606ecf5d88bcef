"""tests/data/vllm_gpu_graphs20: one vLLM 0.25.0 server on one H100, then a second with only
--max-cudagraph-capture-size 1024 added (the Qwen3-30B-A3B-shaped MoE, `--max-num-batched-tokens 4096
--max-num-seqs 32`, the same prompts). At 32 sequences vLLM captures graphs up to 64 tokens, so a step that
carries a prompt's chunk runs eagerly; with 1,024 the same steps replay piecewise graphs. What that costs a
real engine, and that the twin prices the graphed steps as vLLM ran them (their periods from the server's
microsecond-stamped `Iteration` lines, accuracy/vllm_step_periods.py)."""

import json
import re
from pathlib import Path

import pytest

from tests.accuracy_python import ACCURACY, run_accuracy_python

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm_gpu_graphs20"
LIMITS = "--max-num-batched-tokens 4096 --max-num-seqs 32 --gpu-memory-utilization 0.85"
GRAPHED = f"{LIMITS} --max-cudagraph-capture-size 1024"


def measured(folder: str, run: str) -> dict:
    return json.loads((DATA / folder / f"{run}.json").read_text())


def test_a_step_over_the_largest_graph_costs_the_moe_tens_of_milliseconds():
    """One client, the same 717-896-token prompts: eager (graphs to 64 tokens) 105.8 ms to the first token,
    graphed (to 1,024) 40.8 ms; on the graphed server, prompts of 1,040-1,300 tokens (over 1,024: eager)
    107.0 ms against 45.3 ms for 800-1,000. At 80 clients on 32 sequences every prompt-carrying step
    (about 620 tokens) is eager at 64 and graphed at 1,024: TPOT 30.6 against 22.6 ms."""
    eager, graphed = measured("capture64", "h64_c1"), measured("capture1024", "h1k_c1")
    assert eager["config"]["seed"] == graphed["config"]["seed"]  # the same prompts
    assert eager["median_ttft_ms"] > 2 * graphed["median_ttft_ms"]
    over, under = measured("capture1024", "j1k_c1"), measured("capture1024", "i1k_c1")
    assert over["median_ttft_ms"] > 2 * under["median_ttft_ms"]
    busy_eager, busy_graphed = measured("capture64", "e64_c80"), measured("capture1024", "e1k_c80")
    assert busy_eager["median_tpot_ms"] > 1.25 * busy_graphed["median_tpot_ms"]


@pytest.mark.parametrize("run", ["e1k_c80", "g1k_c80"])
def test_the_twin_prices_graphed_prompt_steps_as_vllm_ran_them(run):
    """Steps carrying a prompt's chunk beside up to 31 decodes, 80 clients on 32 sequences: each class's
    median period within 5 % of the twin's price of its steps (e1k: 1.01 and 1.00; g1k: 1.02, 1.02, 1.01)."""
    out = run_accuracy_python(
        [str(ACCURACY / "vllm_step_periods.py"), str(DATA / "capture1024"), "--server-args", GRAPHED]
    )
    section = out.split(f"{run}:")[1].split(":", 1)[0] if f"{run}:" in out else ""
    rows = re.findall(r"prompt\s+\d+-\d+\s+(\d+) /\s+\d+\s+[\d.]+ /\s+[\d.]+\s+([\d.]+)", section)
    classes = [float(ratio) for steps, ratio in rows if int(steps) >= 40]
    assert classes, out
    assert all(0.95 <= r <= 1.05 for r in classes), out


def test_a_folder_without_a_stamped_log_is_one_line_and_status_2(tmp_path):
    err = run_accuracy_python([str(ACCURACY / "vllm_step_periods.py"), str(tmp_path)], returncode=2)
    assert (
        err == f"error: {tmp_path}: expected server.log or server.log.xz (the --log option names another)\n"
    )
    (tmp_path / "server.log").write_text(
        "INFO 12-07 16:48:49 [core.py:452] Iteration(0): 1 context requests\n"
    )
    err = run_accuracy_python([str(ACCURACY / "vllm_step_periods.py"), str(tmp_path)], returncode=2)
    assert "no microsecond-stamped Iteration lines" in err and err.count("\n") == 1
