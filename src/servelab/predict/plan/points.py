"""What the search builds and compares: engine configs, the loads simulated on them (points) and, for
disaggregated points, their prefill pool and KV transfer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from servelab.predict.memory import MemoryBreakdown
from servelab.predict.serving.aggregated import SimResult
from servelab.predict.serving.pricing import StepPricer
from servelab.specs import Parallel

Clocks = tuple[float, float, float]  # a value under the step model's nominal, low and high step times
Link = Literal["nvlink", "network"]
PointMode = Literal["agg", "disagg"]
Miss = Literal["ttft", "tpot", "e2e"]  # an SLA limit a point misses


def clocks(value: Callable[[int], float]) -> Clocks:
    """`value(clock)` for the nominal, low and high clock."""
    return (value(0), value(1), value(2))


@dataclass
class EngineConfig:
    """One engine (an aggregated replica or a disaggregated worker): a parallel split that fits, with its
    memory, its memoized step prices and the loads tried on it."""

    parallel: Parallel
    mem: MemoryBreakdown
    pricer: StepPricer
    lanes: int
    cap_lane: int  # lane concurrency beyond which only queueing grows (KV or max_num_seqs full)
    tried: dict[int, Point | str] = field(default_factory=dict)  # lane concurrency -> Point or a miss reason

    def parallel_dict(self) -> dict[str, Any]:
        """The split as the plan's JSON shows it: its label and its fields."""
        return {"label": self.parallel.label(), **self.parallel.model_dump()}


@dataclass
class DisaggDetail:
    """The prefill side of a disaggregated point and the KV transfer between the pools."""

    prefill: EngineConfig
    prefill_workers: int
    prefill_rate: float  # requests/s each prefill worker sees
    prefill_ttft_ms: float  # the prefill pool's TTFT (queue + prefill) at that rate
    prefill_sim: SimResult
    kv_transfer_ms: float
    link: Link

    def percentiles(self, decode: SimResult) -> dict[str, dict[str, float]]:
        """The decode worker's percentiles; TTFT's spread comes from the prefill queue, and the transfer and
        the decode worker's first step add their means."""
        first_step_ms = decode.percentiles[0]["ttft_ms"]["mean"]
        prefill_ttft = self.prefill_sim.percentiles[0]["ttft_ms"]
        return {
            **decode.percentiles[0],
            "ttft_ms": {k: v + self.kv_transfer_ms + first_step_ms for k, v in prefill_ttft.items()},
        }


@dataclass
class Point:
    """One config at one load: an aggregated deployment of `replicas` replicas, or a disaggregated one with
    `replicas` decode workers on `config` and its prefill pool in `disagg`."""

    config: EngineConfig
    replicas: int
    c_lane: int
    sim: SimResult
    ttft: Clocks
    tpot: Clocks
    out_tps: Clocks  # per replica (or per deployment for disagg)
    total_tps: Clocks
    gpus: int
    misses: list[Miss]
    disagg: DisaggDetail | None = None

    @property
    def mode(self) -> PointMode:
        return "agg" if self.disagg is None else "disagg"

    @property
    def concurrency_per_replica(self) -> int:
        return self.c_lane * self.config.lanes

    @property
    def concurrency(self) -> int:
        """Requests in flight over all replicas (decode workers)."""
        return self.concurrency_per_replica * self.replicas

    @property
    def request_rate(self) -> float:
        """Requests/s the deployment serves: every replica's (decode worker's) rate."""
        return self.replicas * self.sim.request_tps[0]

    def label(self) -> str:
        decode = self.config.parallel.label()
        if self.disagg is None:
            return decode
        prefill = self.disagg.prefill.parallel.label()
        return f"{self.disagg.prefill_workers}x {prefill} | {self.replicas}x {decode}"

    def xy(self) -> tuple[float, float]:
        """The plan's two axes: output tok/s per GPU and tok/s per user."""
        return (self.out_tps[0] / self.gpus, 1000.0 / self.tpot[0] if self.tpot[0] > 0 else 0.0)
