"""A full disk under `bench --save-result`: the records file stops taking records mid-run. The run neither
stalls nor loses them (each worker keeps what its file refused in memory and hands it over with its
summary); the result goes to the temporary folder when --result-dir cannot take it, said in one line and
exit 1 (not 0: CI must not read it as saved); SIGTERM or Ctrl-C then keeps what was measured the same way.

The full disk is a real one where this process may mount a small tmpfs (root); the records writer is also
tried on /dev/full, which needs no privilege."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fuzzkit import TRACEBACK, tried

from servelab.bench.client import RequestState
from servelab.bench.merge import merge_records
from servelab.bench.records import RecordWriter
from servelab.bench.worker import WorkItem

SRC = Path(__file__).resolve().parents[2] / "src"
GUARD_S = 300  # hang guard only: the runs take seconds


def _state(key: int) -> RequestState:
    st = RequestState(WorkItem(key, b"{}", 4), b"{}", 0.0, 0.0)
    st.sent = st.end = 0.001
    st.usage = {"prompt_tokens": 4, "completion_tokens": 2}
    return st


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_a_records_file_on_a_full_disk_keeps_its_records_in_memory(tmp_path):
    """/dev/full takes nothing: every record after the first failing write is kept, once, in order."""
    out = open("/dev/full", "w", buffering=64)  # noqa: SIM115  # closed below
    writer = RecordWriter(out, 0, keep_text=False)
    for key in range(50):
        writer.request(_state(key))
        if key % 7 == 0:
            writer.flush()
    left = writer.leftover()
    assert "No space left" in left["records_error"]
    kept = [r["i"] for r in left["records_kept"]]
    assert kept == list(range(50))
    try:
        out.close()
    except OSError:
        pass  # what its buffer still held: the same records, kept
    # a record the file took in part and the memory holds whole counts once
    part = tmp_path / "worker-0.jsonl"
    part.write_text(json.dumps(left["records_kept"][0]) + "\n" + '{"i": 1, "w"')
    assert [r["i"] for r in merge_records([part], left["records_kept"])] == list(range(50))
    tried(2)


def _can_mount() -> bool:
    return os.geteuid() == 0 and Path("/proc/filesystems").read_text().count("tmpfs") > 0


@pytest.fixture
def full_disk(tmp_path):
    """A 128 KiB tmpfs: the records of a few hundred requests fill it."""
    if not _can_mount():
        pytest.skip("mounting a small tmpfs needs root; the /dev/full test covers the writer")
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=True)


def _bench(url: str, result_dir: Path, spare: Path, prompts: int) -> subprocess.Popen:
    argv = [sys.executable, "-m", "servelab.cli.main", "bench", "--base-url", url, "--model", "m",
            "--num-prompts", str(prompts), "--num-workers", "1", "--random-input-len", "16",
            "--random-output-len", "64", "--request-rate", "200", "--save-result", "--save-detailed",
            "--result-dir", str(result_dir), "--progress-interval", "1"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(SRC), "TMPDIR": str(spare)}
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _saved(spare: Path) -> tuple[dict, int]:
    [result] = [p for p in (spare / "servelab-results").glob("*.json")]
    records = result.with_name(result.stem + ".requests.jsonl")
    return json.loads(result.read_text()), len(records.read_text().splitlines())


@pytest.mark.slow  # 2.7 s of CPU a case: a whole bench on a full disk
def test_a_disk_full_mid_bench_neither_stalls_nor_loses_the_result(full_disk, mock_server, tmp_path):
    spare = tmp_path / "spare"
    spare.mkdir()
    proc = _bench(mock_server, full_disk, spare, 600)
    out, err = proc.communicate(timeout=GUARD_S)
    assert TRACEBACK not in err and "internal error" not in err, err
    assert proc.returncode == 1, err
    assert f"could not be saved in {full_disk}: No space left on device" in err, err
    result, lines = _saved(spare)
    assert result["completed"] == 600 and lines == 600
    assert list(full_disk.iterdir()) == []  # nothing half-written left behind
    tried()


@pytest.mark.slow  # 3.7 s of CPU a case: a whole bench on a full disk
def test_sigterm_on_a_full_disk_keeps_what_was_measured(full_disk, mock_server, tmp_path):
    spare = tmp_path / "spare"
    spare.mkdir()
    proc = _bench(mock_server, full_disk, spare, 20_000)
    deadline = time.monotonic() + GUARD_S
    while os.statvfs(full_disk).f_bavail > 0:  # the records filled it: the run goes on regardless
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.2)
    time.sleep(2)  # requests measured after the disk filled
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=GUARD_S)
    assert TRACEBACK not in err and "internal error" not in err, err
    assert proc.returncode == 128 + signal.SIGTERM, err
    result, lines = _saved(spare)
    assert result["interrupted"] is True
    assert result["completed"] > 0 and lines == 20_000  # every request: measured, failed or not sent
    tried()
