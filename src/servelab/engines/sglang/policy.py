"""SGLang's scheduling policy (0.5: python/sglang/srt/managers/scheduler.py and schedule_policy.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from servelab.engines.policy import LaneView, R, SchedulingPolicy, StepPlan


class SglangPolicy(SchedulingPolicy):
    """A batch of prompt chunks runs before the decode batch while prompts wait; admission keeps KV room for
    the running requests' future output by a new-token ratio that decays as decoding goes on; a retraction
    requeues behind the waiting requests and restarts the ratio; a refusal closes admission until the batch
    shrinks; the API server streams every output token through one serial process."""

    kind: Literal["sglang"] = "sglang"

    # the TokenizerManager is one process (tokenizer_worker_num 1): the HTTP server, the OpenAI layer,
    # tokenizing and the streaming of every output token (TokenizerManager._handle_batch_output,
    # _wait_one_response, serving_completions' chunk, the HTTP write) share one asyncio loop, so a token
    # reaches the client when that queue has handled it; past its capacity the backlog delays every first
    # token alike and holds clients back
    serial_output_stream: bool = True
    # PrefillAdder (schedule_policy.py) keeps new_token_ratio x the remaining output of the running requests
    # free: SGLANG_INIT_NEW_TOKEN_RATIO at start ...
    init_new_token_ratio: float = Field(0.7, ge=0.0, le=1.0)
    # ... falling linearly (new_token_ratio_decay) to 0.7 x 0.14 ...
    min_new_token_ratio: float = Field(0.098, ge=0.0, le=1.0)
    # ... over this many decode steps (0: it stays at its start)
    new_token_ratio_decay_steps: int = Field(600, ge=0)
    # CLIP_MAX_NEW_TOKENS (env SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION): at most this many of a request's
    # remaining output tokens are charged at admission (add_one_req, _update_prefill_budget) and counted in
    # the running requests' reserve (_get_running_request_total_token_offset); 0: all of them
    clip_max_new_tokens: int = Field(4096, ge=0)
    # SGLANG_RETRACT_DECODE_STEPS: after retract_decode the ratio restarts counting this many more decode
    # steps of every remaining request's output
    retract_decode_steps: int = Field(20, ge=0)
    # a request refused for KV sets running_batch.batch_is_full, which keeps get_new_batch_prefill shut until
    # update_running_batch finds the batch shrunk (a request finished or retracted)
    admission_latch: bool = True
    # --enable-mixed-chunk: prompt chunks join the decode batch instead of running in a step of their own
    mixed_chunk: bool = False
    # the overlap scheduler (Scheduler.event_loop_overlap, on unless --disable-overlap-schedule; read in the
    # sdists of 0.5.1.post1, 0.5.9 and 0.5.10.post1): each turn of the loop takes in the requests that came
    # (recv_requests), forms the next batch (get_next_batch_to_run) and launches it, and only then processes
    # the last batch's result, which waits for that batch to finish. So batch N+1 is formed while batch N
    # runs, and a request that reaches the scheduler during batch N is taken in after N+1 was formed: it
    # joins batch N+2, prefill batch or decode batch alike. server_args.py turns it off for pipeline
    # parallelism, speculative decoding without spec v2, mamba's no_buffer radix cache and diffusion models
    overlap_schedule: bool = True

    def form_step(self, lane: LaneView[R]) -> StepPlan:
        """get_next_batch_to_run (scheduler.py): a new prefill batch, with the whole chunked-prefill budget,
        runs before the running decode batch, which waits for the next step; decodes run when no prompt
        can go. With mixed_chunk, prompt chunks ride with the decodes (decode first)."""
        if self.mixed_chunk:
            return self.decodes_first(lane)
        chunks = lane.prompt_chunks(lane.lim.max_num_batched_tokens)
        return (chunks, False, 0) if chunks else ([], True, 0)

    def schedules_ahead(self) -> bool:
        return self.overlap_schedule

    def joins_arrived_requests(self) -> bool:
        """disaggregation/decode.py: a transferred request takes the first output id the prefill side put in
        its metadata buffer, a prebuilt batch that runs no forward pass streams it, and the request is
        merged into the running decode batch (recalled: the source is too large to fetch here)."""
        return True

    def reserves(self) -> bool:
        return self.init_new_token_ratio > 0

    def reserve_ratio(self, lane: LaneView[R]) -> float:
        """The new-token ratio now: it decays from the start, or from where the last retraction restarted
        it. add_one_req charges the request it admits all of its output (to the clip) on top."""
        return self.new_token_ratio(lane.stats.decode_steps - lane.reserve_step0, lane.reserve_start)

    def new_token_ratio(self, decode_steps: int, start: float | None = None) -> float:
        """The ratio `decode_steps` after it was `start` (None: init_new_token_ratio); it falls by the same
        amount every step whatever it started from."""
        start = self.init_new_token_ratio if start is None else start
        if not self.new_token_ratio_decay_steps:
            return start
        fall = (
            (self.init_new_token_ratio - self.min_new_token_ratio)
            * decode_steps
            / self.new_token_ratio_decay_steps
        )
        return max(self.min_new_token_ratio, start - fall)

    def reserve_clip(self) -> int:
        return self.clip_max_new_tokens

    def latches_admission(self) -> bool:
        return self.admission_latch

    def victim(self, lane: LaneView[R]) -> R:
        """retract_decode (update_running_batch) retracts the request with the fewest output tokens (ties:
        the longest prompt); for requests admitted in order that is the most recently admitted."""
        return lane.running[-1]

    def requeue(self, lane: LaneView[R], req: R) -> None:
        """Scheduler._add_request_to_queue appends: the retracted request waits behind every waiting one."""
        lane.waiting.append(req)

    def after_preemption(self, lane: LaneView[R]) -> None:
        """retract_decode sets the new-token ratio to (output tokens emitted + retract_decode_steps per
        request) / (their max_new_tokens + 1) over the requests still decoding, at most 1; it decays from
        there, so admission takes fewer requests until it has fallen again."""
        n, emitted, lengths = lane.decoding_output()
        lane.reserve_start = min(1.0, (emitted + self.retract_decode_steps * n) / (lengths + 1))
        lane.reserve_step0 = lane.stats.decode_steps
