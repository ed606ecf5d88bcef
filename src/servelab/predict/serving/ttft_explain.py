"""Where a predicted TTFT goes (`--explain`): each measured request's time from its arrival to its first
token, split into the wait for the API server and its intake there, the queue before the request's first
prompt chunk is scheduled (under a scheduler that forms its steps ahead, vLLM's async scheduling or SGLang's
overlap scheduler, it includes the step formed before the request came, which vLLM's own metrics count in its
prefill time), its own prefill steps (each step's price split by term: kernel time by op category and
source, and each engine term of the profile with its value), other requests' steps between its prompt chunks,
and its first token's wait in a serial output stream. The simulator samples the first token in the step that
finishes the prompt, so there is no separate sampling step to show.

Nothing here runs unless asked: a StepLog wraps one lane's `complete` and its source's `on_arrival` for one
run (the simulator's loop is not touched), and a TermPricer prices the logged steps again after the run
through the same pricer and step functions (StepPricer's grid and interpolation, step.step_parts and
step.engine_terms) with a price that is a split of terms rather than a number, so the split is the price
the simulation used, not a second model of it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any, cast

from servelab.metrics.percentiles import percentile
from servelab.predict.engines import MOE_TERMS, EngineProfile
from servelab.predict.graph import StepShape, step_ops
from servelab.predict.provenance import describe_shares, time_shares
from servelab.predict.serving.engine import Batch, Lane, Request
from servelab.predict.serving.pricing import StepPricer
from servelab.predict.step import kernel_sum_by_category, step_terms

SIMULATED = "simulated"
NEGLIGIBLE_MS = 1e-9  # a row below this (float residue, or a term set to 0) is left out of the split

Key = tuple[str, ...]


class Terms(dict):
    """A step price split by term (us), which adds, subtracts and scales as StepPricer interpolates prices."""

    def __add__(self, other: Terms) -> Terms:  # type: ignore[override]
        out = Terms(self)
        for k, v in other.items():
            out[k] = out.get(k, 0.0) + v
        return out

    def __sub__(self, other: Terms) -> Terms:
        return self + other * -1.0

    def __mul__(self, f: float) -> Terms:
        return Terms({k: v * f for k, v in self.items()})


class TermPricer(StepPricer):
    """`pricer`'s steps priced as Terms on the nominal clock (the low and high clocks are not split)."""

    def __init__(self, pricer: StepPricer):
        super().__init__(
            pricer.model, pricer.parallel, pricer.engine, pricer.db, pricer.spec_tokens, pricer.ranks
        )
        model, parallel, db = self.model, self.parallel, self.db

        def part(shape: StepShape, which: str):
            return kernel_sum_by_category(step_ops(model, parallel, shape, frozenset((which,))), db)

        self._parts = lru_cache(maxsize=None)(part)
        self._running = self.engine.running(model, db.system)  # as priced_step prices it

    def _priced(self, shape: StepShape) -> tuple:
        return (Terms(step_terms(self._parts, self.model, self.parallel, shape, self._running)), 0.0, 0.0)

    def split_of(self, batch: Batch) -> Terms:
        """A logged step's price split by term (us), looked up as the lane priced it (StepPricer.mixed)."""
        split = self.mixed([(t, p) for _, t, p in batch.chunks], batch.decodes, batch.kv_mean)[0]
        return cast(Terms, split)  # StepPricer's nominal price, a Terms here


class StepLog:
    """One lane's run, watched: each request's wait for the API server and its intake there, and the steps
    that carried its prompt before its first token (start on the nominal clock, the batch), with the end of
    the one that sampled it."""

    def __init__(self, lane: Lane, source: Any):
        self.source = source
        self.front: dict[Request, tuple[float, float]] = {}
        self.steps: dict[Request, list[tuple[float, Batch]]] = {}
        self.sampled: dict[Request, float] = {}
        complete, arrived = lane.complete, source.on_arrival

        def on_arrival(req: Request, lane_: Lane):
            self.front[req] = _intake(lane, req)
            return arrived(req, lane_)

        def on_complete(batch: Batch) -> list[Request]:
            start = lane.clock[0]
            starting = [req for req, _, _ in batch.chunks if req.first is None]
            done = complete(batch)
            for req in starting:
                self.steps.setdefault(req, []).append((start, batch))
                if req.first is not None:
                    self.sampled[req] = lane.clock[0]
            return done

        lane.complete = on_complete  # type: ignore[method-assign]
        source.on_arrival = on_arrival


def watcher(logs: list[StepLog]) -> Callable[[Lane, Any], None]:
    """What a simulation calls with each nominal run's lane and source before it runs: logs it."""
    return lambda lane, source: logs.append(StepLog(lane, source))


def _intake(lane: Lane, req: Request) -> tuple[float, float]:
    """(wait, intake) in seconds of a request arriving now: what the simulator's loop charges it
    (LaneLimits.frontend_cost_s, behind the requests the API server has not finished)."""
    if not lane.frontend:
        return 0.0, 0.0
    rate = lane.decode_rate if lane.num_decoding else 0.0
    cost = lane.lim.frontend_cost_s(req.prompt, rate, streamed=lane.streams)
    return max(0.0, lane.frontend_free - req.arrival[0]), cost


def request_split(req: Request, log: StepLog, pricer: TermPricer) -> dict[Key, float]:
    """One request's TTFT (nominal clock) split by term, in seconds; the parts add up to first - arrival."""
    arrival, first = req.arrival[0], req.first[0]  # type: ignore[index]
    wait, intake = log.front[req]
    steps = log.steps[req]
    start, sampled = steps[0][0], log.sampled[req]
    split: dict[Key, float] = {
        ("api", "wait"): wait,
        ("api", "intake"): intake,
        ("queue", "before"): start - (arrival + wait + intake),
    }
    own = 0.0
    for _, batch in steps:
        own += batch.duration[0]
        for key, us in pricer.split_of(batch).items():
            split[key] = split.get(key, 0.0) + us * 1e-6
    split["queue", "between"] = sampled - start - own
    split["first", "stream"] = first - sampled
    return split


def explain_ttft(
    logs: list[StepLog], requests: list[Request], pricer: StepPricer, fitted: dict[str, float]
) -> dict[str, Any]:
    """The split of the mean and the median TTFT of `requests` (the measured ones; every one is in one of
    the logs), as rows in ms and shares of the TTFT. The median is the metrics module's (linear between the
    two middle ranks), so its split is the same interpolation of those two requests' splits. `fitted`: the
    engine terms a calibration fits (engines.fitted_params), the others being documented defaults."""
    owner = {req: log for log in logs for req in log.front}
    terms = TermPricer(pricer)
    splits = [request_split(r, owner[r], terms) for r in requests]
    ttfts_ms = [(r.first[0] - r.arrival[0]) * 1000.0 for r in requests]  # type: ignore[index]
    keys = list(dict.fromkeys(k for s in splits for k in s))
    n = len(splits)
    mean = {k: sum(s.get(k, 0.0) for s in splits) / n for k in keys}
    order = sorted(range(n), key=ttfts_ms.__getitem__)
    pos = (n - 1) * 0.5
    lo, f = int(pos), pos - int(pos)
    a, b = splits[order[lo]], splits[order[min(lo + 1, n - 1)]]
    median = {k: a.get(k, 0.0) + (b.get(k, 0.0) - a.get(k, 0.0)) * f for k in keys}
    moe_reach = pricer.engine.moe_terms_reach(pricer.model, pricer.db.system)[1]
    rows = _rows(mean, median, pricer.engine, fitted, pricer.parallel.attn_dp * pricer.parallel.pp, moe_reach)
    return {
        "of": "the nominal clock's TTFT of the measured requests, from arrival to first token",
        "requests": n,
        "ttft_ms": {"mean": sum(ttfts_ms) / n, "median": percentile(sorted(ttfts_ms), 50)},
        "engine_profile": pricer.engine.source,
        "rows": rows,
    }


# the parts of a request's life, in order, and the row kinds in each
PARTS = {
    "api": "API server",
    "queue": "queue",
    "kernel": "prefill steps",
    "engine": "prefill steps",
    "first": "first token",
}
STEPS = ("kernel", "engine")

ENGINE_TERMS = {  # profile field: (what it is, its unit)
    "step_overhead_us": ("per step", "us/step"),
    "per_seq_overhead_us": ("per sequence", "us/sequence/step"),
    "moe_prompt_token_us": ("per prompt token", "us/prompt token/MoE layer"),
    "moe_route_us": ("per routed expert, GPU", "us/MoE layer/routed expert"),
    "eager_moe_route_us": ("per routed expert, CPU waited for", "us/MoE layer/routed expert"),
    "eager_launch_us": ("launches waited for", "us/kernel"),
    "kernel_gap_us": ("gaps between kernels", "us/kernel"),
}


def _rows(
    mean: dict[Key, float],
    median: dict[Key, float],
    engine: EngineProfile,
    fitted: dict,
    lanes: int,
    moe_reach: str,
) -> list[dict[str, Any]]:
    """Rows in the order of a request's life; kernel rows by category (their sources as shares), the MoE
    terms' with why they apply (`moe_reach`: EngineProfile.moe_terms_reach)."""
    by_row: dict[Key, list] = {}  # row key -> [mean s, median s, {source: mean s}]
    for key in mean:
        row = key[:2]
        got = by_row.setdefault(row, [0.0, 0.0, {}])
        got[0] += mean[key]
        got[1] += median[key]
        if key[0] == "kernel":
            got[2][key[2]] = got[2].get(key[2], 0.0) + mean[key]
    total_mean = sum(mean.values())
    total_median = sum(median.values())
    rows = []
    kinds = list(PARTS)
    # in the order of a request's life; within its steps, kernels then engine terms, each largest first
    ordered = sorted(
        by_row.items(), key=lambda kv: (kinds.index(kv[0][0]), -kv[1][0] if kv[0][0] in STEPS else 0)
    )
    for row, (m, med, sources) in ordered:
        if abs(m) * 1000.0 < NEGLIGIBLE_MS and abs(med) * 1000.0 < NEGLIGIBLE_MS:
            continue
        term, value, source = _describe(row, sources, engine, fitted, lanes)
        if row[0] == "engine" and row[1] in MOE_TERMS and row[1] in fitted:
            source = f"{source}: {moe_reach}"
        rows.append(
            {
                "part": PARTS[row[0]],
                "term": term,
                "value": value,
                "source": source,
                "mean_ms": m * 1000.0,
                "mean_share": m / total_mean if total_mean else 0.0,
                "median_ms": med * 1000.0,
                "median_share": med / total_median if total_median else 0.0,
            }
        )
    return rows


def _describe(
    row: Key, sources: dict, engine: EngineProfile, fitted: dict, lanes: int
) -> tuple[str, str | None, str]:
    """A row's name, the value of its term (engine terms) and where it came from."""

    def origin(*fields: str) -> str:
        return "calibrated" if any(f in fitted for f in fields) else "documented default"

    kind, name = row
    if kind == "kernel":
        return f"kernel: {name}", None, describe_shares(time_shares(sources))
    if kind == "engine":
        what, unit = ENGINE_TERMS[name]
        return f"{what} ({name})", f"{getattr(engine, name):g} {unit}", origin(name)
    if row == ("api", "intake"):
        value = f"{engine.api_request_us:g} us + {engine.api_prompt_token_us:g} us/prompt token"
        value += f", x {lanes} lanes" if lanes > 1 else ""
        if engine.api_output_token_us and not engine.policy.serial_output_stream:
            value += f", {engine.api_output_token_us:g} us/streamed token"
        return "intake (api_request_us, api_prompt_token_us)", value, origin("api_request_us")
    if row == ("first", "stream") and engine.policy.serial_output_stream:
        value = f"{engine.api_output_token_us:g} us/streamed token"
        value += f" + {engine.api_chunk_us:g} us/chunk" if engine.api_chunk_us else ""
        interval = engine.stream_interval
        value += (
            f" (one per {interval} tokens of a running request)"
            if engine.api_chunk_us and interval > 1
            else ""
        )
        value += f" + {engine.api_step_us:g} us/step" if engine.api_step_us else ""
        name = "in the API server's serial output stream (api_output_token_us, api_chunk_us, api_step_us)"
        return name, value, f"simulated with the {origin('api_output_token_us')}s"
    return {
        ("api", "wait"): ("wait (others' intake and streaming)", None, SIMULATED),
        ("queue", "before"): ("before its first prompt chunk", None, SIMULATED),
        ("queue", "between"): ("others' steps between its chunks", None, SIMULATED),
        ("first", "stream"): ("in the API server's serial output stream", None, SIMULATED),
    }[kind, name]
