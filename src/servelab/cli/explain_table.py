"""The `--explain` table of `servelab estimate --mode agg` and `servelab bench --simulate`: where the
predicted TTFT goes, term by term (servelab.predict.serving.ttft_explain), in ms and % of the TTFT, with each
row's source."""

from typing import Any

from servelab.cli._common import Col, print_table

EXPLAINS_TWIN_ONLY = (
    "explains the simulated twin's TTFT only (--mode agg here, or servelab bench --simulate): static mode "
    "prices one prefill and disaggregated mode prices pools, without the queue and steps to split"
)


def print_explain(ex: dict[str, Any]) -> None:
    ttft = ex["ttft_ms"]
    columns = (
        Col("part", key=True),
        Col("term", key=True),
        Col("value", drop=2),
        Col("mean ms", "right", key=True),
        Col("%", "right", key=True),
        Col("median ms", "right", key=True),
        Col("% ", "right", key=True),
        Col("source", drop=1),
    )
    rows = [
        (
            r["part"],
            r["term"],
            r["value"] or "",
            f"{r['mean_ms']:,.3f}",
            f"{100 * r['mean_share']:.1f}",
            f"{r['median_ms']:,.3f}",
            f"{100 * r['median_share']:.1f}",
            r["source"],
        )
        for r in ex["rows"]
    ]
    rows.append(("", "TTFT", "", f"{ttft['mean']:,.3f}", "100.0", f"{ttft['median']:,.3f}", "100.0", ""))
    title = f"Where the predicted TTFT goes ({ex['requests']} requests, nominal clock)"
    print_table(columns, rows, title)
    print(f"engine profile: {ex['engine_profile']}")
