"""The timeline a pytest-xdist run prints after --durations (tests/xdist_timeline.py), from the workers'
reports."""

from types import SimpleNamespace

from xdist_timeline import Timeline


def report(nodeid: str, worker: str, start: float, stop: float):
    node = SimpleNamespace(gateway=SimpleNamespace(id=worker))
    return SimpleNamespace(nodeid=nodeid, node=node, start=start, stop=stop)


def summary(timeline: Timeline, durations) -> list[str]:
    lines: list[str] = []
    reporter = SimpleNamespace(write_line=lines.append)
    timeline.pytest_terminal_summary(reporter, SimpleNamespace(option=SimpleNamespace(durations=durations)))
    return lines


def test_each_worker_and_the_longest_tests_from_setup_to_teardown():
    timeline = Timeline()
    for r in (
        report("a", "gw0", 100.0, 101.0),  # setup
        report("a", "gw0", 101.0, 130.0),  # call
        report("a", "gw0", 130.0, 130.5),  # teardown
        report("b", "gw1", 100.5, 104.0),
        report("c", "gw1", 104.0, 150.0),
        SimpleNamespace(nodeid="d", start=0.0, stop=1.0),  # a report of no worker (no pytest-xdist)
    ):
        timeline.pytest_runtest_logreport(r)
    lines = summary(timeline, durations=20)
    assert lines[1:3] == ["  gw0: 1 tests, 0 -> 30 s, busy 30 s", "  gw1: 2 tests, 0 -> 50 s, busy 50 s"]
    assert [line.split()[-1] for line in lines[3:]] == ["c", "a", "b"]
    assert lines[3] == "  gw1      4 ->     50 s (  46 s) c"


def test_nothing_without_durations_or_workers():
    timeline = Timeline()
    assert summary(timeline, durations=20) == []
    timeline.pytest_runtest_logreport(report("a", "gw0", 0.0, 1.0))
    assert summary(timeline, durations=None) == []
