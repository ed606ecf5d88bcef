"""The one way servelab writes an HTML page: a plain shell, text escaped, plotly figures embedded as plotly's
escaped JSON with plotly.js inlined once, so the file opens offline.

Text written into the page goes through `html.escape`; data embedded in a <script> element through
`safe_json` (`<`, `>` and `&` as unicode escapes, so it can neither close the element nor open a comment).
plotly's own JSON (`plotly.io.to_html`) escapes `<`, `>` and `/` the same way. User-derived text shown inside
a figure (trace names, hover text) is passed through `plot_text`: plotly reads a few HTML tags in its text
(`<a href>`, `<b>`, ...), and escaped entities are shown as the characters they stand for.
"""

from __future__ import annotations

import html
import json
from typing import Any

from servelab.plotjson import Figure

STYLE = (
    "body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}th{background:#f4f4f4}"
    "p.source{color:#444;font-size:0.9em;margin-top:0}"
)


def safe_json(data: Any) -> str:
    """JSON that cannot close a <script> element or open a comment."""
    return (
        json.dumps(data, default=str).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    )


def plot_text(text: str) -> str:
    """User-derived text for a plotly figure: shown as written, never read as plotly's HTML-like tags."""
    return html.escape(text, quote=False)


def figure_div(fig: Figure, *, with_plotlyjs: bool) -> str:
    """One figure (servelab.plotjson) as a <div> and its script; `with_plotlyjs` inlines plotly.js (once per
    page). plotly writes the figure's JSON as it writes a `go.Figure`'s, escaped, without validating it again:
    its validators were most of a report's time, and tests/report check the figures against plotly's own."""
    import plotly.io as pio  # noqa: PLC0415 - plotly is slow to import and only reports need it

    return pio.to_html(fig, full_html=False, include_plotlyjs=with_plotlyjs, validate=False)


def page(title: str, body: str) -> str:
    """A whole page; `title` is escaped here, `body` is HTML the caller built (and escaped)."""
    t = html.escape(title)
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{t}</title><style>{STYLE}</style></head>'
        f"<body><h1>{t}</h1>{body}</body></html>"
    )
