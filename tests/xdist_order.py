"""The order pytest-xdist's loadgroup scheduler queues a run's units in (tests/conftest.py sets it on each
worker; pyproject.toml turns pytest-xdist's own reordering off)."""

from collections import Counter


def xdist_unit(item) -> str:
    """What pytest-xdist's loadgroup scheduler hands a worker as one unit: the test's group, else the test."""
    nodeid = item.nodeid
    return nodeid.split("@")[-1] if nodeid.rfind("@") > nodeid.rfind("]") else nodeid


def end_to_end_first(items: list, ahead: int = 0) -> list:
    """The order pytest-xdist queues the units in (pyproject.toml turns its own reordering off): the units
    with an end-to-end test first, after the `ahead` largest others, then the rest as pytest-xdist orders
    them (the largest units first, ties in collection order); a unit's tests keep their order. The end-to-end
    tests start real CPU vLLMs, minutes each: queued by size, the shared server's group came after the
    InferenceX refs groups and ended CI's run on one worker while the other idled."""
    units = [xdist_unit(item) for item in items]
    size = Counter(units)
    first = {unit: n for n, unit in reversed(list(enumerate(units)))}
    end_to_end = {unit for unit, item in zip(units, items, strict=True) if item.get_closest_marker("e2e")}
    others = sorted(set(units) - end_to_end, key=lambda unit: (-size[unit], first[unit]))
    lead = set(others[:ahead])

    def place(n: int) -> tuple:
        unit = units[n]
        return unit not in lead, unit not in end_to_end, -size[unit], first[unit]

    return [items[n] for n in sorted(range(len(items)), key=place)]
