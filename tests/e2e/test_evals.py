"""The GSM8K and BFCL stages end to end against the real CPU vLLM serving the tiny random model: the stages
run and produce their metrics (a random model scores about zero, so only their presence and range are
checked; tests/run checks the scores against servers that answer right and wrong)."""

import json

import pytest

from servelab.recipes.workload import WlBfcl, WlModelArgs, WlTask
from servelab.run.bfcl import PYTHON_ENV, bfcl_python, run_bfcl
from servelab.run.gsm8k import run_gsm8k
from servelab.run.stage import Target
from servelab.runner.vllm_cpu import VllmCpuServer

pytestmark = pytest.mark.e2e

QUESTIONS = [
    ("Tom has 3 apples and buys 4 more. How many apples does he have?", "3 + 4 = 7\n#### 7"),
    ("A box holds 12 pens. How many pens are in 3 boxes?", "12 * 3 = 36\n#### 36"),
    ("Ann had 50 stickers and gave away 18. How many are left?", "50 - 18 = 32\n#### 32"),
]


@pytest.fixture(scope="module")
def tool_server(vllm_venv_python, tiny_llama, tmp_path_factory):
    """The tiny model with tool calling on (BFCL sends tools), answers capped at 64 tokens for speed."""
    args = [
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--override-generation-config",
        json.dumps({"max_new_tokens": 64}),
    ]
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    # a second server beside the session's, started on a busy 2-core machine: allow it time
    with VllmCpuServer(
        vllm_venv_python, tiny_llama, extra_args=args, log_path=log, start_timeout_s=900
    ) as server:
        yield server


def test_gsm8k_stage_against_vllm(tool_server, tiny_llama, tmp_path):
    pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install '.[evals]')")
    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in QUESTIONS))
    task = WlTask(
        name="gsm8k",
        num_fewshot=1,
        model_args=WlModelArgs(num_concurrent=3, max_gen_toks=32, max_length=4096),
    )
    defaults = WlModelArgs(tokenized_requests=False, tokenizer_backend=None, timeout=120)
    target = Target(tool_server.url, tool_server.model, tokenizer=str(tiny_llama))
    out = run_gsm8k(target, task, defaults, tmp_path / "out", data)
    assert out.metrics["num_questions"] == len(QUESTIONS)
    for name in ("exact_match", "exact_match_flexible"):
        assert 0.0 <= out.metrics[name] <= 1.0
    assert all(p.is_file() for p in out.artifacts)


@pytest.mark.skipif(
    bfcl_python() is None, reason=f"no BFCL environment (scripts/setup_bfcl.sh, or {PYTHON_ENV})"
)
def test_bfcl_stage_against_vllm(tool_server, tmp_path):
    categories = ["simple_python", "multiple", "parallel", "parallel_multiple", "multi_turn"]
    spec = WlBfcl(
        test_categories=categories,
        max_test_cases={**dict.fromkeys(categories[:4], 2), "multi_turn": 4},
        num_threads=4,
        maximum_step_limit=3,
    )
    out = run_bfcl(Target(tool_server.url, tool_server.model), spec, tmp_path)
    for category in [*categories, "overall"]:
        assert 0.0 <= out.metrics[f"{category}.accuracy"] <= 1.0
    assert out.metrics["multi_turn.num_cases"] == 4
    assert out.metrics["overall.inference_errors"] < sum(
        out.metrics[f"{c}.num_cases"] for c in categories
    )  # most cases reached the model (a long-context case may exceed the tiny server's 4096 tokens)
