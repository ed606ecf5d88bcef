"""What the report tests write: `vllm bench serve` / `servelab bench` results with their per-request
records, predictions as `servelab plan --json` and `servelab estimate --mode agg --json` write them."""

from __future__ import annotations

HOSTILE = "</script><script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">"


def vllm_result(max_concurrency: int | None = 4, request_rate: float | str = "inf", **extra) -> dict:
    """The fields of a `vllm bench serve --save-result` file, trimmed; latencies grow with concurrency."""
    c = max_concurrency or 1
    return {
        "date": "20261130-101500",
        "backend": "openai",
        "label": "openai",
        "model_id": "Qwen/Qwen3-0.6B",
        "num_prompts": 64,
        "request_rate": request_rate,
        "burstiness": 1.0,
        "max_concurrency": max_concurrency,
        "duration": 20.0,
        "completed": 64,
        "failed": 0,
        "output_throughput": 100.0 * c,
        "mean_ttft_ms": 50.0 + c,
        "median_ttft_ms": 48.0 + c,
        "p99_ttft_ms": 90.0 + c,
        "mean_tpot_ms": 10.0 + c / 2,
        "median_tpot_ms": 10.0 + c / 2,
        "p99_tpot_ms": 20.0 + c,
        "mean_itl_ms": 10.0,
        "median_itl_ms": 9.0,
        "p99_itl_ms": 30.0,
        **extra,
    }


def record(i: int, sent: float, chunks_us: list[int], out: int | None) -> dict:
    """One per-request record as servelab bench writes it (servelab.bench.records)."""
    return {"i": i, "w": 0, "ok": True, "err": None, "sched": sent, "slot": sent, "sent": sent,
            "end": sent + chunks_us[-1] / 1e6, "chunks": chunks_us, "in": 16, "in_src": "usage", "out": out,
            "conn": i == 0}  # fmt: skip


def plan_json(model: str = "Qwen/Qwen3-0.6B") -> dict:
    """The fields of `servelab plan --json` the report reads: two candidates at concurrency 1 and 4."""

    def candidate(rank: int, conc: int) -> dict:
        stats = {"mean": 40.0 + conc, "p50": 40.0 + conc, "p90": 60.0 + conc, "p99": 80.0 + conc}
        return {
            "rank": rank,
            "mode": "agg",
            "parallel": {"label": "tp1"},
            "gpus": 1,
            "concurrency": conc,
            "request_rate": 2.0 * conc,
            "tok_s_per_gpu": 90.0 * conc,
            "percentiles": {"ttft_ms": stats, "tpot_ms": {"mean": 9.0 + conc / 2, "p50": 9.0 + conc / 2}},
        }

    return {
        "version": 1,
        "model": model,
        "request": {"gpus": 1},
        "candidates": [candidate(1, 4), candidate(2, 1)],
    }


def estimate_json(batch: int) -> dict:
    """The fields of `servelab estimate --mode agg --json` the report reads."""
    return {
        "mode": "agg",
        "model": "qwen3-0.6b",
        "parallel": "tp1",
        "gpus": 1,
        "batch": batch,
        "output_tokens_per_s_per_gpu": 95.0 * batch,
        "request_throughput": 1.5 * batch,
        "percentiles": {"ttft_ms": {"mean": 45.0 + batch, "p50": 44.0 + batch, "p99": 70.0 + batch}},
    }
