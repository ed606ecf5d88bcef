"""plotly figures built as the plain JSON plotly.js reads, not as `plotly.graph_objects`.

A `go.Figure` runs plotly's validators on every property it is given, and `make_subplots` builds its grid
through them too: most of a report's rendering time (docs/benchmarks.md). The dicts here are what those
objects would emit (`to_plotly_json()`), which tests/report checks against plotly itself: the default
template, a subplot grid placed as `make_subplots` places it, scatter traces without the properties left
unset.
"""

from __future__ import annotations

import functools
import json
import pkgutil
from typing import Any

Figure = dict[str, Any]  # {'data': [trace, ...], 'layout': {...}}, as `go.Figure.to_plotly_json()` gives
TITLE_FONT = {"size": 16}  # a subplot title's font, as make_subplots sets it


@functools.cache
def _template_json() -> bytes:
    # plotly's default template, read as plotly itself reads it (plotly.io.templates), without building and
    # validating a `go.layout.Template` from it (about 90 ms)
    data = pkgutil.get_data("plotly", "package_data/templates/plotly.json")
    if data is None:
        raise FileNotFoundError("plotly's default template (package_data/templates/plotly.json)")
    return data


def template() -> dict[str, Any]:
    """plotly's default template ('plotly'), which every `go.Figure` carries in its layout; a fresh copy."""
    return json.loads(_template_json())


def figure(layout: dict[str, Any] | None = None) -> Figure:
    """An empty figure with the default template, as `go.Figure(layout=layout)` has."""
    return {"data": [], "layout": {"template": template(), **(layout or {})}}


def scatter(**props: Any) -> dict[str, Any]:
    """A scatter trace; properties given as None are left unset, as `go.Scatter` leaves them."""
    return {"type": "scatter", **{k: v for k, v in props.items() if v is not None}}


def axis_ids(row: int, col: int, cols: int) -> tuple[str, str]:
    """The x and y axes of a grid cell (1-based, numbered row by row from the top left): 'x', 'x2', ..."""
    n = (row - 1) * cols + col
    suffix = "" if n == 1 else str(n)
    return f"x{suffix}", f"y{suffix}"


def add_trace(fig: Figure, trace: dict[str, Any], row: int, col: int, cols: int) -> None:
    """`trace` in the grid cell (row, col) of a figure from `subplot_grid`."""
    x, y = axis_ids(row, col, cols)
    fig["data"].append({**trace, "xaxis": x, "yaxis": y})


def _spans(n: int, spacing: float) -> list[tuple[float, float]]:
    """n equal spans of [0, 1] with `spacing` between neighbours, from 0 upwards."""
    sizes = [(1.0 - spacing * (n - 1)) / n] * n
    starts = [sum(sizes[:k]) + k * spacing for k in range(n)]
    return [(start, start + size) for start, size in zip(starts, sizes, strict=True)]


def _layout_key(axis_id: str) -> str:
    return f"{axis_id[0]}axis{axis_id[1:]}"  # 'x2' -> 'xaxis2'


def subplot_grid(
    rows: int, cols: int, titles: list[str], horizontal_spacing: float | None = None
) -> dict[str, Any]:
    """The layout of a grid of x-y subplots with a title over each, placed as `make_subplots(rows, cols,
    subplot_titles=titles, horizontal_spacing=...)` places them: its default spacings (0.2 / cols across;
    0.5 / rows down, as with titles), row 1 at the top, a height's end rounded into [0, 1] as it rounds it."""
    xs = _spans(cols, 0.2 / cols if horizontal_spacing is None else horizontal_spacing)
    ys = [(y0, min(max(y1, 0.0), 1.0)) for y0, y1 in reversed(_spans(rows, 0.5 / rows))]
    layout: dict[str, Any] = {"annotations": []}
    for r in range(rows):
        for c in range(cols):
            x, y = axis_ids(r + 1, c + 1, cols)
            layout[_layout_key(x)] = {"anchor": y, "domain": list(xs[c])}
            layout[_layout_key(y)] = {"anchor": x, "domain": list(ys[r])}
    for k, text in enumerate(titles):
        (x0, x1), (_, y1) = xs[k % cols], ys[k // cols]
        layout["annotations"].append(
            {"y": y1, "xref": "paper", "x": (x0 + x1) / 2.0, "yref": "paper", "text": text,
             "showarrow": False, "font": dict(TITLE_FONT), "xanchor": "center", "yanchor": "bottom"}
        )  # fmt: skip
    return layout


def axes(layout: dict[str, Any], letter: str) -> list[dict[str, Any]]:
    """The layout's x or y axes (`letter`), as `update_xaxes` / `update_yaxes` reach them."""
    return [v for k, v in layout.items() if k.startswith(f"{letter}axis")]
