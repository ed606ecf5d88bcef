"""One benchmark run written in every format a reader wants (`servelab bench --outputs json,yaml,csv,html`, as
GuideLLM's `--outputs`): the result files are JSON (vLLM's fields, one per point, always written: the other
formats are made from them), and beside them

    yaml   each point's result as YAML, next to its JSON (`c8.yaml` beside `c8.json`)
    csv    one file, a row per point: every field that holds one value, nested ones dotted (`config.seed`)
    html   one page of every point: latency CDFs from the per-request records, the sweep, the Pareto front
           (servelab report's page)

The csv and html files are named after the run (`<stem>.csv`, `<stem>.html`). No file is ever overwritten: a
name taken gets -1, -2, ... as result files do.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from servelab.bench.result import claim
from servelab.results.report import render_html, result_points


def _scalar(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def flat_fields(result: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The fields of a result that hold one value; a nested mapping's as `outer.inner`; lists left out (the
    per-request detail lists belong to the JSON)."""
    out: dict[str, Any] = {}
    for key, value in result.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_fields(value, f"{name}."))
        elif not isinstance(value, list):
            out[name] = _scalar(value)
    return out


def csv_text(results: Sequence[dict[str, Any]]) -> str:
    """A row per result; the columns are every result's fields, in the order they first appear."""
    rows = [flat_fields(r) for r in results]
    columns = list(dict.fromkeys(k for row in rows for k in row))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def _write(path: Path, text: str) -> Path:
    """`text` at `path`, or at the first free name beside it."""
    free = claim(path, lambda p: p)
    free.write_text(text, encoding="utf-8")
    return free


def write_outputs(results: Sequence[Path], formats: Sequence[str], stem: Path, title: str) -> list[Path]:
    """The formats beyond JSON of the result files `results` (a run's points, in order): a YAML beside each,
    `<stem>.csv` and `<stem>.html` for them all. Returns the files written."""
    data = [json.loads(p.read_text(encoding="utf-8")) for p in results]
    written = []
    if "yaml" in formats:
        for path, result in zip(results, data, strict=True):
            text = yaml.safe_dump(result, sort_keys=False, allow_unicode=True)
            written.append(_write(path.with_suffix(".yaml"), text))
    if "csv" in formats:
        written.append(_write(stem.with_name(stem.name + ".csv"), csv_text(data)))
    if "html" in formats:
        points = [p for path in results for p in result_points(path)]
        written.append(_write(stem.with_name(stem.name + ".html"), render_html(points, title)))
    return written
