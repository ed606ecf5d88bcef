"""A pytest-xdist run's timeline, printed after `--durations`' list (.ci/run asks for it): each worker's
tests, when it started its first and ended its last, and the longest tests with their worker, start and end.
A CI log then shows which worker ended the run and why, on the CI machine itself."""

from __future__ import annotations

import pytest

LONGEST = 12


class Timeline:
    """Collects each test's worker and its wall-clock span (setup to teardown) from the workers' reports."""

    def __init__(self) -> None:
        self.spans: dict[str, tuple[str, float, float]] = {}

    def pytest_runtest_logreport(self, report) -> None:
        node = getattr(report, "node", None)  # set by pytest-xdist's controller on a worker's report
        if node is None:
            return
        worker, start, stop = self.spans.get(report.nodeid, (node.gateway.id, report.start, report.stop))
        self.spans[report.nodeid] = (worker, min(start, report.start), max(stop, report.stop))

    @pytest.hookimpl(trylast=True)  # after the --durations list
    def pytest_terminal_summary(self, terminalreporter, config) -> None:
        if not self.spans or config.option.durations is None:
            return
        write = terminalreporter.write_line
        t0 = min(start for _, start, _ in self.spans.values())
        write("xdist timeline (seconds after the first test started):")
        for worker in sorted({w for w, _, _ in self.spans.values()}):
            mine = [(start, stop) for w, start, stop in self.spans.values() if w == worker]
            busy = sum(stop - start for start, stop in mine)
            first, last = min(s for s, _ in mine) - t0, max(e for _, e in mine) - t0
            write(f"  {worker}: {len(mine)} tests, {first:.0f} -> {last:.0f} s, busy {busy:.0f} s")
        longest = sorted(self.spans.items(), key=lambda kv: kv[1][1] - kv[1][2])[:LONGEST]
        for nodeid, (worker, start, stop) in longest:
            write(f"  {worker} {start - t0:6.0f} -> {stop - t0:6.0f} s ({stop - start:4.0f} s) {nodeid}")
