"""A serving engine's scheduling policy: what it decides at each scheduling point, and the lane it decides
for.

The simulator's lane (servelab.predict.serving.engine.Lane) owns the mechanics: request state, KV accounting,
stretches of identical decode steps, statistics. When prompts wait, it asks its policy what the next step
carries (`form_step`: prompt chunks beside the decodes, prompt chunks alone, or decodes alone while new
prompts are held). While it admits requests in queue order under the token budget, max_num_seqs and the KV
cache, the policy says how much of the admitted requests' future output the cache must keep room for
(`reserve_ratio`, counted to at most `reserve_clip` tokens a request), whether a request needs room for its
whole prompt or only for the chunk the step computes (`admits_whole_prompt`) and whether a refusal closes
admission until a running request leaves (`latches_admission`); what it says once for the whole run
(`reserves`, `reserve_clip`, `admits_whole_prompt`, `latches_admission`, `holds`) the lane asks once. When
the cache cannot hold the decodes' next tokens, the lane preempts the policy's `victim` until they fit,
queues each victim again where `requeue` says (its prompt and output so far are recomputed), then calls
`after_preemption`. With a hold rule it reports every step it ran (`after_steps`).

`LaneView` is what a policy may read of a lane and call on it (servelab.engines never imports the
simulator). Each engine's policy is one subclass in its package (engines/<engine>/policy.py);
policy_registry.policy_for gives it. This base class is the policy of servelab's kernels-only `torch`
pseudo-backend: decodes first, then prompt chunks under the rest of the token budget, nothing reserved for
future output, and the most recently admitted request preempted and queued first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any, Protocol, Self, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from servelab.errors import ServelabError, closest

KERNELS_ONLY = "torch"  # servelab's pseudo-backend of kernels alone: no engine, no overheads


class RequestView(Protocol):
    """A request as a policy sees it."""

    prompt: int  # tokens to have in the KV cache before decoding (grows after a preemption: recompute)
    osl: int  # output tokens in all
    cached: int  # prompt tokens found in the prefix cache
    out: float  # output tokens emitted before its current decode entry


class LimitsView(Protocol):
    """The lane's limits a policy reads."""

    @property
    def max_num_batched_tokens(self) -> int: ...

    @property
    def verify_tokens(self) -> int: ...  # tokens a decoding request takes from the budget (1 + draft tokens)

    @property
    def dp_ranks(self) -> int: ...  # attention-DP ranks stepping together, each with requests (1: alone)


class StatsView(Protocol):
    @property
    def steps(self) -> int: ...  # engine iterations run

    @property
    def decode_steps(self) -> int: ...  # iterations that decoded


R = TypeVar("R", bound=RequestView)


class LaneView(Protocol[R]):
    """A lane as its policy sees it: its queues and counts, the state policies keep on it, and the one
    mechanic a policy calls (`prompt_chunks`)."""

    @property
    def lim(self) -> LimitsView: ...

    @property
    def stats(self) -> StatsView: ...

    @property
    def waiting(self) -> deque[R]: ...  # not admitted yet, in the order admission tries them

    @property
    def running(self) -> list[R]: ...  # admitted, in admission order

    @property
    def num_decoding(self) -> int: ...

    @property
    def arrived(self) -> int: ...  # requests handed to this lane so far

    @property
    def holds(self) -> bool: ...  # the policy's holds(), asked once for the lane's limits

    reserve_start: float | None  # the reserve ratio restarted at this (None: never restarted) ...
    reserve_step0: int  # ... after this many decode steps
    held: int  # iterations counted by a hold rule
    holding: bool  # the step under way holds new prompts back

    def prompt_chunks(self, budget: int, admit: bool = True) -> list[tuple[R, int, int]]:
        """The step's prompt chunks under `budget` tokens and the free KV cache: requests part-way through
        their prompt continue, then (if `admit`) waiting requests are admitted in queue order."""
        ...

    def decoding_output(self) -> tuple[int, float, int]:
        """Over the requests decoding now: how many, the output tokens they have emitted, and their output
        lengths."""
        ...


# What the next step carries: its prompt chunks (request, new prompt tokens, tokens already in its KV cache);
# whether the decoding requests take their next token(s) in the same step; and the hold (new prompts are held:
# at most this many decode-only steps before the lane asks again; 0: none). A plain tuple: one is made at
# every step that prompts wait for.
StepPlan = tuple[list[tuple[Any, int, int]], bool, int]


class SchedulingPolicy(BaseModel):
    """The rules an engine's scheduler follows, with its parameters as fields (their defaults: the engine's).
    This base class is the kernels-only backend's; an engine's subclass overrides what its engine does
    differently."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: str = KERNELS_ONLY  # the registry's name for this policy, so that a dump says which it is
    # the API server streams every output token through the one serial queue that also takes requests in,
    # and a client sees a token when that queue has handled it
    serial_output_stream: bool = False
    # ... handling a step's outputs in slices of this many requests, each slice's chunks sent before the next
    # slice is taken in: a lagging stream merges a request's tokens into one chunk only while a step's
    # outputs fit one slice (None: they always do)
    output_slice: int | None = None

    # ---- what a step carries --------------------------------------------------------------------------
    def form_step(self, lane: LaneView[R]) -> StepPlan:
        """The next step while prompts wait: decodes first, then prompt chunks."""
        return self.decodes_first(lane)

    def decodes_first(self, lane: LaneView[R], admit: bool = True) -> StepPlan:
        """Every decoding request gets its token(s), then prompt chunks fill the rest of the token budget
        (continuing prompts first, then admissions if `admit`), all in one step."""
        budget = lane.lim.max_num_batched_tokens - lane.num_decoding * lane.lim.verify_tokens
        return lane.prompt_chunks(budget, admit), True, 0

    # ---- a disaggregated decode worker ---------------------------------------------------------------
    def joins_arrived_requests(self) -> bool:
        """Whether a request that reaches a disaggregated decode worker with its prompt's KV cache and the
        first token the prefill worker sampled joins the decoding batch as it is (its first step there is a
        decode step, which samples its second token), or has its last prompt token computed again, a
        one-token prompt chunk whose step samples the first token (False, kept where nothing says
        otherwise)."""
        return False

    # ---- admission ---------------------------------------------------------------------------------------
    def reserves(self) -> bool:
        """Whether admission keeps KV room for future output at all (asked once per lane; False: the lane
        never asks reserve_ratio)."""
        return False

    def reserve_ratio(self, lane: LaneView[R]) -> float:
        """The share of the running requests' remaining output the KV cache keeps free when a request is
        admitted (0: none, and a request needs room only for what the step computes; above 0 it also needs
        room for all of its own output)."""
        return 0.0

    def admits_whole_prompt(self) -> bool:
        """Whether a waiting request is admitted only when the free KV cache holds its whole prompt, not only
        the chunk this step computes (asked once per lane; False: the chunk)."""
        return False

    def reserve_clip(self) -> int:
        """At most this many of a request's remaining output tokens count in the reserve (0: all)."""
        return 0

    def latches_admission(self) -> bool:
        """Whether a waiting request refused for KV closes admission until a running request finishes or is
        preempted (False: admission is tried again at the next step)."""
        return False

    # ---- preemption --------------------------------------------------------------------------------------
    def victim(self, lane: LaneView[R]) -> R:
        """The request to preempt when the KV cache cannot hold the decodes' next tokens: the most recently
        admitted."""
        return lane.running[-1]

    def requeue(self, lane: LaneView[R], req: R) -> None:
        """Queue a preempted request again: first, so that it is recomputed before any other is admitted."""
        lane.waiting.appendleft(req)

    def after_preemption(self, lane: LaneView[R]) -> None:
        """The decodes' next tokens fit again after one or more preemptions."""

    # ---- when a step is formed ------------------------------------------------------------------------
    def schedules_ahead(self) -> bool:
        """Whether the scheduler forms the next step while the current one runs (a queue of two batches): a
        request that reaches it during a step then joins the step after the next, not the next (False: each
        step is formed when the last one ends)."""
        return False

    # ---- holding new prompts back --------------------------------------------------------------------
    def holds(self, limits: LimitsView) -> bool:
        """Whether this policy may hold new prompts back while decodes run, on a lane with these limits."""
        return False

    def after_steps(self, lane: LaneView[R], steps: int) -> None:
        """`steps` iterations ran (called only where `holds`)."""

    # ---- settings ----------------------------------------------------------------------------------------
    def with_settings(self, settings: Mapping[str, object], engine: str) -> Self:
        """This policy with some of its fields set (an engine's launch settings); one line naming the field
        otherwise."""
        fields = [name for name in type(self).model_fields if name != "kind"]
        for key in settings:
            if key not in fields:
                raise ServelabError(
                    f"{engine} has no scheduling setting {key!r}{closest(key, fields)}; "
                    f"its settings: {', '.join(fields)}",
                    field=key,
                )
        try:
            return type(self).model_validate({**self.model_dump(), **settings})
        except ValidationError as e:
            raise ServelabError.from_validation(e, f"{engine} scheduling settings") from None
