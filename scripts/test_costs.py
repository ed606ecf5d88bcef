"""Where the test suite's CPU goes: a pytest plugin that charges each test its CPU, children included, and a
summary of what it wrote.

    PYTHONPATH=scripts python -m pytest -p test_costs --costs-dir DIR -m "not slow" -n auto ...
    python scripts/test_costs.py DIR [--top 40]

For each test (setup, call and teardown together) the plugin writes one JSON line: the CPU of the test's
process (`time.process_time`), the CPU of the child processes that ended and were waited for meanwhile
(`getrusage(RUSAGE_CHILDREN)`, user + sys: a CLI process, a server the test stopped) and the wall time. Each
pytest-xdist worker writes a file of its own, and a line for its collection. CPU, not wall, because the
machine is shared: another job's load stretches a test's wall time, not its CPU. A child still running when a
test ends (a session's server) is charged to whichever test was running when it was waited for, or to none.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Costs:
    def __init__(self, folder: Path, worker: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.out = (folder / f"costs-{worker}.jsonl").open("a")
        self.start_cpu, self.start_children = time.process_time(), children_cpu()

    def write(self, nodeid: str, cpu: float, children: float, wall: float) -> None:
        seconds = {"cpu": cpu, "children": children, "wall": wall}
        line = {"nodeid": nodeid} | {k: round(v, 4) for k, v in seconds.items()}
        self.out.write(json.dumps(line) + "\n")
        self.out.flush()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        cpu, children, wall = time.process_time(), children_cpu(), time.perf_counter()
        yield
        self.write(
            item.nodeid,
            time.process_time() - cpu,
            children_cpu() - children,
            time.perf_counter() - wall,
        )

    def pytest_collection_finish(self) -> None:
        # the process's start, imports and collection, up to the first test
        self.write("<collection>", time.process_time(), children_cpu() - self.start_children, 0.0)

    def pytest_unconfigure(self) -> None:
        self.write("<process total>", time.process_time(), children_cpu(), 0.0)
        self.out.close()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--costs-dir", help="write each test's CPU, children included, under this folder")


def pytest_configure(config: pytest.Config) -> None:
    folder = config.getoption("--costs-dir")
    if not folder:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None and getattr(config.option, "numprocesses", None):
        return  # xdist's controller runs no test: its workers write
    config.pluginmanager.register(Costs(Path(folder), worker or "main"), "test_costs_recorder")


def read(folder: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(folder.glob("costs-*.jsonl")) for line in path.open()]


def module_of(nodeid: str) -> str:
    return nodeid.split("::")[0]


def summary(rows: list[dict], top: int) -> str:
    tests = [r for r in rows if not r["nodeid"].startswith("<")]
    totals = [r for r in rows if r["nodeid"] == "<process total>"]
    collections = [r for r in rows if r["nodeid"] == "<collection>"]
    by_module: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for r in tests:
        entry = by_module[module_of(r["nodeid"])]
        entry[0] += r["cpu"] + r["children"]
        entry[1] += r["cpu"]
        entry[2] += r["children"]
        entry[3] += 1
    charged = sum(r["cpu"] + r["children"] for r in tests)
    lines = [
        f"{len(tests)} tests in {len(totals)} process(es); CPU charged to tests {charged:.1f} s "
        f"(own {sum(r['cpu'] for r in tests):.1f} s, children {sum(r['children'] for r in tests):.1f} s)",
        f"collection (start, imports, collecting): {sum(r['cpu'] for r in collections):.1f} s",
        f"the processes' whole CPU, children included: {sum(r['cpu'] + r['children'] for r in totals):.1f} s",
        "",
        f"top {top} modules by CPU (s): total  own  children  tests",
    ]
    ranked = sorted(by_module.items(), key=lambda kv: -kv[1][0])
    lines += [f"{t:8.1f} {o:8.1f} {c:8.1f} {int(n):5d}  {m}" for m, (t, o, c, n) in ranked[:top]]
    lines += ["", f"top {top} tests by CPU (s): total  own  children  wall"]
    ranked_tests = sorted(tests, key=lambda r: -(r["cpu"] + r["children"]))
    for r in ranked_tests[:top]:
        total = r["cpu"] + r["children"]
        lines.append(f"{total:8.2f} {r['cpu']:8.2f} {r['children']:8.2f} {r['wall']:8.2f}  {r['nodeid']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="Summarise the CPU the test_costs plugin recorded.")
    parser.add_argument("folder", type=Path, help="the --costs-dir of the run")
    parser.add_argument("--top", type=int, default=40, help="how many modules and tests to list")
    args = parser.parse_args()
    if not args.folder.is_dir():
        parser.exit(2, f"folder: {args.folder} is not a folder of test_costs files\n")
    print(summary(read(args.folder), args.top))


if __name__ == "__main__":
    main()
