"""Search one table: exact hits, interpolation between collected points, held utilisation beyond them, and
borrowing from the nearest collected shape.

What is interpolated is log(measured / roofline) -- the log of inverse utilisation -- so a query pays the
roofline's own shape dependence (flops, bytes, tile quantization) and only the kernel's deviation from it is
carried across brackets. Rows are grouped once by the fields that must match (numpy lexsort, no per-row
Python), and a group's points are built on its first query, so loading a large table costs little.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable
from operator import itemgetter
from typing import TYPE_CHECKING, NamedTuple

from servelab.perfdb.families import Space
from servelab.perfdb.table_files import TableData

if TYPE_CHECKING:  # numpy imported when first used (servelab.lazy_numpy says why)
    import numpy as np
else:
    from servelab.lazy_numpy import np

_SPACES: dict[Space, Callable[[float], float]] = {"log": math.log, "sqrt": math.sqrt, "lin": float}
MEMO_ENTRIES = 1 << 16  # answers an index keeps (a plan asks for ~20,000 keys); all dropped beyond


class Answer(NamedTuple):
    """A table's answer for one key: latency, how it was obtained, and how far beyond the data it went."""

    us: float
    kind: str  # measured | interpolated | extrapolated | modelled (from rows the collector modelled)
    beyond: float  # 1.0 inside the data; else the largest ratio by which a queried axis exceeds the data
    row: int = -1  # the row for an exact hit
    borrowed_from: tuple | None = None  # the group a borrowed answer came from


class Line(NamedTuple):
    """Points along one axis: transformed positions (sorted, unique), log ratios, raw min and max."""

    xs: list
    ys: list
    lo: float
    hi: float


def make_line(raw_x: list, ys: list, space: Callable) -> Line:
    """A line from raw axis values and log ratios; repeated positions average (same bytes, other flops)."""
    acc: dict[float, list] = {}
    for x, y in zip(raw_x, ys, strict=False):
        acc.setdefault(float(x), []).append(y)
    xs_raw = sorted(acc)
    return Line(
        [space(x) for x in xs_raw], [sum(acc[x]) / len(acc[x]) for x in xs_raw], xs_raw[0], xs_raw[-1]
    )


def interp_line(line: Line, x_raw: float, space: Callable) -> tuple[float, float]:
    """(log ratio, beyond) at x_raw; beyond the data the boundary value is held."""
    xs, ys = line.xs, line.ys
    if x_raw < line.lo:
        return ys[0], line.lo / x_raw
    if x_raw > line.hi:
        return ys[-1], x_raw / line.hi
    x = space(x_raw)
    i = bisect_left(xs, x)
    if i < len(xs) and xs[i] == x:
        return ys[i], 1.0
    t = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
    return ys[i - 1] + t * (ys[i] - ys[i - 1]), 1.0


class Grid(NamedTuple):
    """Two axes: rows of the outer axis (sorted raw values, transformed), each a Line over the inner axis."""

    outer_raw: list
    outer: list
    lines: list


def make_grid(raw_o: list, raw_x: list, ys: list, so: Callable, sx: Callable) -> Grid:
    rows: dict[float, tuple[list, list]] = {}
    for o, x, y in zip(raw_o, raw_x, ys, strict=False):
        r = rows.setdefault(float(o), ([], []))
        r[0].append(x)
        r[1].append(y)
    outer_raw = sorted(rows)
    return Grid(outer_raw, [so(o) for o in outer_raw], [make_line(*rows[o], sx) for o in outer_raw])


def interp_grid(grid: Grid, o_raw: float, x_raw: float, so: Callable, sx: Callable) -> tuple[float, float]:
    """Interpolate along the inner axis in the two bracketing outer rows, then between them (a tensor-product
    scheme that works on ragged grids, where each batch row covers its own range of sequence lengths)."""
    outer_raw, lines = grid.outer_raw, grid.lines
    if o_raw <= outer_raw[0] or o_raw >= outer_raw[-1] or len(outer_raw) == 1:
        j = 0 if o_raw <= outer_raw[0] else len(outer_raw) - 1
        y, beyond = interp_line(lines[j], x_raw, sx)
        edge = outer_raw[j]
        return y, max(beyond, edge / o_raw if o_raw < edge else o_raw / edge)
    o = so(o_raw)
    i = bisect_left(grid.outer, o)
    if grid.outer[i] == o:
        return interp_line(lines[i], x_raw, sx)
    y0, b0 = interp_line(lines[i - 1], x_raw, sx)
    y1, b1 = interp_line(lines[i], x_raw, sx)
    t = (o - grid.outer[i - 1]) / (grid.outer[i] - grid.outer[i - 1])
    return y0 + t * (y1 - y0), max(b0, b1)


class Group:
    """The rows of one table that share every exactly-matched field; points built on first use."""

    __slots__ = ("exact", "modelled", "points", "points_lat", "raw", "rows")

    def __init__(self, rows: np.ndarray):
        self.rows = rows
        self.points = None  # Line or Grid of log ratios
        self.points_lat = None  # Line or Grid of latencies, for families that interpolate latency
        self.exact: dict = {}
        self.raw: tuple = ()  # (axis value lists, log ratios, latencies, measured flags), for leave-one-out
        self.modelled = False  # some rows were modelled by the collector, not measured


class Index:
    """Answers keys of one family from one table. `reference(key) -> us` is the roofline the ratios are
    taken against."""

    def __init__(self, data: TableData, reference: Callable):
        self.data = data
        self.family = fam = data.family
        self.reference = reference
        self.spaces = tuple(_SPACES[s] for s in fam.spaces)
        self._group_of = itemgetter(*[fam.fields.index(f) for f in fam.group])
        self._axes_of = itemgetter(*[fam.fields.index(f) for f in fam.axes])
        self.groups: dict[tuple, Group] = {}
        self._siblings: dict[
            tuple, list[tuple]
        ] = {}  # non-soft group fields -> groups with soft fields varied
        self._borrow: dict[tuple, tuple | None] = {}
        self._answers: dict = {}  # key -> answer
        self._build_groups()

    # ---- construction ------------------------------------------------------------------------------------
    def _build_groups(self) -> None:
        data, fam = self.data, self.family
        n = len(data)
        if n == 0:
            return
        cols = [data.cols[f] for f in fam.group]
        order = np.lexsort(cols[::-1])
        change = np.zeros(n, dtype=bool)
        change[0] = True
        for c in cols:
            s = c[order]
            change[1:] |= s[1:] != s[:-1]
        starts = np.flatnonzero(change).tolist() + [n]
        soft_pos = [fam.group.index(f) for f in fam.soft]
        for a, b in zip(starts[:-1], starts[1:], strict=False):
            first = int(order[a])
            gkey = tuple(data.cols[f][first].item() for f in fam.group)
            self.groups[gkey] = Group(order[a:b])
            if soft_pos:
                hard = tuple(v for i, v in enumerate(gkey) if i not in soft_pos)
                self._siblings.setdefault(hard, []).append(gkey)

    def _points(self, g: Group):
        if g.points is None:
            data, fam = self.data, self.family
            ys: list[float] = []
            lats: list[float] = []
            flags: list[bool] = []
            axes: list[list[int]] = [[] for _ in fam.axes]
            for i in g.rows.tolist():
                flags.append(data.is_measured(i))
                key = fam.key_type(*data.row_key(i))
                g.exact[key] = i
                lat = float(data.latency_us[i])
                lats.append(lat)
                ys.append(math.log(lat / self.reference(key)))
                for a, f in enumerate(fam.axes):
                    axes[a].append(data.cols[f][i].item())
            g.points = self.build(axes, ys)
            if fam.value == "latency":
                g.points_lat = self.build(axes, lats)
            g.raw = (axes, ys, lats, flags)
            g.modelled = not all(flags)
        return g.points

    def group_log_ratios(self, gkey: tuple) -> tuple[list, list, list, list]:
        """(axis value lists, log ratios, latencies, measured flags) of a group's rows; for leave-one-out."""
        g = self.groups[gkey]
        self._points(g)
        return g.raw

    def build(self, axes: list, ys: list):
        """Points from axis value lists and log ratios (a Line or a Grid)."""
        if len(self.family.axes) == 1:
            return make_line(axes[0], ys, self.spaces[0])
        return make_grid(axes[0], axes[1], ys, *self.spaces)

    # ---- queries -----------------------------------------------------------------------------------------
    def interp(self, points, axes: tuple) -> tuple[float, float]:
        if len(self.family.axes) == 1:
            return interp_line(points, axes[0], self.spaces[0])
        return interp_grid(points, axes[0], axes[1], *self.spaces)

    def predict(self, points, points_lat, axes: tuple, ref_us: float) -> tuple[float, float]:
        """(us, beyond): latency interpolated directly where the family says so and the query is inside the
        data; otherwise the reference times the interpolated (or held) utilisation."""
        if points_lat is not None:
            us, beyond = self.interp(points_lat, axes)
            if beyond == 1.0:
                return us, 1.0
        y, beyond = self.interp(points, axes)
        return ref_us * math.exp(y), beyond

    def answer(self, key) -> Answer | None:
        """The table's answer for key (memoized: a key is asked with and without borrowing, and again for
        every system its answer is carried to); None where no collected group can answer it."""
        if key in self._answers:
            return self._answers[key]
        if len(self._answers) >= MEMO_ENTRIES:
            self._answers.clear()
        found = self._answers[key] = self._answer(key)
        return found

    def _answer(self, key) -> Answer | None:
        gkey = self._group_of(key)
        if not isinstance(gkey, tuple):
            gkey = (gkey,)
        g = self.groups.get(gkey)
        borrowed = None
        if g is None:
            borrowed = self.nearest_group(gkey)
            if borrowed is None:
                return None
            g = self.groups[borrowed]
        points = self._points(g)
        if borrowed is None:
            row = g.exact.get(key)
            if row is not None:
                kind = "measured" if self.data.is_measured(row) else "modelled"
                return Answer(float(self.data.latency_us[row]), kind, 1.0, row)
        axes = self._axes_of(key)
        if not isinstance(axes, tuple):
            axes = (axes,)
        # another group's latencies do not carry over (other heads); its utilisation does
        lat_points = g.points_lat if borrowed is None else None
        us, beyond = self.predict(points, lat_points, axes, self.reference(key))
        if g.modelled:  # row: one of the modelled rows, whose note says how the collector made it
            row = next(i for i in g.rows.tolist() if not self.data.is_measured(i))
            return Answer(us, "modelled", beyond, row, borrowed)
        return Answer(us, "extrapolated" if beyond > 1.0 else "interpolated", beyond, -1, borrowed)

    def nearest_group(self, gkey: tuple, exclude: tuple | None = None) -> tuple | None:
        """The collected group nearest in the soft fields (log distance), the rest matching exactly."""
        if exclude is None and gkey in self._borrow:
            return self._borrow[gkey]
        fam = self.family
        soft_pos = [fam.group.index(f) for f in fam.soft]
        best = None
        if soft_pos:
            hard = tuple(v for i, v in enumerate(gkey) if i not in soft_pos)
            cands = [c for c in self._siblings.get(hard, ()) if c != exclude]
            if cands:

                def dist(c):
                    return (sum(abs(math.log(c[i] / gkey[i])) for i in soft_pos), c)

                best = min(cands, key=dist)
        if exclude is None:
            self._borrow[gkey] = best
        return best

    def describe_group(self, gkey: tuple) -> str:
        fam = self.family
        if fam.buckets:
            return "[" + "][".join(str(gkey[fam.group.index(f)]) for f in fam.soft) + "]"
        return ", ".join(f"{f}={gkey[fam.group.index(f)]}" for f in fam.soft)
