"""A trace replay's own section of the result (`agentic`): its sessions, its turns, its prefix cache.

- `sessions`: how many started, completed (every request answered), had failures, or were stopped (requests
  not sent), and the distributions of a session's duration (first request sent to last answer) and requests;
- `per_session`: each session replayed, with its trace, requests, tokens and mean TTFT;
- `per_turn`: the main agent's turns by their place in the session (turn 0, 1, ...): how TTFT and E2EL grow
  with the history, beside the prompt and the share of it an unbounded prefix cache would hold;
- `subagents`: the subagents' requests together;
- `prefix_cache`: the server's hit rate over the run (its Prometheus counters before and after,
  server_cache.py) and the theoretical one: the share of the sent prompts' blocks an earlier request of the
  session had sent (AIPerf's theoretical_prefix_cache_hit, which InferenceX reports beside the server's).

Latencies are the records' own (servelab.bench.measured), in ms, over the successful requests.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict

from servelab.bench.agentic.replay import KEY_STRIDE
from servelab.bench.agentic.trace import TraceFile, TraceRequest
from servelab.bench.measured import MeasuredRequest, derive
from servelab.metrics import distribution_ms

PERCENTILES = (90.0, 99.0)


def _dist(values_s: list[float]) -> dict | None:
    return asdict(distribution_ms(values_s, PERCENTILES)) if values_s else None


def _mean_ms(values_s: list[float]) -> float | None:
    return 1000.0 * sum(values_s) / len(values_s) if values_s else None


def agentic_section(
    records: Iterable[dict],
    traces: TraceFile,
    replay: dict,
    server: dict,
) -> dict:
    """The section from the merged records, the trace file, how it was replayed (`replay`) and what the
    server's counters said (`server`)."""
    plans = traces.traces
    by_session: dict[int, list[tuple[dict, TraceRequest, MeasuredRequest]]] = defaultdict(list)
    for r in records:
        number, index = divmod(int(r["i"]), KEY_STRIDE)
        req = plans[number % len(plans)].requests[index]
        by_session[number].append((r, req, derive(r, int(r.get("out") or 0))))
    per_session = [
        _session(n, plans[n % len(plans)].trace_id, rows) for n, rows in sorted(by_session.items())
    ]
    started = [s for s in per_session if s["sent"]]
    rows = [row for n in sorted(by_session) for row in by_session[n]]
    sent = [(r, req) for r, req, _m in rows if r.get("sent") is not None]
    blocks = sum(req.blocks for _r, req in sent)
    cached = sum(req.cached_blocks for _r, req in sent)
    return {
        "trace": {
            "path": traces.path,
            "sha256": traces.sha256,
            "format": "InferenceX agentic trace (weka)",
            "traces": len(plans),
            "requests": traces.num_requests,
        },
        "replay": replay,
        "sessions": {
            "started": len(started),
            "completed": sum(1 for s in started if s["completed"] == s["requests"]),
            "with_failures": sum(1 for s in started if s["failed"]),
            "stopped": sum(1 for s in per_session if s["not_sent"]),
            "duration_s": _dist_s([s["duration_s"] for s in started if s["duration_s"] is not None]),
            "requests": _dist_s([float(s["requests"]) for s in started]),
        },
        "per_session": per_session,
        "per_turn": _per_turn([row for row in rows if row[1].stream == 0]),
        "subagents": _group([row for row in rows if row[1].stream > 0]),
        "prefix_cache": {
            "server": server,
            "theoretical_hit_rate": cached / blocks if blocks else None,
        },
    }


def _dist_s(values: list[float]) -> dict | None:
    """A distribution of plain values (seconds, counts) in their own unit (distribution_ms reports x1000)."""
    return _dist([v / 1000.0 for v in values])


def _session(number: int, trace_id: str, rows: list[tuple[dict, TraceRequest, MeasuredRequest]]) -> dict:
    sent = [r for r, _req, _m in rows if r.get("sent") is not None]
    ok = [m for r, _req, m in rows if r.get("ok")]
    start = min((r["sent"] for r in sent), default=None)
    end = max((r["end"] for r in sent if r.get("end") is not None), default=None)
    return {
        "session": number,
        "trace_id": trace_id,
        "requests": len(rows),
        "sent": len(sent),
        "completed": len(ok),
        "failed": len(sent) - len(ok),
        "not_sent": len(rows) - len(sent),
        "start_s": start,
        "duration_s": end - start if start is not None and end is not None else None,
        "prompt_tokens": sum(m.prompt_len for m in ok),
        "output_tokens": sum(m.output_len for m in ok),
        "mean_ttft_ms": _mean_ms([m.ttft_s for m in ok]),
    }


def _group(rows: list[tuple[dict, TraceRequest, MeasuredRequest]]) -> dict:
    ok = [(req, m) for r, req, m in rows if r.get("ok")]
    sent = [req for r, req, _m in rows if r.get("sent") is not None]
    blocks = sum(req.blocks for req in sent)
    return {
        "requests": len(rows),
        "completed": len(ok),
        "ttft_ms": _dist([m.ttft_s for _req, m in ok]),
        "e2el_ms": _dist([m.e2el_s for _req, m in ok]),
        "mean_prompt_tokens": sum(m.prompt_len for _req, m in ok) / len(ok) if ok else None,
        "theoretical_hit_rate": sum(req.cached_blocks for req in sent) / blocks if blocks else None,
    }


def _per_turn(rows: list[tuple[dict, TraceRequest, MeasuredRequest]]) -> list[dict]:
    by_turn: dict[int, list] = defaultdict(list)
    for row in rows:
        by_turn[row[1].turn].append(row)
    return [{"turn": turn, **_group(by_turn[turn])} for turn in sorted(by_turn)]


def summary_lines(section: dict) -> list[str]:
    """The few lines printed under the result's table."""
    s = section["sessions"]
    lines = [
        f"Sessions: {s['started']} started, {s['completed']} completed, {s['with_failures']} with failures, "
        f"{s['stopped']} stopped",
    ]
    cache = section["prefix_cache"]
    server = cache["server"]
    if server.get("hit_rate") is not None:
        lines.append(
            f"Prefix cache hit rate (server, {server['engine']}): {server['hit_rate']:.1%} of "
            f"{server['queries']:.0f} prompt tokens"
        )
    else:
        lines.append(f"Prefix cache hit rate (server): not measured ({server.get('error', 'no queries')})")
    if server.get("external_hit_rate") is not None:
        lines.append(f"Prefix cache hit rate (offloaded / external): {server['external_hit_rate']:.1%}")
    if cache["theoretical_hit_rate"] is not None:
        lines.append(
            f"Prefix cache hit rate (theoretical, unbounded cache): {cache['theoretical_hit_rate']:.1%}"
        )
    return lines
