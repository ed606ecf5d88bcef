"""Presenting results: vLLM's printed block plus servelab's client section, warnings, and the sweep table.

Everything here reads the result file's fields (BenchResult.dump()), so a saved result prints the same way."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from servelab.bench.result import BenchResult
from servelab.metrics import LATENCY_METRICS
from servelab.readable import given_width, typed


def present(result: BenchResult, percentile_metrics: list[str], file=None) -> None:
    """The printed report, then the client-bottleneck and one-read warnings (stderr, red on a terminal)."""
    print_report(result.dump(), percentile_metrics, file=file)
    if result.client_bottleneck_warning:
        warn("the client may have been the bottleneck: " + result.client_bottleneck_warning)
    if result.one_read_warning:
        warn(result.one_read_warning)


def warn(msg: str) -> None:
    red = "\x1b[1;31m" if sys.stderr.isatty() else ""
    reset = "\x1b[0m" if red else ""
    sys.stderr.write(f"{red}WARNING: {msg}{reset}\n")


def print_report(r: dict, percentile_metrics: list[str], file=None) -> None:
    """vLLM's printed block, then servelab's client section."""
    file = file or sys.stdout

    def line(k: str, v) -> None:
        print(f"{k:<40} {v:<10}", file=file)

    def num(k: str, v: float) -> None:
        print(f"{k:<40} {v:<10.2f}", file=file)

    print("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="), file=file)
    line("Successful requests:", r["completed"])
    line("Failed requests:", r["failed"])
    if r.get("not_sent"):
        line("Not sent (run stopped):", r["not_sent"])
    if r.get("cool_down"):
        line(
            f"Left out (cool-down, last {typed(r['cool_down']['seconds'])} s):",
            r["cool_down"]["excluded_requests"],
        )
    if r.get("max_concurrency") is not None:
        line("Maximum request concurrency:", r["max_concurrency"])
    if r.get("request_rate") != "inf":
        num("Request rate configured (RPS):", float(r["request_rate"]))
    num("Benchmark duration (s):", r["duration"])
    line("Total input tokens:", r["total_input_tokens"])
    line("Total generated tokens:", r["total_output_tokens"])
    num("Request throughput (req/s):", r["request_throughput"])
    if r.get("request_goodput") is not None:
        num("Request goodput (req/s):", r["request_goodput"])
    num("Output token throughput (tok/s):", r["output_throughput"])
    num("Peak output token throughput (tok/s):", r["max_output_tokens_per_s"])
    num("Peak concurrent requests:", r["max_concurrent_requests"])
    num("Total token throughput (tok/s):", r["total_token_throughput"])
    names = {
        "ttft": ("TTFT", "Time to First Token"),
        "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
        "itl": ("ITL", "Inter-token Latency"),
        "e2el": ("E2EL", "End-to-end Latency"),
    }
    for m in LATENCY_METRICS:
        if m not in percentile_metrics:
            continue
        short, title = names[m]
        print("{s:{c}^{n}}".format(s=title, n=50, c="-"), file=file)
        for stat, label in (("mean", "Mean"), ("median", "Median")):
            key = f"{stat}_{m}_ms"
            # a TPOT statistic of 0 is not in the result (metrics.summary): shown as "-"
            if key in r:
                num(f"{label} {short} (ms):", r[key])
            else:
                line(f"{label} {short} (ms):", "-")
        for k, v in r.items():
            if k.startswith("p") and k.endswith(f"_{m}_ms") and k[1].isdigit():
                num(f"P{k[1 : -len(m) - 4]} {short} (ms):", v)
    if "spec_decode_acceptance_rate" in r:  # vLLM's speculative-decoding block, when the server reports it
        print("{s:{c}^{n}}".format(s="Speculative Decoding", n=50, c="-"), file=file)
        num("Acceptance rate (%):", r["spec_decode_acceptance_rate"])
        num("Acceptance length:", r["spec_decode_acceptance_length"])
        line("Drafts:", r["spec_decode_num_drafts"])
        line("Draft tokens:", r["spec_decode_draft_tokens"])
        line("Accepted tokens:", r["spec_decode_accepted_tokens"])
        rates = r.get("spec_decode_per_position_acceptance_rates") or []
        if rates:
            line("Per-position acceptance (%):", ", ".join(f"{100 * x:.2f}" for x in rates))
    c = r["client"]
    print("{s:{c}^{n}}".format(s=" Client (servelab) ", n=50, c="-"), file=file)
    line("Worker processes / event loop:", f"{c['num_workers']} / {c['event_loop']}")
    if c.get("host_cores"):  # none when simulated, or in a result written before the field was kept
        line("Client host CPU (cores):", f"{c['host_cpu']} ({c['host_cores']})")
    line("Client CPU per worker (% of a core):", ", ".join(f"{u:.0f}" for u in c["cpu_util_per_worker_pct"]))
    num("Client CPU per content event (us):", c["cpu_us_per_content_event"])
    num("Event-loop lag p99 / max (ms):", c["event_loop_lag_p99_ms"])
    print(f"{'':<40} max {c['event_loop_lag_max_ms']:.2f}", file=file)
    num("Send lag mean (ms):", r["mean_client_send_lag_ms"])
    num("Send lag p99 (ms):", r["p99_client_send_lag_ms"])
    num("Mean TTFT from scheduled time (ms):", r["mean_ttft_from_scheduled_ms"])
    num("P99 TTFT from scheduled time (ms):", r["p99_ttft_from_scheduled_ms"])
    line("Output tokens counted from:", r["token_count_source"])
    if r.get("failure_reasons"):
        print("{s:{c}^{n}}".format(s=" Failures ", n=50, c="-"), file=file)
        for reason, count in r["failure_reasons"].items():
            print(f"{count:>6}  {reason}", file=file)
    print("=" * 50, file=file)


def summary_rows(results: list[tuple[str, dict, str | None]]) -> list[list[str]]:
    rows = []
    for point, r, path in results:
        rows.append(
            [
                point,
                str(r["completed"]),
                str(r["failed"]),
                f"{r['request_throughput']:.2f}",
                f"{r['output_throughput']:.1f}",
                f"{r.get('mean_ttft_ms', float('nan')):.1f}",
                f"{r.get('p99_ttft_ms', float('nan')):.1f}",
                f"{r.get('mean_tpot_ms', float('nan')):.2f}",
                "yes" if r.get("client_bottleneck_warning") else "",
                path or "",
            ]
        )
    return rows


SUMMARY_HEADER = [
    "point",
    "completed",
    "failed",
    "req/s",
    "out tok/s",
    "mean TTFT ms",
    "p99 TTFT ms",
    "mean TPOT ms",
    "client-bound?",
    "result file",
]


def print_sweep_table(results: list[tuple[str, dict, str | None]], file=None) -> None:
    """One row per point of a sweep: (point name, result fields, result file or None)."""
    table = Table(title="servelab bench sweep")
    for h in SUMMARY_HEADER:
        table.add_column(h)
    for row in summary_rows(results):
        table.add_row(*row)
    out = Console(file=file or sys.stdout)
    # on a terminal its width; in a pipe COLUMNS when set (a CI log's), else wide enough for every cell
    (out if out.is_terminal else Console(file=file or sys.stdout, width=given_width() or 200)).print(table)
