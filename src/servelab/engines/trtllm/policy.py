"""TensorRT-LLM's scheduling policy (1.x, PyTorch backend: in-flight batching, the CapacityScheduler and
PyExecutor's hold rules)."""

from __future__ import annotations

import math
from functools import cache
from typing import Literal

from pydantic import Field

from servelab.engines.policy import LaneView, LimitsView, R, SchedulingPolicy, StepPlan


class TrtllmPolicy(SchedulingPolicy):
    """In-flight batching: decodes and prompt chunks share a step under max_num_tokens, decodes first. The
    CapacityScheduler's default GUARANTEED_NO_EVICT admits a request only if the KV cache holds all of its
    output beside all of the running requests' remaining output, so nothing is ever evicted.

    Two rules may hold new prompts back while decodes run, both off by default. Attention-DP balancing
    (`attention_dp_config.enable_balance`) admits new prompts only when every attention-DP rank has one to
    schedule, so that the ranks, which step together, prefill together; it gives up after `timeout_iters`
    iterations, or at once when some rank has no decodes, and when all ranks are ready and all decode it may
    wait `batching_wait_iters` more. Its counter counts every iteration since the last release, with or
    without a waiting prompt, and restarts at the timeout. The context batching wait
    (`batch_wait_timeout_iters`, `batch_wait_max_tokens_ratio`) holds new prompts until the step's tokens
    reach that share of the token budget or the timeout passes. Both rules and the defaults of the first (50
    and 10 iterations, AttentionDpConfig) are recalled from PyExecutor (`_balance_adp_requests`,
    `_waiting_requests`), whose source could not be read here.

    A lane stands for every rank alike, so the other ranks are not simulated: each is taken to get its next
    request after an exponential wait with this lane's mean gap between arrivals (engine iterations per
    arrival so far), so all of the other R - 1 ranks have one after H(R - 1) = 1 + 1/2 + ... + 1/(R - 1) mean
    gaps, their expected maximum."""

    kind: Literal["trtllm"] = "trtllm"

    # the share of the running requests' remaining output kept free at admission: GUARANTEED_NO_EVICT, all
    reserve: float = Field(1.0, ge=0.0, le=1.0)
    attention_dp_balance: bool = False  # attention_dp_config.enable_balance
    attention_dp_timeout_iters: int = Field(50, ge=0)  # attention_dp_config.timeout_iters
    attention_dp_batching_wait_iters: int = Field(10, ge=0)  # attention_dp_config.batching_wait_iters
    batch_wait_timeout_iters: int = Field(0, ge=0)  # 0: no context batching wait
    batch_wait_max_tokens_ratio: float = Field(0.0, ge=0.0, le=1.0)  # 0: no context batching wait
    # the overlap scheduler (PyExecutor._executor_loop_overlap; on unless disable_overlap_scheduler, which
    # AIConfigurator's generator sets false for aggregated and decode workers, rule_plugin/trtllm.rule, and
    # InferenceX's single-node launches leave at the default): each iteration fetches the new requests,
    # schedules and launches the next batch, and only then waits for the previous batch to process its
    # result, so a request that arrives while batch N runs joins batch N+2, as in vLLM's async scheduling.
    # Recalled, not read: TensorRT-LLM's source is not on PyPI (its sdists are stubs) and its repository is
    # too large to fetch here. Off here although the engine's default is on: with the shipped calibration,
    # whose step terms were fitted without it, the development points' TTFT got worse (docs/accuracy.md,
    # "SGLang's and TensorRT-LLM's overlap schedulers"); refitted with it on, they were still worse, and so
    # were the calibration rows' leave-one-family-out errors ("TensorRT-LLM's overlap scheduler, refitted")
    overlap_scheduler: bool = False

    def form_step(self, lane: LaneView[R]) -> StepPlan:
        """Decodes first, then prompt chunks under max_num_tokens; new prompts are admitted unless a hold
        rule holds them (the decodes then run alone, for at most the hold)."""
        n = lane.num_decoding
        hold = self._hold(lane, n) if lane.holds else 0
        budget = lane.lim.max_num_batched_tokens - n * lane.lim.verify_tokens
        return lane.prompt_chunks(budget, not hold), True, hold

    def schedules_ahead(self) -> bool:
        return self.overlap_scheduler

    def joins_arrived_requests(self) -> bool:
        """A generation-only request (trtllm-serve disaggregated, Dynamo's decode workers) carries the context
        phase's first token in its disaggregated parameters (first_gen_tokens) and goes on from it in the
        generation batch (recalled from TensorRT-LLM's disaggregated-service documentation, not read here)."""
        return True

    def reserves(self) -> bool:
        return self.reserve > 0

    def reserve_ratio(self, lane: LaneView[R]) -> float:
        return self.reserve

    def balances(self, limits: LimitsView) -> bool:
        """Attention-DP balancing applies: it is on, and two or more ranks step together, each with
        requests."""
        return self.attention_dp_balance and limits.dp_ranks > 1

    def batch_waits(self) -> bool:
        return self.batch_wait_timeout_iters > 0 and self.batch_wait_max_tokens_ratio > 0

    def holds(self, limits: LimitsView) -> bool:
        return self.balances(limits) or self.batch_waits()

    def hold_steps(self, lane: LaneView[R], n: int) -> int:
        """Iterations the waiting requests are still held before admission, with `n` requests decoding (0:
        admit now)."""
        if not n or not lane.waiting:  # a rank without decodes releases at once (no decode to protect)
            return 0
        lim = lane.lim
        limit: float
        if self.attention_dp_balance and lim.dp_ranks > 1:  # balances(), inline: every step
            ready = others_wait(lim.dp_ranks) * lane.stats.steps / lane.arrived
            if ready < self.attention_dp_timeout_iters:
                limit = ready + self.attention_dp_batching_wait_iters
            else:
                limit = self.attention_dp_timeout_iters
        else:
            wanted = self.batch_wait_max_tokens_ratio * lim.max_num_batched_tokens
            tokens = n * lim.verify_tokens
            for req in lane.waiting:
                tokens += req.prompt - req.cached
                if tokens >= wanted:
                    return 0
            limit = self.batch_wait_timeout_iters
        return max(0, math.ceil(limit - lane.held))

    def _hold(self, lane: LaneView[R], n: int) -> int:
        """hold_steps, with the lane's counters kept: a release restarts them."""
        hold = self.hold_steps(lane, n)
        if not hold and lane.waiting:
            lane.held = 0
        lane.holding = hold > 0
        return hold

    def after_steps(self, lane: LaneView[R], steps: int) -> None:
        if self.attention_dp_balance and lane.lim.dp_ranks > 1:  # balances(), inline: every step
            # the counter runs every iteration and restarts at the timeout
            lane.held += steps
            timeout = self.attention_dp_timeout_iters
            if not lane.holding and lane.held >= timeout > 0:
                lane.held %= timeout
        elif lane.holding:
            lane.held += steps


@cache
def others_wait(ranks: int) -> float:
    """The expected maximum, in mean arrival gaps, of the other ranks' waits for their next request:
    H(ranks - 1)."""
    return sum(1.0 / k for k in range(1, ranks))
