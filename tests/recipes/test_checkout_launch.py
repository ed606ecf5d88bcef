"""Launch flags from the user's checkout: a job whose InferenceX launch script changed gets its launch from
that script (run under bash with stub servers, cached by script hash), the others keep the shipped profiles.

The checkout is a copy of the pinned InferenceX data (tests/data/inferencex: configs/ and the benchmarks/ the
shipped profiles were captured from), with one script edited; the baseline is the sweep of the pinned copy.
"""

import fnmatch
import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli.main import app
from servelab.recipes.capture import sandbox as sandbox_module
from servelab.recipes.capture.cache import CaptureCache
from servelab.recipes.capture.sandbox import Sandbox, stub_sources
from servelab.recipes.engines.profiles import script_sha256

ROOT = Path(__file__).resolve().parents[2]
IX = ROOT / "tests" / "data" / "inferencex"
SCRIPTS = Path("benchmarks") / "single_node" / "fixed_seq_len"
SGLANG = "dsr1_fp8_h200.sh"  # dsr1-fp8-h200-sglang's script
KEYS = "dsr1-fp8-h200-*"
CHANGED_KEY = "dsr1-fp8-h200-sglang"
LAUNCH_FIELDS = ("launch", "fingerprint", "launch-script-changed", "launch-source", "launch-derive-failed")

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="launch scripts run under bash")


def checkout(tmp_path: Path) -> Path:
    """A copy of the pinned InferenceX data laid out as a checkout; returns its root."""
    root = tmp_path / "ix"
    shutil.copytree(IX / "configs", root / "configs")
    shutil.copytree(IX / "benchmarks", root / "benchmarks")
    return root


def edit(root: Path, script: str, old: str, new: str) -> bytes:
    path = root / SCRIPTS / script
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return path.read_bytes()


def sweep(configs: Path, *args: str):
    result = CliRunner().invoke(app, ["sweep", "--dir", str(configs), "--format", "json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


def flags(argv: list[str]) -> list[str]:
    return [t for t in argv if t.startswith("--")]


@pytest.fixture(scope="module")
def baseline():
    """The pinned checkout's jobs: every script is the one its profile was captured from."""
    result = CliRunner().invoke(app, ["sweep", "--dir", str(IX / "configs"), "--format", "json", KEYS])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def captures(cache: Path) -> list[Path]:
    return sorted((cache / "launch-captures").glob("*.json"))


@pytest.mark.slow  # 3.6 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_a_changed_script_gives_its_jobs_the_changed_launch(tmp_path, baseline, _capture_cache):
    root = checkout(tmp_path)
    content = edit(root, SGLANG, "--trust-remote-code", "--trust-remote-code --new-flag")
    content = edit(root, SGLANG, "--mem-fraction-static 0.82", "--mem-fraction-static 0.75")
    jobs, stderr = sweep(root / "configs", KEYS)
    assert len(jobs) == len(baseline)
    changed = [(j, b) for j, b in zip(jobs, baseline, strict=True) if j["config-key"] == CHANGED_KEY]
    assert changed
    for job, before in changed:
        argv = job["launch"]["argv"]
        assert "--new-flag" in argv and argv[argv.index("--mem-fraction-static") + 1] == "0.75"
        # everything else as the shipped profile renders it, in the same order
        expected = [
            "0.75" if t == "0.82" else t for t in before["launch"]["argv"] if t != "--mem-fraction-static"
        ]
        assert [t for t in argv if t not in ("--new-flag", "--mem-fraction-static")] == expected
        assert job["launch"]["env"] == before["launch"]["env"]
        assert job["launch-source"] == f"checkout {script_sha256(content)}"
        assert job["launch-script-changed"]["checkout-sha256"] == script_sha256(content)
        assert "launch-derive-failed" not in job
        assert job["fingerprint"] != before["fingerprint"]
        assert {k: v for k, v in job.items() if k not in LAUNCH_FIELDS} == {
            k: v for k, v in before.items() if k not in LAUNCH_FIELDS
        }
    others = [(j, b) for j, b in zip(jobs, baseline, strict=True) if j["config-key"] != CHANGED_KEY]
    assert all(j == b for j, b in others)  # the other scripts' jobs exactly as before
    assert "warning:" not in stderr
    assert stderr.count(f"{SGLANG} differs from the script") == 1  # one note per script
    assert len(captures(_capture_cache)) == 1


@pytest.mark.slow  # 3.0 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_a_changed_atom_script_gives_its_jobs_the_changed_launch(tmp_path, _capture_cache):
    # ATOM's scripts are derived as the other engines' are: the edited flag, upstream's others, same env
    key, script = "dsr1-fp4-mi355x-atom-mtp", "dsr1_fp4_mi355x_atom_mtp.sh"
    before, _ = sweep(IX / "configs", key)
    root = checkout(tmp_path)
    content = edit(root, script, "--method mtp", "--method mtp --num-speculative-tokens 2")
    jobs, stderr = sweep(root / "configs", key)
    assert jobs and len(jobs) == len(before) and "warning:" not in stderr
    for job, old in zip(jobs, before, strict=True):
        argv = job["launch"]["argv"]
        assert argv[:3] == ["python3", "-m", "atom.entrypoints.openai_server"]
        assert argv[argv.index("--num-speculative-tokens") + 1] == "2"
        assert [t for t in argv if t not in ("--num-speculative-tokens", "2")] == old["launch"]["argv"]
        assert (
            job["launch"]["env"]
            == old["launch"]["env"]
            == {"AMDGCN_USE_BUFFER_OPS": "1", "OMP_NUM_THREADS": "1"}
        )
        assert job["launch-source"] == f"checkout {script_sha256(content)}"


@pytest.mark.slow  # 3.8 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_a_second_sweep_takes_the_captures_from_the_cache(tmp_path, monkeypatch, _capture_cache):
    root = checkout(tmp_path)
    edit(root, SGLANG, "--trust-remote-code", "--trust-remote-code --new-flag")
    runs = []
    real_run = Sandbox.run

    def counted(self, script, env):
        runs.append(script)
        return real_run(self, script, env)

    monkeypatch.setattr(Sandbox, "run", counted)
    first, _ = sweep(root / "configs", KEYS)
    derived = [j for j in first if j.get("launch-source", "").startswith("checkout")]
    assert len(runs) == len(derived) > 0  # one bash run per job of the changed script
    files = captures(_capture_cache)
    assert len(files) == 1 and files[0].name.startswith(derived[0]["launch-source"].split()[1])
    runs.clear()
    second, _ = sweep(root / "configs", KEYS)
    assert runs == [] and second == first
    assert captures(_capture_cache) == files


@pytest.mark.slow  # 2.9 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_a_script_that_fails_under_the_stubs_keeps_the_shipped_launch_and_says_why(tmp_path, baseline):
    root = checkout(tmp_path)
    # a command the stubs do not provide, in a script that stops at the first failure
    edit(root, SGLANG, "set -x\n", "set -e\nprobe_topology_not_in_the_stubs\nset -x\n")
    jobs, stderr = sweep(root / "configs", KEYS)
    changed = [(j, b) for j, b in zip(jobs, baseline, strict=True) if j["config-key"] == CHANGED_KEY]
    assert changed
    for job, before in changed:
        assert job["launch"] == before["launch"] and job["fingerprint"] == before["fingerprint"]
        assert job["launch-source"] == "shipped profile"
        assert "probe_topology_not_in_the_stubs: command not found" in job["launch-derive-failed"]
    warnings = [line for line in stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and SGLANG in warnings[0] and "command not found" in warnings[0]


@pytest.mark.slow  # 1.4 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_a_script_gone_from_the_checkout_keeps_the_shipped_launch(tmp_path, baseline):
    root = checkout(tmp_path)
    (root / SCRIPTS / "dsr1_fp8_h200_trt.sh").unlink()
    jobs, stderr = sweep(root / "configs", KEYS)
    gone = [(j, b) for j, b in zip(jobs, baseline, strict=True) if j["config-key"] == "dsr1-fp8-h200-trt"]
    assert gone
    for job, before in gone:
        assert job["launch"] == before["launch"]
        assert job["launch-derive-failed"] == "not in the checkout"
        assert job["launch-script-changed"]["checkout-sha256"] is None
    assert [line for line in stderr.splitlines() if line.startswith("warning: ")] == [
        line for line in stderr.splitlines() if "dsr1_fp8_h200_trt.sh" in line
    ]


@pytest.mark.slow  # 1.4 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_a_script_that_runs_out_of_time_is_stopped_once(tmp_path, monkeypatch, baseline, _capture_cache):
    monkeypatch.setattr(sandbox_module, "TIMEOUT_S", 1.0)
    root = checkout(tmp_path)
    # (sleep is one of the sandbox's inert commands; a script that waits on anything else hangs)
    edit(root, SGLANG, "set -x\n", "tail -f /dev/null &\ntail -f /dev/null\nset -x\n")
    runs = []
    real_run = Sandbox.run
    monkeypatch.setattr(Sandbox, "run", lambda self, s, env: runs.append(s) or real_run(self, s, env))
    jobs, stderr = sweep(root / "configs", KEYS)
    changed = [(j, b) for j, b in zip(jobs, baseline, strict=True) if j["config-key"] == CHANGED_KEY]
    assert len(changed) > 1 and len(runs) == 1  # the other jobs of that script are not tried again
    for job, before in changed:
        assert job["launch"] == before["launch"]
        assert "timed out after 1 s" in job["launch-derive-failed"]
    assert stderr.count("warning: ") == 1
    assert captures(_capture_cache) == []  # a time-out is not kept: the next sweep tries again


@pytest.mark.slow  # 1.6 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_a_key_servelab_has_no_profile_for_gets_its_launch_from_the_script(tmp_path, baseline):
    # A new key upstream adds with its own script (here a copy of dsr1-fp8-h200-sglang under another model
    # prefix): without the checkout, servelab would render its adapter's flags alone.
    root = checkout(tmp_path)
    master = root / "configs" / "nvidia-master.yaml"
    text = master.read_text()
    block = text[text.index(f"\n{CHANGED_KEY}:\n") + 1 :].split("\n\n", 1)[0]
    new = block.replace(f"{CHANGED_KEY}:", "dsr1x-fp8-h200-sglang:", 1).replace(
        "model-prefix: dsr1", "model-prefix: dsr1x"
    )
    master.write_text(text + "\n" + new + "\n")
    shutil.copy(root / SCRIPTS / SGLANG, root / SCRIPTS / "dsr1x_fp8_h200.sh")
    jobs, stderr = sweep(root / "configs", "dsr1x-fp8-h200-sglang")
    shipped = [b for b in baseline if b["config-key"] == CHANGED_KEY]
    assert len(jobs) == len(shipped) > 0
    for job, before in zip(jobs, shipped, strict=True):
        assert job["launch"] == before["launch"]  # the same script gives the same launch
        assert job["launch-source"].startswith("checkout ")
        assert "launch-script-changed" not in job  # no captured script to differ from
    assert "dsr1x_fp8_h200.sh has no launch profile in servelab" in stderr


@pytest.mark.slow  # 6.2 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_an_unchanged_checkout_runs_no_script(monkeypatch, _capture_cache):
    def refuse(self):
        raise AssertionError("a sandbox was made for an unchanged checkout")

    monkeypatch.setattr(Sandbox, "__enter__", refuse)
    jobs, stderr = sweep(IX / "configs")
    assert len(jobs) == 1820
    # (a multinode job's deployment names the srt-slurm recipe it was rendered from in launch-source)
    single = [j for j in jobs if "deployment" not in j]
    assert not any(k in j for j in single for k in ("launch-source", "launch-derive-failed"))
    assert "warning:" not in stderr and captures(_capture_cache) == []


@pytest.mark.slow  # 3.6 s of CPU a case: whole sweeps of the pinned InferenceX store or checkout
def test_the_derived_launches_equal_what_the_checkouts_script_runs(tmp_path):
    # scripts/ix_launch.py checkout: each job whose script changed, against that script run for the job
    root = checkout(tmp_path)
    edit(root, SGLANG, "--trust-remote-code", "--trust-remote-code --new-flag")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "ix_launch.py"), "checkout", str(root / "configs")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["jobs"] > 0 and got["after"] == got["from-checkout"] == got["jobs"] and got["before"] == 0


def test_the_cache_is_written_whole_and_merged(tmp_path):
    one, two = CaptureCache(tmp_path), CaptureCache(tmp_path)
    one.save("a" * 64, "c" * 64, "s.sh", {"job1": {"argv": ["x"]}})
    two.save("a" * 64, "c" * 64, "s.sh", {"job2": {"argv": ["y"]}})
    assert one.load("a" * 64, "c" * 64) == {"job1": {"argv": ["x"]}, "job2": {"argv": ["y"]}}
    assert [p.name for p in (tmp_path / "launch-captures").iterdir()] == [one.path("a" * 64, "c" * 64).name]
    one.path("a" * 64, "c" * 64).write_text("{not json")
    assert one.load("a" * 64, "c" * 64) == {}  # a damaged file is no cache, not an error
    assert one.load("b" * 64, "c" * 64) == {}


def test_the_stubs_ship_in_the_wheel():
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    patterns = package_data["servelab"]
    for name in stub_sources():
        rel = f"recipes/capture/{name}"
        assert name.endswith(".py") or any(fnmatch.fnmatch(rel, p) for p in patterns), rel
