"""What a plan is asked for (PlanRequest), and the error a plan raises in the request's own terms."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servelab.engines import Engine
from servelab.errors import ServelabError
from servelab.readable import typed

Mode = Literal["agg", "disagg", "both"]
SlaStat = Literal["mean", "p50", "p90", "p99"]

# The SLA a plan gets when none is given: interactive serving (chat, coding assistants). A first token
# within 2 s is MLPerf Inference's TTFT limit for its Llama 2 70B server scenario; 50 ms per output token
# (20 tokens/s per user) is a little looser than its interactive scenario's 40 ms and about three times
# reading speed. A plan without latency limits ranks the most saturated deployment first (a TPOT near
# 100 ms), which no interactive service would run.
INTERACTIVE_TTFT_MS = 2000.0
INTERACTIVE_TPOT_MS = 50.0


class PlanRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(
        "sgl-project/DeepSeek-V4-Flash-FP8", description="Model name, checkpoint id or config.json"
    )
    system: str = Field("h200_sxm", description="System name (servelab systems)")
    # at most 4096: the search enumerates every split and replica count, and its time grows with the GPUs
    gpus: int = Field(8, ge=1, le=4096, description="GPUs to deploy on")
    isl: int = Field(8192, ge=1, description="Input tokens per request")
    osl: int = Field(1024, ge=1, description="Output tokens per request")
    ttft_ms: float | None = Field(
        INTERACTIVE_TTFT_MS,
        gt=0,
        description="TTFT limit in ms (default: interactive serving; None: no limit)",
    )
    tpot_ms: float | None = Field(
        INTERACTIVE_TPOT_MS,
        gt=0,
        description="TPOT limit in ms (default: interactive serving; None: no limit)",
    )
    e2e_ms: float | None = Field(
        None, gt=0, description="End-to-end latency limit in ms: TTFT + (osl - 1) x TPOT, each at --sla-stat"
    )
    request_rate: float | None = Field(
        None, gt=0, description="Requests/s the deployment must serve at least (within the latency limits)"
    )
    sla_stat: SlaStat = Field("mean", description="Statistic the limits apply to: mean, p50, p90, p99")
    backend: str = Field(Engine.VLLM.value, description="torch | vllm | sglang | trtllm")
    mode: Mode = Field("both", description="agg | disagg | both")
    top: int = Field(10, ge=1, description="Candidates to list (Pareto-front ones are always in the JSON)")
    weight_dtype: str | None = Field(None, description="Override weight dtype")
    kv_dtype: str | None = Field(None, description="Override KV-cache dtype: bf16 or fp8")
    prefix_hit_rate: float = Field(
        0.0, ge=0.0, lt=1.0, description="Fraction of each prompt in the prefix cache"
    )
    spec_tokens: int = Field(0, ge=0, le=16, description="Speculative (MTP / draft) tokens per step")
    acceptance: float = Field(0.7, ge=0.0, le=1.0, description="Per-token acceptance rate of draft tokens")
    # engine profile overrides (max_num_batched_tokens, max_num_seqs, ...)
    engine: dict[str, int | float | bool] = {}
    calibration: str | None = Field(
        None,
        description="Engine calibration file (servelab calibrate engines --out); default: the shipped one",
    )

    def sla_text(self) -> str:
        """The latency limits in words, or "no SLA"."""
        limits = [
            f"{name} <= {typed(value)} ms"
            for name, value in (("TTFT", self.ttft_ms), ("TPOT", self.tpot_ms), ("E2E", self.e2e_ms))
            if value is not None
        ]
        return " and ".join(limits) or "no SLA"

    @property
    def default_sla(self) -> bool:
        """Whether the latency limits are the interactive default (neither was given)."""
        return not {"ttft_ms", "tpot_ms"} & self.model_fields_set


FieldNamer = Callable[[str], str]


class PlanError(ServelabError):
    """A plan that cannot be made as asked. The message names request fields (and `rank`, the candidate to
    explain) through a namer, so a front end can name them its own way: the CLI as its flags."""

    def __init__(self, compose: Callable[[FieldNamer], str]):
        self.compose = compose
        super().__init__(compose(str))

    def named(self, name: FieldNamer) -> str:
        return self.compose(name)
