"""`servelab bench` as a process among others: identical runs at once lose nothing, a taken result path is
refused before the run, and signals leave a result and no worker behind."""

import json
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "servelab.cli.main", "bench"]


def bench_cmd(url: str, result_dir: Path, *args: str) -> list[str]:
    return CLI + [
        "--base-url",
        url,
        "--model",
        "mock",
        "--random-input-len",
        "8",
        "--random-output-len",
        "8",
        "--no-ready-check",
        "--save-result",
        "--result-dir",
        str(result_dir),
        *args,
    ]


def test_identical_runs_at_once_keep_both_results(mock_server, tmp_path):
    s = mock_server("--token-delay-ms", "5")
    cmd = bench_cmd(s.url, tmp_path, "--num-prompts", "40", "--max-concurrency", "4", "--num-workers", "1")
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    results = sorted(tmp_path.glob("*.json"))
    assert len(results) == 2, sorted(p.name for p in tmp_path.iterdir())
    for path in results:
        r = json.loads(path.read_text())
        assert r["completed"] == 40 and r["failed"] == 0
        assert len(Path(r["records_file"]).read_text().splitlines()) == 40
    assert {r.name for r in results} | {
        Path(json.loads(r.read_text())["records_file"]).name for r in results
    } == {p.name for p in tmp_path.iterdir()}  # nothing else left: no records folder, no temporary file


def test_taken_result_paths_are_refused_before_the_run(tmp_path):
    (tmp_path / "d.json").mkdir()
    (tmp_path / "old.json").write_text('{"completed": 7}')
    (tmp_path / "file").write_text("")
    url = "http://127.0.0.1:9"  # nothing listens: the run must not even start
    for args, expected in [
        (("--result-filename", "d.json"), "is a directory"),
        (("--result-filename", "old.json"), "exists"),
    ]:
        p = subprocess.run(bench_cmd(url, tmp_path, *args), capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and p.stderr.startswith("error: --result-filename"), p.stderr
        assert expected in p.stderr and len(p.stderr.splitlines()) == 1
    p = subprocess.run(bench_cmd(url, tmp_path / "file"), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "not a directory" in p.stderr and len(p.stderr.splitlines()) == 1
    assert (tmp_path / "old.json").read_text() == '{"completed": 7}'
