"""scripts/inferencex_recipes.py, run on a small git history of a recipe script (a stand-in for InferenceX's):
each version's settings, ranges of equal settings merged, and a form it does not know stops it."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "inferencex_recipes.py"
PATH = "benchmarks/dsr1_fp8_h200_trt_slurm.sh"
RECIPE = """#!/usr/bin/env bash
cat > $EXTRA_CONFIG_FILE << EOF
cuda_graph_config:
    enable_padding: true
    max_batch_size: 128
kv_cache_config:
    dtype: fp8
    free_gpu_memory_fraction: 0.75
stream_interval: 10
EOF
if [[ "$DP_ATTENTION" == "true" ]]; then
    cat << EOF >> $EXTRA_CONFIG_FILE
attention_dp_config:
    batching_wait_iters: 0
    enable_balance: true
    timeout_iters: 60
EOF
fi
MAX_NUM_TOKENS=$(( ($CONC+$ISL+64+63)/64*64 ))
{floor}
# trtllm-serve $MODEL --max_num_tokens 99   (a comment: not read)
trtllm-serve $MODEL --max_num_tokens=$MAX_NUM_TOKENS --tp_size=$TP
"""
FLOOR = "MAX_NUM_TOKENS=$(( MAX_NUM_TOKENS > 8192 ? MAX_NUM_TOKENS : 8192 ))"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="the script reads history with git")


def _commit(repo: Path, text: str, date: str) -> None:
    (repo / PATH).write_text(text)
    env = dict(os.environ, GIT_AUTHOR_DATE=f"{date}T12:00:00", GIT_COMMITTER_DATE=f"{date}T12:00:00")
    for args in (["add", PATH], ["commit", "-qm", date]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, env=env, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "ix"
    (repo / "benchmarks").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for key, value in (("user.email", "t@example.com"), ("user.name", "t")):
        subprocess.run(["git", "-C", str(repo), "config", key, value], check=True)
    return repo


def _run(repo: Path, out: Path) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(SCRIPT), "--git-dir", str(repo / ".git"), "--out", str(out)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_versions_become_date_ranges_of_equal_settings(repo, tmp_path):
    _commit(repo, RECIPE.format(floor=""), "2025-09-18")
    _commit(repo, RECIPE.format(floor="") + "\n", "2025-11-03")  # same settings: the same range
    _commit(repo, RECIPE.format(floor=FLOOR), "2026-01-21")
    done = _run(repo, tmp_path / "out.json")
    assert done.returncode == 0, done.stderr
    ranges = json.loads((tmp_path / "out.json").read_text())["recipes"]
    assert [(r["from"], r["until"], len(r["commits"])) for r in ranges] == [
        ("2025-09-18", "2026-01-21", 2),
        ("2026-01-21", None, 1),
    ]
    first, second = ranges[0]["settings"], ranges[1]["settings"]
    assert first["max_num_tokens"] == {"conc_plus_isl_plus": 64, "round_up_to": 64, "at_least": None}
    assert second["max_num_tokens"]["at_least"] == 8192
    assert (first["kv_memory_fraction"], first["cuda_graph_max_batch"], first["kv_cache_dtype"]) == (
        0.75,
        128,
        "fp8",
    )
    assert first["attention_dp_balance"] == {"timeout_iters": 60, "batching_wait_iters": 0}
    assert first["stream_interval"] == 10 and first["max_batch_size"] is None
    assert ranges[0]["models"] == ["deepseek-r1", "deepseek-v3"] and ranges[0]["engine"] == "trtllm"


def test_a_form_it_does_not_know_stops_it(repo, tmp_path):
    _commit(
        repo,
        RECIPE.format(floor="").replace("--max_num_tokens=$MAX_NUM_TOKENS", "--max_num_tokens=$X"),
        "2025-09-18",
    )
    done = _run(repo, tmp_path / "out.json")
    assert done.returncode != 0 and "--max_num_tokens $X" in done.stderr
    assert not (tmp_path / "out.json").exists()
