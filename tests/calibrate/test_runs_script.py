"""scripts/inferencex_runs.py, run on a small git history standing in for InferenceX's: each commit that adds
changelog entries is a run of the config keys they name (`*` patterns resolved against the master configs of
that commit), with the keys' deployment, speculative decoding and search space; `[skip-sweep]` commits,
commits deleting a changelog line, multinode keys and other hardware are left out."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "inferencex_runs.py"
MASTER = ".github/configs/nvidia-master.yaml"
CONFIGS = """
dsr1-fp8-h200-trt:
  image: nvcr.io#nvidia/tensorrt-llm/release:1.1.0rc2.post2
  model: deepseek-ai/DeepSeek-R1-0528
  model-prefix: dsr1
  runner: h200
  precision: fp8
  framework: trt
  multinode: false
  seq-len-configs:
  - isl: 1024
    osl: 1024
    search-space:
    - { tp: 8, ep: 8, conc-start: 4, conc-end: 64 }
    - { tp: 4, ep: 4, conc-list: [8, 32] }
dsr1-fp8-h200-trt-mtp:
  image: nvcr.io#nvidia/tensorrt-llm/release:1.1.0rc2.post2
  model: deepseek-ai/DeepSeek-R1-0528
  model-prefix: dsr1
  runner: h200
  precision: fp8
  framework: trt
  multinode: false
  seq-len-configs:
  - isl: 1024
    osl: 1024
    search-space:
    - { tp: 8, ep: 8, conc-start: 4, conc-end: 64, spec-decoding: mtp }
    - { tp: 8, ep: 8, dp-attn: true, conc-start: 128, conc-end: 256, spec-decoding: mtp }
dsr1-fp8-h200-dynamo-trt:
  model: deepseek-ai/DeepSeek-R1-0528
  runner: h200-multinode-slurm
  precision: fp8
  framework: dynamo-trt
  multinode: true
dsr1-fp8-mi300x-sglang:
  model: deepseek-ai/DeepSeek-R1-0528
  runner: mi300x
  precision: fp8
  framework: sglang
  multinode: false
"""

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="the script reads history with git")


def _entry(*keys: str) -> str:
    listed = "".join(f"    - {k}\n" for k in keys)
    return f'\n- config-keys:\n{listed}  description:\n    - "a change"\n'


def _commit(repo: Path, files: dict[str, str], message: str, stamp: str) -> None:
    env = dict(os.environ, GIT_AUTHOR_DATE=stamp, GIT_COMMITTER_DATE=stamp)
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
        subprocess.run(["git", "-C", str(repo), "add", path], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", message], check=True, env=env)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "ix"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for key, value in (("user.email", "t@example.com"), ("user.name", "t")):
        subprocess.run(["git", "-C", str(repo), "config", key, value], check=True)
    log = _entry("dsr1-fp8-h200-trt")
    _commit(repo, {MASTER: CONFIGS, "perf-changelog.yaml": log}, "start", "2026-01-10T09:00:00+0000")
    log += _entry("dsr1-fp8-h200-trt-m*")  # a pattern, as InferenceX's changelog allows
    _commit(repo, {"perf-changelog.yaml": log}, "Add MTP (#392)", "2026-01-14T22:26:18+0000")
    log += _entry("dsr1*")  # the multinode and AMD keys are not kept
    _commit(repo, {"perf-changelog.yaml": log}, "full sweep", "2026-01-28T06:18:41+0000")
    log += _entry("dsr1-fp8-h200-trt")
    _commit(repo, {"perf-changelog.yaml": log}, "reword [skip-sweep]", "2026-01-29T10:00:00+0000")
    log = log.replace('"a change"', '"reworded"', 1) + _entry("dsr1-fp8-h200-trt")
    _commit(repo, {"perf-changelog.yaml": log}, "deletes a line", "2026-01-30T10:00:00+0000")
    return repo


def test_each_changelog_commit_is_a_run_of_the_keys_it_added(repo, tmp_path):
    out = tmp_path / "runs.json"
    argv = [
        sys.executable,
        str(SCRIPT),
        "--git-dir",
        str(repo / ".git"),
        "--since",
        "2026-01-01",
        "--out",
        str(out),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert doc["_provenance"]["commit"] == head.stdout.strip()
    # the first commit has no parent to diff against: InferenceX ran nothing for it either
    runs = [(r["time"], r["subject"], sorted(r["keys"])) for r in doc["runs"]]
    assert runs == [
        ("2026-01-14T22:26:18Z", "Add MTP (#392)", ["dsr1-fp8-h200-trt-mtp"]),
        ("2026-01-28T06:18:41Z", "full sweep", ["dsr1-fp8-h200-trt", "dsr1-fp8-h200-trt-mtp"]),
    ]
    mtp = doc["runs"][0]["keys"]["dsr1-fp8-h200-trt-mtp"]
    assert mtp == {
        "framework": "trt",
        "runner": "h200",
        "model": "deepseek-ai/DeepSeek-R1-0528",
        "model_prefix": "dsr1",
        "precision": "fp8",
        "spec_decoding": "mtp",
        "image": "nvcr.io#nvidia/tensorrt-llm/release:1.1.0rc2.post2",
        "search_space": [[1024, 1024, 4, 64, "mtp"], [1024, 1024, 128, 256, "mtp"]],
    }
    plain = doc["runs"][1]["keys"]["dsr1-fp8-h200-trt"]
    assert plain["spec_decoding"] == "none"
    # a concurrency list is one entry per value
    assert plain["search_space"] == [
        [1024, 1024, 4, 64, "none"],
        [1024, 1024, 8, 8, "none"],
        [1024, 1024, 32, 32, "none"],
    ]
