"""Print how many hostile inputs the fuzz suite tried (fuzzkit.COUNTS) at the end of the session.

The harness lives in fuzzkit.py: a test module's `from conftest import ...` could find another folder's
conftest, since the tests folders are not packages."""

from fuzzkit import COUNTS


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not COUNTS["tried"]:
        return
    stats = terminalreporter.stats
    xfailed = len(stats.get("xfailed", []))
    failed = len([r for r in stats.get("failed", []) if "tests/fuzz" in r.nodeid])
    terminalreporter.write_line(
        f"fuzz: {COUNTS['tried']} hostile inputs tried; {xfailed} xfail pending (fixed in other branches); "
        f"{failed} failed"
    )
