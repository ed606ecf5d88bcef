"""The status line stays on one terminal row (issue 15); a pipe gets a plain line at a steady interval and the
final one (issue 31), here with a stand-in clock, and from a whole piped bench against the mock server."""

import io
import re
import subprocess
import sys

import pytest

from servelab.bench.progress import LiveLine, RunProgress, Totals


def busy(done: float) -> Totals:
    return Totals(done, 3, 120 * done, 256, 45.25, 97, 0)


def test_live_line_is_cut_to_the_terminal_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    buf = io.StringIO()
    progress = RunProgress(LiveLine(True, buf), 100000)
    for k in range(3):
        progress.update(1000.0 + k, busy(50000.0 + 1000 * k))
    writes = buf.getvalue().split("\r")[1:]
    assert len(writes) == 3 and "\n" not in buf.getvalue()
    for w in writes:
        assert w.endswith("\x1b[K") and len(w.removesuffix("\x1b[K")) <= 79
    progress.finish(1003.0, busy(53000.0))
    assert buf.getvalue().endswith("\x1b[K\n")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_off_a_terminal_a_line_at_each_interval_and_the_final_one():
    buf, clock = io.StringIO(), Clock()
    progress = RunProgress(LiveLine(False, buf, interval_s=10.0, clock=clock), 10)
    for k in range(30):  # 30 s of updates, ten a second
        clock.now = float(k)
        progress.update(0.1 * (k + 1), busy(k / 3))
    lines = buf.getvalue().splitlines()
    # at once, then at 10 s and 20 s: a CI log never goes quiet for longer than the interval
    assert [line.split("]")[0] for line in lines] == ["[   0.1s", "[   1.1s", "[   2.1s"]
    progress.finish(3.0, busy(10))
    assert buf.getvalue().endswith("[   3.0s] 10/10 done  3 failed  3.3 req/s  400 tok/s\n")


def test_interval_zero_writes_only_the_final_line():
    buf = io.StringIO()
    progress = RunProgress(LiveLine(False, buf, interval_s=0), 10)
    for k in range(5):
        progress.update(0.1 * (k + 1), busy(k))
    assert buf.getvalue() == ""
    progress.finish(2.0, busy(10))
    assert buf.getvalue() == "[   2.0s] 10/10 done  3 failed  5.0 req/s  600 tok/s\n"


PROGRESS = re.compile(r"^\[\s*\d+\.\ds\] \d+/6 done ", re.M)


@pytest.mark.slow  # 1.3 s of CPU a case: a whole bench with its load worker processes
def test_a_piped_bench_prints_progress_lines(mock_server, tmp_path):
    # each request takes at least 100 ms + 19 x 50 ms; six at concurrency 2: the load runs 3 s or more, so a
    # line every 0.5 s gives six or more (the default, 10 s, gives three to a 12-second run the same way)
    server = mock_server("--first-token-delay-ms", "100", "--token-delay-ms", "50")
    cmd = [sys.executable, "-m", "servelab.cli.main", "bench", "--base-url", server.url, "--model", "mock",
           "--random-input-len", "8", "--random-output-len", "20", "--num-prompts", "6",
           "--max-concurrency", "2", "--progress-interval", "0.5"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)  # stderr: a pipe
    assert r.returncode == 0, r.stderr
    lines = PROGRESS.findall(r.stderr)
    assert len(lines) >= 4, r.stderr  # three at the interval or more, and the final one
    assert "\r" not in r.stderr and "\x1b" not in r.stderr  # plain lines, no terminal control
