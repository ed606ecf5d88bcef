"""The order of a run's units on pytest-xdist's queue (tests/xdist_order.py), on collected ids as a worker
has them once each grouped test's id carries its `@group`."""

from dataclasses import dataclass

from xdist_order import end_to_end_first


@dataclass
class Collected:
    """What the order reads of a collected test: its id, and whether it is marked e2e."""

    nodeid: str
    e2e: bool = False

    def get_closest_marker(self, name: str):
        return name if name == "e2e" and self.e2e else None


RUN = [
    Collected("tests/a.py::one"),
    Collected("tests/e2e/b.py::shared_1@vllm-cpu", e2e=True),
    Collected("tests/e2e/c.py::own", e2e=True),
    Collected("tests/r.py::ref_1@ix-refs"),
    Collected("tests/h.py::held_1@ix-refs-heldout"),
    Collected("tests/r.py::ref_2@ix-refs"),
    Collected("tests/e2e/b.py::shared_2@vllm-cpu", e2e=True),
    Collected("tests/h.py::held_2@ix-refs-heldout"),
    Collected("tests/r.py::ref_3@ix-refs"),
    Collected("tests/z.py::two[1]"),
]


def ids(items: list[Collected]) -> list[str]:
    return [item.nodeid.split("::")[1] for item in items]


def test_the_end_to_end_units_first_then_the_largest_a_group_together():
    assert ids(end_to_end_first(RUN)) == [
        "shared_1@vllm-cpu", "shared_2@vllm-cpu", "own",  # the e2e units, the larger first
        "ref_1@ix-refs", "ref_2@ix-refs", "ref_3@ix-refs",
        "held_1@ix-refs-heldout", "held_2@ix-refs-heldout",
        "one", "two[1]",  # units of one test, in collection order
    ]  # fmt: skip


def test_while_the_engine_installs_each_worker_starts_on_one_of_the_largest_other_units():
    assert ids(end_to_end_first(RUN, ahead=2)) == [
        "ref_1@ix-refs", "ref_2@ix-refs", "ref_3@ix-refs",
        "held_1@ix-refs-heldout", "held_2@ix-refs-heldout",
        "shared_1@vllm-cpu", "shared_2@vllm-cpu", "own",
        "one", "two[1]",
    ]  # fmt: skip
