"""`servelab run` as users type it, attached to the mock server, its stderr a pipe (as in CI): a line at each
stage boundary, assertions on stages left out by --stages skipped (exit 0), and --resume of a finished run
printing its stored table."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")
pytestmark = pytest.mark.timeout(300)  # hang guard only


def servelab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "servelab.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": SRC, "COLUMNS": "200"},
    )


@pytest.mark.slow  # 4.7 s of CPU a case: a whole servelab run with its server processes
def test_stages_left_out_skip_their_assertions_and_resume_prints_the_table(
    tmp_path, mock_url, write_workload
):
    write_workload(
        tmp_path / "wl.yaml",
        bfcl={"test_categories": ["simple_python"]},
        assertions=["bench.completed >= 4", "bfcl.overall.accuracy >= 0.5"],
    )
    r = servelab(
        "run", "wl.yaml", "--base-url", mock_url, "--stages", "bench", "--store", "r.db", cwd=tmp_path
    )
    assert r.returncode == 0, r.stdout + r.stderr
    said = [line.split(": ", 1)[1] for line in r.stderr.splitlines() if line.startswith("run ")]
    # each stage's start and end said as it happens (stderr is a pipe here, as in a CI log)
    assert said[:2] == [f"server: attaching to {mock_url}", f"server: ready at {mock_url}, model mock-model"]
    assert said[2:6] == ["bench s-conc-1: running", "bench s-conc-1: pass", "bench s-conc-2: running",
                         "bench s-conc-2: pass"]  # fmt: skip
    assert "bfcl.overall.accuracy >= 0.5" in r.stdout and "skipped" in r.stdout
    run_id = r.stdout.strip().splitlines()[-1].split()[2]
    first_table = r.stdout[: r.stdout.index("pass: run")]
    again = servelab("run", "wl.yaml", "--base-url", mock_url, "--stages", "bench", "--store", "r.db",
                     "--resume", run_id, cwd=tmp_path)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "nothing to run, the stored results follow" in again.stderr
    assert again.stdout[: again.stdout.index("pass: run")] == first_table  # the same stored table
    # the answer for programs: schema servelab.run (docs/output.md), the skipped assertion in it
    as_json = servelab("run", "wl.yaml", "--base-url", mock_url, "--stages", "bench", "--store", "r.db",
                       "--resume", run_id, "--json", cwd=tmp_path)  # fmt: skip
    data = json.loads(as_json.stdout)
    assert (data["schema"], data["schema_version"], data["run_id"]) == ("servelab.run", 1, run_id)
    assert [a["outcome"] for a in data["assertions"]] == ["pass", "skipped"]
