"""vLLM V1's scheduling policy (vllm/v1/core/sched/scheduler.py `Scheduler.schedule`, 0.11+)."""

from __future__ import annotations

from typing import Literal

from servelab.engines.policy import LaneView, R, SchedulingPolicy, StepPlan


class VllmPolicy(SchedulingPolicy):
    """Running requests are scheduled first, then waiting ones, under one token budget
    (max_num_batched_tokens), max_num_seqs and the KV cache; nothing is reserved for future output: when the
    cache fills, a running request is preempted instead."""

    kind: Literal["vllm"] = "vllm"
    # V1's API server is one process whose asyncio loop takes requests in (HTTP, the OpenAI layer, tokenizing)
    # and handles every engine step's outputs (AsyncLLM's output_handler: the EngineCoreOutputs of a step,
    # OutputProcessor.process_outputs detokenizing each request's tokens, the request's queue, its SSE chunk
    # from serving_completions: vllm/v1/engine/async_llm.py, vllm/entrypoints/openai/, 0.25.0), so a token
    # reaches the client when that queue has handled its step; on one H100 host that work was 1.35 ms a
    # request, 520 us a step, 13.75 us a token and 67.2 us an SSE chunk (accuracy/results/
    # api_server_cost_h100.json); a request's outputs its handler has not sent yet are merged into one chunk
    # (RequestOutputCollector.put, vllm/v1/engine/output_processor.py), so a lagging server sheds chunks
    serial_output_stream: bool = True
    # ... but only while a step's outputs fit one slice: output_handler takes a step's outputs in slices of
    # VLLM_V1_OUTPUT_PROC_CHUNK_SIZE (128) requests with `await asyncio.sleep(0)` between them, so each
    # slice's woken handlers send their chunks before the next slice; after the last slice it reads the next
    # step's outputs at once when they are queued (asyncio.Queue.get does not yield then), which finds the
    # handlers of that last slice still unsent: those requests merge. With one slice that is every request;
    # with more, the next step's first slice is other requests, and nothing merges (v1/engine/async_llm.py,
    # vllm/envs.py, 0.25.0)
    output_slice: int | None = 128
    # async scheduling (--async-scheduling): the engine core forms step N+1 while step N runs, keeping a queue
    # of two batches (vllm/v1/engine/core.py EngineCore.step_with_batch_queue, batch_queue_size =
    # the executor's max_concurrent_batches, 2 with async scheduling). A request that reaches the engine core
    # during step N is added at the next turn of its busy loop, after step N+1 was formed, so it joins step
    # N+2. On by default from vLLM 0.14.0 (vllm/config/vllm.py: SchedulerConfig.async_scheduling None is set
    # True unless an option excludes it; 0.13.0 and before: False); servelab.engines.vllm.batch sets it by
    # release.
    async_scheduling: bool = True
    # a waiting request is admitted only if the free KV cache holds all of its tokens, not only the first
    # chunk (vllm/v1/core/sched/scheduler.py `Scheduler.schedule` calls
    # kv_cache_manager.can_fit_full_sequence before allocate_slots while
    # SchedulerConfig.scheduler_reserve_full_isl, True by default from vLLM 0.19.0; 0.18.1 and before check
    # the chunk only); servelab.engines.vllm.batch sets it by release.
    reserve_full_prompt: bool = True

    def form_step(self, lane: LaneView[R]) -> StepPlan:
        """Every decoding request gets its token(s); requests part-way through their prompt continue
        (chunked prefill); then waiting requests are admitted in arrival order, all in one step."""
        budget = lane.lim.max_num_batched_tokens - lane.num_decoding * lane.lim.verify_tokens
        return lane.prompt_chunks(budget), True, 0

    def schedules_ahead(self) -> bool:
        return self.async_scheduling

    def admits_whole_prompt(self) -> bool:
        return self.reserve_full_prompt

    def victim(self, lane: LaneView[R]) -> R:
        """The most recently admitted request; its KV cache is freed and recomputed later."""
        return lane.running[-1]

    def requeue(self, lane: LaneView[R], req: R) -> None:
        """The preempted request goes first in the waiting queue (SGLang puts it last)."""
        lane.waiting.appendleft(req)
