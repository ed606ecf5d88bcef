"""The result file of a simulated benchmark (`servelab bench --simulate`): every field of a measured run's
result, computed by the same metrics module from simulated requests, plus `source: "simulated"`, the
deployment and where the prediction came from. The client fields say there was no client."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from servelab.bench import result as R
from servelab.bench.config import BenchConfig
from servelab.bench.report import present
from servelab.metrics import Distribution, RequestTimes, ServingSummary, itl

SIMULATED = "simulated"


@dataclass
class SimulatedResult(R.BenchResult):
    """A BenchResult whose file also carries the simulation's own fields."""

    simulation: dict = field(default_factory=dict)  # source, deployment, prediction

    def dump(self) -> dict:
        return {**super().dump(), **self.simulation}


def simulated_result(
    cfg: BenchConfig,
    model_id: str,
    date: str,
    summary: ServingSummary,
    client_latency_ms: dict[str, Distribution],
    requests: list[RequestTimes],
    simulation: dict,
) -> SimulatedResult:
    """The result of one simulated point, in the measured result's layout."""
    return SimulatedResult(
        header=R.header_fields(cfg, model_id, date),
        summary=summary,
        client_latency_ms=client_latency_ms,
        not_sent=0,
        failure_reasons={},
        token_count_source=SIMULATED,
        prompt_len_source=f"{SIMULATED} (the random dataset's lengths, no special tokens)",
        client=R.ClientReport(
            num_workers=0,
            event_loop=SIMULATED,
            cpu_seconds=0.0,
            cpu_util_per_worker_pct=[],
            cpu_us_per_content_event=0.0,
            event_loop_lag_mean_ms=0.0,
            event_loop_lag_p99_ms=0.0,
            event_loop_lag_max_ms=0.0,
            event_loop_lag_note="simulated: no client process",
            connections_opened=0,
            warmup_failed=0,
            abort_reasons=[],
            host_cpu=SIMULATED,
            host_cores=0,
        ),
        client_bottleneck_warning=None,
        one_read_requests=0,
        one_read_warning=None,
        provenance=R.provenance(),
        config=cfg.public_dump(),
        details=R.RequestDetails(
            input_lens=[r.prompt_len for r in requests],
            output_lens=[r.output_len for r in requests],
            ttfts=[r.ttft_s for r in requests],
            itls=[itl(r.event_times_s) for r in requests],
            latencies=[r.e2el_s for r in requests],
            start_times=[r.start_s for r in requests],
            generated_texts=[""] * len(requests),
            errors=[""] * len(requests),
        ),
        simulation=simulation,
    )


def present_and_save(
    cfg: BenchConfig, result: SimulatedResult, model_id: str, date: str, out=None
) -> Path | None:
    """Print the result like a measured one and save it (never over an existing file); the saved path."""
    out = out or sys.stdout
    print("(simulated: predicted by servelab's serving simulator, not measured)", file=out)
    present(result, cfg.percentile_metrics, file=out)
    band = result.simulation.get("prediction", {}).get("serving_band")
    if band:  # the twin's own line: what its band claims and where it came from
        print(band["line"], file=out)
    if not cfg.save_result:
        return None
    result_dir = Path(cfg.result_dir or ".")
    path = R.claim(result_dir / (cfg.result_filename or R.default_filename(cfg, model_id, date)), lambda p: p)
    R.save(result, path, cfg.save_detailed)
    print(f"result: {path}", file=out)
    return path
