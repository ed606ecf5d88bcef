"""The status line stays on one terminal row, and a pipe gets only the final line (issue 15)."""

import io

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


def test_off_a_terminal_only_the_final_line_is_written():
    buf = io.StringIO()
    progress = RunProgress(LiveLine(False, buf), 10)
    for k in range(5):
        progress.update(0.1 * (k + 1), busy(k))
    assert buf.getvalue() == ""
    progress.finish(2.0, busy(10))
    assert buf.getvalue() == "[   2.0s] 10/10 done  3 failed  5.0 req/s  600 tok/s\n"
