"""The result file: vLLM's field names with vLLM's meanings, plus servelab's self-describing extras
(a schema version, package/python versions and the full config, so a saved file describes itself), and the printed report."""

from __future__ import annotations

import json
import math
import platform
import sys
from datetime import datetime
from pathlib import Path

import servelab

RESULT_VERSION = 1
DETAIL_FIELDS = (
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "generated_texts",
    "errors",
)


def header_fields(cfg, model_id: str, date: str) -> dict:
    """vLLM's leading fields (same order), then --metadata keys as top-level fields like vLLM."""
    out = {
        "date": date,
        "endpoint_type": cfg.backend,
        "backend": cfg.backend,
        "label": cfg.label or cfg.backend,
        "model_id": model_id,
        "tokenizer_id": cfg.tokenizer or model_id,
        "num_prompts": cfg.num_prompts,
    }
    out.update(cfg.metadata)
    out["request_rate"] = "inf" if math.isinf(cfg.request_rate) else cfg.request_rate
    out["burstiness"] = cfg.burstiness
    out["max_concurrency"] = cfg.max_concurrency
    if cfg.ramp_up_strategy is not None:
        out["ramp_up_strategy"] = cfg.ramp_up_strategy
        out["ramp_up_start_rps"] = cfg.ramp_up_start_rps
        out["ramp_up_end_rps"] = cfg.ramp_up_end_rps
    return out


def provenance() -> dict:
    versions = {"servelab": servelab.__version__}
    for name in ("numpy", "pydantic", "uvloop", "tokenizers", "transformers"):
        mod = sys.modules.get(name)
        if mod is not None:
            versions[name] = getattr(mod, "__version__", "?")
    return {
        "version": RESULT_VERSION,
        "servelab_version": servelab.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "packages": versions,
    }


def default_filename(cfg, model_id: str, date: str) -> str:
    """vLLM's compute_result_filename."""
    base = model_id.split("/")[-1]
    conc = f"-concurrency{cfg.max_concurrency}" if cfg.max_concurrency is not None else ""
    label = cfg.label or cfg.backend
    if cfg.ramp_up_strategy is not None:
        return f"{label}-ramp-up-{cfg.ramp_up_strategy}-{cfg.ramp_up_start_rps}qps-{cfg.ramp_up_end_rps}qps{conc}-{base}-{date}.json"
    rate = "inf" if math.isinf(cfg.request_rate) else cfg.request_rate
    return f"{label}-{rate}qps{conc}-{base}-{date}.json"


def now_stamp() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S")


def save(result: dict, path: Path, detailed: bool) -> None:
    data = result if detailed else {k: v for k, v in result.items() if k not in DETAIL_FIELDS}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=_jsonable))
    tmp.replace(path)


def _jsonable(v):
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return str(v)


def print_report(r: dict, percentile_metrics: list[str], file=None) -> None:
    """vLLM's printed block, then servelab's client section."""
    file = file or sys.stdout
    line = lambda k, v: print(f"{k:<40} {v:<10}", file=file)
    num = lambda k, v: print(f"{k:<40} {v:<10.2f}", file=file)
    print("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="), file=file)
    line("Successful requests:", r["completed"])
    line("Failed requests:", r["failed"])
    if r.get("not_sent"):
        line("Not sent (run stopped):", r["not_sent"])
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
    for m in ("ttft", "tpot", "itl", "e2el"):
        if m not in percentile_metrics:
            continue
        short, title = names[m]
        print("{s:{c}^{n}}".format(s=title, n=50, c="-"), file=file)
        num(f"Mean {short} (ms):", r[f"mean_{m}_ms"])
        num(f"Median {short} (ms):", r[f"median_{m}_ms"])
        for k, v in r.items():
            if k.startswith("p") and k.endswith(f"_{m}_ms") and k[1].isdigit():
                num(f"P{k[1 : -len(m) - 4]} {short} (ms):", v)
    c = r["client"]
    print("{s:{c}^{n}}".format(s=" Client (servelab) ", n=50, c="-"), file=file)
    line("Worker processes / event loop:", f"{c['num_workers']} / {c['event_loop']}")
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
