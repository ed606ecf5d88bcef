"""The search context: the request with the specs, engine and perf tables it resolved to, and what the search
has counted and dropped so far."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from servelab.perfdb.db import PerfDB
from servelab.predict.engines import EngineProfile
from servelab.predict.plan.points import Clocks, Miss, clocks
from servelab.predict.plan.request import PlanRequest
from servelab.predict.serving.aggregated import SimResult
from servelab.predict.serving.workload import SpecDecoding, Workload
from servelab.specs import ModelSpec, SystemSpec
from servelab.traffic.lengths import SIMULATOR_RANGE_RATIO


@dataclass
class SearchContext:
    req: PlanRequest
    model: ModelSpec
    system: SystemSpec
    engine: EngineProfile
    db: PerfDB
    spec: SpecDecoding
    # the clients' length spread (Workload.range_ratio); a replay of a measured run sets its client's spread
    range_ratio: float = SIMULATOR_RANGE_RATIO
    dropped: list[str] = field(default_factory=list)  # configs left out, each with why
    sims: int = 0  # simulations run

    def workload(self, concurrency: int, lanes: int, osl: int | None = None) -> Workload:
        """A closed-loop workload of the request's lengths at `concurrency` (`osl` overrides its output)."""
        c_lane = math.ceil(concurrency / lanes)
        return Workload(
            isl=self.req.isl,
            osl=self.req.osl if osl is None else osl,
            concurrency=concurrency,
            num_requests=lanes * max(c_lane, 24),  # short runs: a warm-up of C, then max(C, 24) per lane
            prefix_hit_rate=self.req.prefix_hit_rate,
            spec=self.spec,
            range_ratio=self.range_ratio,
        )

    def sla_clocks(self, sim: SimResult, metric: str) -> Clocks:
        """The SLA statistic of `metric` per clock."""
        return clocks(lambda k: sim.metric(metric, self.req.sla_stat, k))

    def e2e(self, ttft: float, tpot: float) -> float:
        """End-to-end latency from TTFT and TPOT: the first token, then osl - 1 more."""
        return ttft + (self.req.osl - 1) * tpot

    def ratios(self, ttft: float, tpot: float) -> dict[Miss, float]:
        """Each latency limit's value over the limit (<= 1 meets it)."""
        req = self.req
        values: dict[Miss, tuple[float, float | None]] = {
            "ttft": (ttft, req.ttft_ms),
            "tpot": (tpot, req.tpot_ms),
            "e2e": (self.e2e(ttft, tpot), req.e2e_ms),
        }
        return {name: value / limit for name, (value, limit) in values.items() if limit}

    def misses(self, ttft: float, tpot: float) -> list[Miss]:
        return [name for name, r in self.ratios(ttft, tpot).items() if r > 1.0]

    def closeness(self, ttft: float, tpot: float) -> float:
        """How far a point is from the SLA: the worst ratio of value to limit (<= 1 meets it)."""
        return max(self.ratios(ttft, tpot).values(), default=0.0)
