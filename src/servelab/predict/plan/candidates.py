"""The plan as it is printed and saved: ranked candidates (with their pools when disaggregated) and what the
search considered. Each candidate keeps its simulated point, and the plan its search context, for `explain`;
neither is serialized."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from servelab.predict.engines import EngineProfile
from servelab.predict.plan.context import SearchContext
from servelab.predict.plan.points import Point, PointMode
from servelab.predict.plan.request import PlanRequest


class PoolConfig(BaseModel):
    parallel: dict[str, Any]  # label and fields
    workers: int
    gpus_per_worker: int
    concurrency_per_worker: int | None = None
    ttft_ms: float | None = None


class Candidate(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    rank: int = 0
    mode: PointMode
    parallel: dict[str, Any]  # label and fields (disagg: "prefill | decode" label)
    replicas: int
    gpus: int
    concurrency: int  # requests in flight over all replicas / decode workers
    concurrency_per_replica: int
    ttft_ms: float
    ttft_ms_low: float
    ttft_ms_high: float
    tpot_ms: float
    tpot_ms_low: float
    tpot_ms_high: float
    tok_s_per_gpu: float  # output tokens/s per GPU
    tok_s_per_gpu_low: float  # throughput band (the high step-time bound gives the low throughput)
    tok_s_per_gpu_high: float
    total_tok_s_per_gpu: float  # input + output tokens/s per GPU (InferenceX's tput_per_gpu)
    tok_s_per_user: float  # 1000 / TPOT
    request_rate: float  # requests/s the deployment serves
    percentiles: dict[str, dict[str, float]]
    memory_headroom_gib: float  # KV-cache memory per GPU left after weights, activations and reserve
    kv_utilization: float  # peak fraction of the KV cache in use while simulated
    pareto: bool = False
    meets_sla: bool
    limits: list[str]
    prefill: PoolConfig | None = None
    decode: PoolConfig | None = None
    kv_transfer_ms: float | None = None
    # share of the simulated kernel time by source (measured, ..., roofline): predict.provenance
    kernel_time_by_source: dict[str, float] = Field(default_factory=dict)
    # what the low / high fields claim and where they came from (predict/plan/bands.py), and the
    # kernel-source band (the step model's low and high op times through the simulation)
    band: dict[str, Any] | None = None
    kernel_band: dict[str, list[float]] | None = None
    point: Point = Field(exclude=True, repr=False)


class Considered(BaseModel):
    configs: int
    simulations: int
    points: int
    meeting_sla: int
    pareto: int


class Plan(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    version: int = 1
    request: PlanRequest
    model: str
    system: str
    backend: str
    engine: EngineProfile
    candidates: list[Candidate]
    considered: Considered
    dropped: list[str]
    wall_ms: float
    notes: list[str]
    context: SearchContext = Field(exclude=True, repr=False)
