"""The simulated workload: an arrival process x request lengths, plus the engine features that
change what each request costs (speculative decoding, prefix-cache hits).

Open-loop send times come from servelab.traffic.schedule.arrival_offsets and request lengths from
servelab.traffic.lengths, the rules the load generator uses, so a simulated run and a measured random-dataset
run with the same seed, load and range ratio see requests of the same lengths at the same offsets.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, model_validator

from servelab.errors import ServelabError
from servelab.traffic.lengths import SIMULATOR_RANGE_RATIO
from servelab.traffic.schedule import arrival_offsets


class SpecDecoding(BaseModel):
    """MTP or a draft model proposing `draft_tokens` per step; each is accepted with probability `acceptance`
    given the previous one was (the usual geometric model), and the target model verifies them all in one
    step."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    draft_tokens: int = Field(0, ge=0, le=16)
    acceptance: float = Field(0.7, ge=0.0, le=1.0)

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens a decoding sequence emits per step: the verified token plus the accepted drafts."""
        return 1.0 + sum(self.acceptance**i for i in range(1, self.draft_tokens + 1))


class Workload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    isl: int = Field(..., ge=1, description="input tokens per request")
    osl: int = Field(..., ge=1, description="output tokens per request")
    concurrency: int | None = Field(
        None, ge=1, description="closed loop: requests in flight (vLLM --max-concurrency)"
    )
    rate: float | None = Field(None, gt=0, description="open loop: requests per second")
    burstiness: float = Field(1.0, gt=0, description="gamma shape of the gaps; 1 = Poisson, lower = burstier")
    num_requests: int | None = Field(None, ge=1, description="requests measured (default: sized to the load)")
    warmup: int | None = Field(
        None, ge=0, description="closed loop: requests run before measuring (default: C)"
    )
    seed: int = 0
    range_ratio: float = Field(
        SIMULATOR_RANGE_RATIO,
        ge=0.0,
        lt=1.0,
        description="request lengths uniform in mean x [1 - r, 1 + r] (vLLM --random-range-ratio; "
        "servelab.traffic.lengths says why the simulator's default spread is not 0)",
    )
    prefix_hit_rate: float = Field(
        0.0, ge=0.0, lt=1.0, description="fraction of each prompt already in the cache"
    )
    spec: SpecDecoding = SpecDecoding()

    @model_validator(mode="after")
    def _one_load(self) -> Workload:
        if (self.concurrency is None) == (self.rate is None):
            raise ServelabError("workload: give exactly one of concurrency (closed loop) or rate (open loop)")
        return self

    @property
    def closed(self) -> bool:
        return self.concurrency is not None

    @property
    def clients(self) -> int:
        """Closed loop: the requests in flight."""
        if self.concurrency is None:
            raise ServelabError("workload: an open loop has no concurrency")
        return self.concurrency

    @property
    def arrival_rate(self) -> float:
        """Open loop: requests per second."""
        if self.rate is None:
            raise ServelabError("workload: a closed loop has no request rate")
        return self.rate

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens a prefix-cache hit skips; at least one token is always computed (it yields the
        logits)."""
        return min(int(self.isl * self.prefix_hit_rate), self.isl - 1)

    def measured(self) -> int:
        if self.num_requests is not None:
            return self.num_requests
        if self.closed:
            return max(2 * self.clients, 64)
        return 256

    def offsets(self) -> list[float]:
        """Open-loop arrival offsets in seconds (vLLM's gamma gaps, shared with `servelab bench`)."""
        return arrival_offsets(self.measured(), self.arrival_rate, self.burstiness, self.seed) or []

    def per_lane(self, lanes: int) -> Workload:
        """The share of this load one lane serves (ranks are fed round-robin; the busiest lane sets the
        pace)."""
        if lanes <= 1:
            return self
        if self.closed:
            c = math.ceil(self.clients / lanes)
            n = math.ceil(self.measured() / lanes)
            return self.model_copy(
                update={
                    "concurrency": c,
                    "num_requests": max(n, 16),
                    "warmup": None if self.warmup is None else math.ceil(self.warmup / lanes),
                }
            )
        return self.model_copy(
            update={
                "rate": self.arrival_rate / lanes,
                "num_requests": max(math.ceil(self.measured() / lanes), 16),
            }
        )
