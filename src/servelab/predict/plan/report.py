"""HTML report of a plan: a Pareto chart (tok/s/GPU against tok/s/user) and the ranked table.

The page is built the one way servelab writes pages (servelab.htmlpage): table cells escaped, the embedded
plan JSON safe inside its <script> element, plotly.js inlined so the file opens offline.
"""

from __future__ import annotations

import html
from typing import Any

from servelab.htmlpage import figure_div, page, plot_text, safe_json
from servelab.plotjson import Figure, figure, scatter
from servelab.predict.plan.candidates import Plan
from servelab.predict.provenance import describe_shares, roofline_warning

COLUMNS = (
    ("rank", "#"),
    ("mode", "mode"),
    ("label", "parallel"),
    ("concurrency", "conc"),
    ("ttft_ms", "TTFT ms"),
    ("tpot_ms", "TPOT ms"),
    ("tok_s_per_gpu", "tok/s/GPU"),
    ("tok_s_per_user", "tok/s/user"),
    ("memory_headroom_gib", "KV GiB/GPU"),
    ("band", "band tok/s/GPU"),
    ("pareto", "Pareto"),
    ("limits", "limits"),
)


def _cell(c: dict[str, Any], key: str) -> str:
    if key == "label":
        v = c["parallel"]["label"]
    elif key == "band":
        v = f"{c['tok_s_per_gpu_low']:,.0f} - {c['tok_s_per_gpu_high']:,.0f}"
    elif key == "limits":
        v = "; ".join(c["limits"])
    elif key == "pareto":
        v = "yes" if c["pareto"] else ""
    else:
        v = c[key]
        if isinstance(v, float):
            v = f"{v:,.1f}"
    return html.escape(str(v))


def pareto_chart(plan_data: dict[str, Any]) -> Figure:
    """The Pareto chart of a plan's JSON: tok/s/GPU (with its band) against tok/s/user, per mode."""
    fig = figure()
    cands = plan_data["candidates"]
    for mode in sorted({c["mode"] for c in cands}):
        pts = [c for c in cands if c["mode"] == mode]
        fig["data"].append(
            scatter(
                x=[c["tok_s_per_user"] for c in pts],
                y=[c["tok_s_per_gpu"] for c in pts],
                mode="markers",
                name=mode,
                text=[f"#{c['rank']} {c['parallel']['label']} conc {c['concurrency']}" for c in pts],
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": [c["tok_s_per_gpu_high"] - c["tok_s_per_gpu"] for c in pts],
                    "arrayminus": [c["tok_s_per_gpu"] - c["tok_s_per_gpu_low"] for c in pts],
                },
            )
        )
    front = sorted((c for c in cands if c["pareto"]), key=lambda c: c["tok_s_per_user"])
    fig["data"].append(
        scatter(
            x=[c["tok_s_per_user"] for c in front],
            y=[c["tok_s_per_gpu"] for c in front],
            mode="lines",
            name="Pareto front",
            line={"dash": "dash"},
        )
    )
    title = plot_text(f"{plan_data['model']} on {plan_data['request']['gpus']}x {plan_data['system']}")
    fig["layout"].update(
        xaxis={"title": {"text": "interactivity (tok/s/user)"}},
        yaxis={"title": {"text": "output tok/s/GPU"}},
        title={"text": title},
    )
    return fig


def render_html(plan: Plan) -> str:
    data = plan.model_dump(mode="json")
    chart = figure_div(pareto_chart(data), with_plotlyjs=True)
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label in COLUMNS)
    rows = "".join(
        "<tr>" + "".join(f"<td>{_cell(c, key)}</td>" for key, _ in COLUMNS) + "</tr>"
        for c in data["candidates"]
    )
    req = data["request"]
    title = (
        f"servelab plan: {data['model']} on {req['gpus']}x {data['system']} ({data['backend']}), "
        f"{req['isl']}/{req['osl']} tokens"
    )
    best = plan.candidates[0].kernel_time_by_source if plan.candidates else {}
    lines = [*data["notes"], f"kernel time by source (rank 1): {describe_shares(best)}"]
    warning = roofline_warning(best)
    if warning:
        lines.append(warning)
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in lines)
    return page(
        title,
        f"{chart}<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table><ul>{notes}</ul>"
        f'<script type="application/json" id="plan-data">{safe_json(data)}</script>',
    )
