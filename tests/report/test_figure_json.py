"""The report's figures are built as plain JSON (servelab.plotjson), not through plotly's graph objects: each
is the JSON plotly would build. plotly's own validators accept every figure and change nothing in it, the
subplot grids lie where `make_subplots` puts them, and the template is plotly's default, as a `go.Figure`
carries."""

from __future__ import annotations

from dataclasses import replace

import plotly.graph_objects as go
import plotly.io as pio
import pytest
from plotly.subplots import make_subplots
from report_inputs import HOSTILE, estimate_json, plan_json, vllm_result

from servelab.plotjson import subplot_grid, template
from servelab.results.report import Interval, figures, predicted_points, result_points, sweep_axis


def as_plotly_builds_it(fig: dict) -> dict:
    """`fig` through plotly's graph objects: validated (a bad property raises) and written back."""
    return go.Figure(fig).to_plotly_json()


def test_the_template_is_plotlys_default():
    assert pio.templates.default == "plotly"
    assert (
        template()
        == pio.templates["plotly"].to_plotly_json()
        == go.Figure().to_plotly_json()["layout"]["template"]
    )


@pytest.mark.parametrize(
    ("rows", "cols", "spacing"), [(2, 2, None), (1, 3, 0.07), (1, 1, None), (3, 2, None), (2, 3, 0.05)]
)
def test_a_grid_lies_where_make_subplots_puts_it(rows, cols, spacing):
    titles = [f"panel <{k}>" for k in range(rows * cols)]
    theirs = make_subplots(rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=spacing)
    expected = theirs.to_plotly_json()["layout"]
    del expected["template"]
    assert subplot_grid(rows, cols, titles, horizontal_spacing=spacing) == expected


def _reports(sweep, write_json) -> dict[str, list]:
    """Points of every kind a report draws: records and percentiles, repetitions with intervals (error bars),
    predictions of a plan and of estimates, hostile names, a sweep over request rate."""
    measured = [p for f in sweep for p in result_points(f)]
    repeated = replace(
        measured[1],
        repetitions=3,
        intervals={"ttft": Interval(50, 60, "CI 75.0%"), "tok_s": Interval(3, 5, "min-max")},
    )
    predicted = predicted_points(write_json("plan.json", plan_json(model=HOSTILE)))
    predicted += [p for b in (1, 8) for p in predicted_points(write_json(f"est{b}.json", estimate_json(b)))]
    hostile = result_points(write_json("h.json", vllm_result(4, model_id=HOSTILE, label=HOSTILE, num_gpus=2)))
    rates = [p for r in (1.5, 3.0) for p in result_points(write_json(f"r{r}.json", vllm_result(None, r)))]
    return {
        "measured": measured,
        "repeated": [measured[0], repeated, measured[2]],
        "both": measured + predicted,
        "predicted only": predicted,
        "hostile": hostile + predicted,
        "rates": rates,
    }


def test_every_figure_is_what_plotly_builds_from_it(sweep, write_json):
    drawn = 0
    for name, points in _reports(sweep, write_json).items():
        per_gpu = all(p.output_tok_s_per_gpu is not None for p in points)
        for view, fig, _ in figures(points, sweep_axis(points), per_gpu):
            assert as_plotly_builds_it(fig) == fig, (name, view)
            drawn += len(fig["data"])
    assert drawn > 100  # every view of every report has its traces
