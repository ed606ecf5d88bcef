"""A continuous-batching engine lane: request state, KV accounting and the engine's scheduling policy.

Each step (vLLM V1 and TensorRT-LLM, "mixed"): every decoding request gets its token(s) first; then
requests part-way through their prompt continue (chunked prefill); then waiting requests are admitted in
arrival order while the token budget (max_num_batched_tokens), the sequence limit (max_num_seqs) and the KV
cache allow. SGLang ("separate") runs pending prompt chunks as a step of their own, with the whole budget,
before any decode step. An engine that reserves KV for future output (SGLang's new-token ratio, TensorRT-LLM's
no-evict policy) admits a request only if the cache also holds all of its output, all of the output of the
requests admitted before it in the same step, and that share of the remaining output of the requests admitted
earlier (SGLang's PrefillAdder.add_one_req charges a new request its whole max_new_tokens and running ones
new_token_ratio x theirs). SGLang counts at most `reserve_clip` (CLIP_MAX_NEW_TOKENS, 4096) of any
request's remaining output in that sum. When the KV cache cannot hold the decodes' next tokens, the most
recently admitted request is preempted and later recomputed (vLLM V1; SGLang's `retract_decode` picks the
request with the fewest output tokens, the same one for requests admitted in order, then restarts its
new-token ratio from the share of their output the remaining requests will have emitted
`retract_ratio_steps` steps on, so that it admits less until the ratio has decayed again, and queues the
retracted request behind the waiting ones, where vLLM puts it first). SGLang also stops admitting once a
request does not fit (`running_batch.batch_is_full`) until a running request finishes or is retracted, where
the others try again at every scheduling point.

TensorRT-LLM can hold new prompts back while decodes run (the hold counts engine iterations; both are off by
default). Its attention-DP balancing (`attention_dp_config.enable_balance`) admits new prompts only when every
attention-DP rank has one to schedule, so that the ranks, which step together, prefill together; it gives up
after `timeout_iters` iterations, or at once when some rank has no decodes, and when all ranks are ready and
all decode it may wait `batching_wait_iters` more. Its counter counts every iteration since the last release,
with or without a waiting prompt, and restarts at the timeout. Its context batching wait
(`batch_wait_timeout_iters`, `batch_wait_max_tokens_ratio`) holds new prompts until the step's tokens reach
that share of the token budget or the timeout passes. Both rules are recalled from TensorRT-LLM's PyExecutor
(`_balance_adp_requests`, `_waiting_requests`), whose source could not be read here. A lane stands for every
rank alike, so the other ranks are not simulated: each is taken to get its next request after an exponential
wait with this lane's mean gap between arrivals (engine iterations per arrival so far), so all of the other
R - 1 ranks have one after H(R - 1) = 1 + 1/2 + ... + 1/(R - 1) mean gaps, their expected maximum.

Decoding requests are not touched one by one: they share a counter G of tokens each has emitted since the
start, and a request stores G at its entry, so a stretch of identical decode steps (nothing arrives, finishes
or is admitted) is one update however long it is. This is what makes 1,000 requests cost milliseconds.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field


@dataclass(slots=True, eq=False)
class Request:
    idx: int
    prompt: int  # tokens to have in the KV cache before decoding (grows after a preemption: recompute)
    osl: int
    cached: int  # prefix-cache tokens, present without compute
    arrival: tuple = ()  # clocks (nominal, low, high), seconds
    first: tuple | None = None
    finish: tuple | None = None
    computed: int = 0  # prompt tokens in the KV cache
    out: float = 0.0  # output tokens emitted before the current decode entry
    g0: float = 0.0  # the shared counter G when this request started decoding
    ctx0: int = 0  # its KV tokens at that moment
    epoch: int = 0  # bumps on preemption, invalidating stale heap entries
    preemptions: int = 0
    over_clip: bool = False  # counted in the lane's decodes with more output left than reserve_clip

    @property
    def target(self) -> float:
        return self.g0 + self.osl - self.out


@dataclass(slots=True)
class Batch:
    steps: int  # identical steps this batch stands for (a decode stretch), 1 otherwise
    decodes: int
    kv_mean: float
    chunks: list  # (request, new_tokens, past_tokens)
    duration: tuple  # seconds, per clock, for all steps


FRONTEND_MAX_BUSY = 0.95


@dataclass(slots=True)
class LaneLimits:
    max_num_batched_tokens: int
    max_num_seqs: int
    chunked_prefill: bool
    kv_capacity: float  # bytes per GPU for this lane's sequences
    kv_fixed: float  # bytes per sequence regardless of length (windows, compressor state)
    kv_per_token: float  # bytes per cached token
    tokens_per_step: float = 1.0  # expected tokens a decoding sequence emits per step (speculative decoding)
    verify_tokens: int = 1  # tokens a decoding sequence takes from the budget (1 + draft tokens)
    separate_prefill: bool = False  # prompt chunks and decodes never share a step; prompts go first (SGLang)
    reserve: float = 0.0  # share of running requests' remaining output kept free in the KV cache ...
    reserve_min: float = 0.0  # ... falling linearly to this over reserve_decay_steps decode steps (0: never)
    reserve_decay_steps: int = 0
    reserve_clip: int = 0  # at most this many of a request's remaining output tokens are reserved (0: all)
    # SGLang's retraction (0: vLLM's preemption): the reserve restarts counting this many more steps of
    # output, and the retracted request queues behind the waiting ones
    retract_ratio_steps: int = 0
    # a request refused for KV stops admission until a running request finishes or is retracted (SGLang's
    # running_batch.batch_is_full); otherwise admission is tried again at every scheduling point
    admission_latch: bool = False
    frontend_s: float = 0.0  # API-server time per request before the scheduler sees it (serial) ...
    frontend_token_s: float = 0.0  # ... and per prompt token
    frontend_out_token_s: float = 0.0  # API-server time per output token streamed, which slows the above
    balance_ranks: int = 0  # attention-DP ranks new prompts are balanced over (0: no balancing) ...
    balance_timeout_iters: int = 0  # ... waiting at most this many iterations since the last release ...
    balance_wait_iters: int = 0  # ... and this many more once every rank is ready and decoding
    batch_wait_iters: int = 0  # context batching wait: at most this many iterations (0: off) ...
    batch_wait_tokens: float = 0.0  # ... until a step would carry this many tokens
    # the API server streams every output token through the same serial queue that takes requests in, and a
    # token reaches the client when that queue has handled it (SGLang's one TokenizerManager process)
    frontend_streams: bool = False

    @property
    def holds(self) -> bool:
        """Whether new prompts may be held back while decodes run."""
        return bool(self.balance_ranks or self.batch_wait_iters)

    def frontend_cost_s(self, prompt: int, decode_rate: float) -> float:
        """API-server time to take in a request while the lane streams decode_rate tokens/s: its own work,
        stretched by the share of the CPU that streaming leaves (at most 20x: a saturated server still
        turns); with frontend_streams the streaming is queued work of its own (Lane.stream_out)."""
        work = self.frontend_s + self.frontend_token_s * prompt
        if self.frontend_streams:
            return work
        busy = min(self.frontend_out_token_s * decode_rate, FRONTEND_MAX_BUSY)
        return work / (1.0 - busy)

    def reserve_at(self, decode_steps: int, start: float | None = None) -> float:
        """The reserve `decode_steps` after it was `start` (None: the engine's starting reserve); it falls by
        the same amount every step whatever it started from (SGLang's new_token_ratio_decay)."""
        start = self.reserve if start is None else start
        if not self.reserve_decay_steps:
            return start
        fall = (self.reserve - self.reserve_min) * decode_steps / self.reserve_decay_steps
        return max(self.reserve_min, start - fall)


@dataclass
class LaneStats:
    steps: int = 0
    busy_decode_s: float = 0.0  # time in decode-only steps
    busy_mixed_s: float = 0.0  # time in steps carrying prefill
    decode_token_steps: float = 0.0  # sum over steps of decoding sequences (mean batch = this / decode steps)
    decode_steps: int = 0
    prefill_tokens: int = 0
    blocked_kv: int = 0  # scheduling rounds where a waiting request did not fit the KV cache
    blocked_seqs: int = 0  # ... where max_num_seqs was reached with requests waiting
    preemptions: int = 0
    peak_kv_frac: float = 0.0
    itl: list = field(default_factory=list)  # (seconds per clock, weight): per-chunk gaps, pooled


class Lane:
    """One scheduler over one lane's requests. `price_decode(n, kv)` and `price_mixed(chunks, n, kv)` give
    step times in us per clock (nominal, low, high)."""

    def __init__(self, limits: LaneLimits, price_decode, price_mixed):
        self.lim = limits
        self.price_decode, self.price_mixed = price_decode, price_mixed
        self.waiting: deque[Request] = deque()
        self.prefilling: list[Request] = []
        self.running: list[Request] = []  # admission order (the preemption victim is the last)
        self.heap: list = []  # (target G, idx, epoch, request) of decoding requests
        self.num_decoding = 0
        self.G = 0.0
        self.sum_ctx0 = 0.0  # sum of ctx0 - g0 over decoding requests: their KV tokens = sum + n * G
        self.sum_target = 0.0  # sum of target G over decoding requests: their remaining output = sum - n * G
        self.prefill_tokens = 0  # KV tokens held by requests still in prefill
        self.clock = [0.0, 0.0, 0.0]
        self.emitted = 0.0  # output tokens emitted, all requests
        self.completed = 0  # requests finished, all of them
        self.busy = False
        self.frontend = bool(limits.frontend_s or limits.frontend_token_s)  # an API server to pass through
        self.frontend_free = 0.0  # when the API server is next free (drive clock)
        self.decode_rate = 0.0  # output tokens/s of the last decode step (drive clock)
        self.arrived = 0  # requests handed to this scheduler
        self.held = 0  # iterations counted by the hold rule (see the module docstring)
        self.holding = False  # the step under way held new prompts back
        # expected maximum, in mean arrival gaps, of the other ranks' waits for their next request
        self.others_wait = sum(1.0 / k for k in range(1, limits.balance_ranks))
        # where the reserve restarted after a retraction (None: never)
        self.reserve_start: float | None = None
        self.reserve_step0 = 0  # ... at this many decode steps
        # decoding requests with more output left than reserve_clip: a heap of the G at which each falls to
        # the clip, and the sum and count of (target G - clip) over them (reserved_tokens takes that off)
        self.over_heap: list = []
        self.over_sum = 0.0
        self.over_n = 0
        self.latched = False  # admission stopped until a running request leaves (admission_latch)
        self.stats = LaneStats()

    # ---- KV ----------------------------------------------------------------------------------------------
    def kv_tokens(self) -> float:
        return self.sum_ctx0 + self.num_decoding * self.G + self.prefill_tokens

    def kv_bytes(self) -> float:
        return len(self.running) * self.lim.kv_fixed + self.kv_tokens() * self.lim.kv_per_token

    def reserved_tokens(self, ratio: float) -> float:
        """KV tokens held back for the remaining output of admitted requests (engines that reserve); a request
        counts at most reserve_clip of its own."""
        tps = self.lim.tokens_per_step
        clip = self.lim.reserve_clip
        decoding = self.sum_target - self.num_decoding * self.G
        if self.over_n:
            heap, G = self.over_heap, self.G
            while heap and heap[0][0] <= G:  # these are down to the clip now
                cross, _, epoch, req = heapq.heappop(heap)
                if epoch == req.epoch and req.over_clip:
                    self._drop_over(req, cross)
            decoding -= self.over_sum - self.over_n * G
        if clip:
            prefilling = sum(min(r.osl - r.out, clip) for r in self.prefilling)
        else:
            prefilling = sum(r.osl - r.out for r in self.prefilling)
        return ratio * (decoding / tps + prefilling)

    def _drop_over(self, req: Request, cross: float) -> None:
        req.over_clip = False
        self.over_sum -= cross
        self.over_n -= 1

    def reserve_now(self) -> float:
        """The share of remaining output reserved now (after a retraction, decaying from its restart)."""
        steps = self.stats.decode_steps - self.reserve_step0
        return self.lim.reserve_at(steps, self.reserve_start)

    # ---- arrivals ----------------------------------------------------------------------------------------
    def add(self, req: Request) -> None:
        self.arrived += 1
        self.waiting.append(req)

    # ---- holding new prompts back (TensorRT-LLM) ---------------------------------------------------------
    def hold_steps(self, n: int) -> int:
        """Iterations the waiting requests are still held before admission (0: admit now)."""
        lim = self.lim
        if not n or not self.waiting:  # a rank without decodes releases at once (no decode to protect)
            return 0
        if lim.balance_ranks:
            ready = self.others_wait * self.stats.steps / self.arrived
            if ready < lim.balance_timeout_iters:
                limit = ready + lim.balance_wait_iters
            else:
                limit = lim.balance_timeout_iters
        else:
            tokens = n * lim.verify_tokens
            for req in self.waiting:
                tokens += req.prompt - req.cached
                if tokens >= lim.batch_wait_tokens:
                    return 0
            limit = lim.batch_wait_iters
        return max(0, math.ceil(limit - self.held))

    # ---- scheduling --------------------------------------------------------------------------------------
    def schedule(self, horizon_s: float, drive: int) -> Batch | None:
        """The next step (or stretch of identical decode steps ending before horizon_s), or None when idle."""
        lim = self.lim
        grow = self.num_decoding * lim.tokens_per_step * lim.kv_per_token
        kv_bytes = self.kv_bytes()
        retracted = False
        while self.num_decoding and kv_bytes + grow > lim.kv_capacity:
            self._preempt()
            retracted = True
            grow = self.num_decoding * lim.tokens_per_step * lim.kv_per_token
            kv_bytes = self.kv_bytes()
        if retracted and lim.retract_ratio_steps and lim.reserve:
            self._restart_reserve()
        n = self.num_decoding
        if lim.separate_prefill:  # a prompt step if any prompt can go, else a decode step
            batch = self._prefill_only(grow, kv_bytes) if self.prefilling or self.waiting else None
            if batch is not None:
                return batch
            hold = 0
            chunks = []
        elif self.prefilling or self.waiting:
            hold = self._hold(n) if lim.holds else 0
            chunks = self._chunks(
                lim.max_num_batched_tokens - n * lim.verify_tokens, grow, kv_bytes, not hold
            )
        else:
            hold = 0
            self.holding = False
            chunks = []
        if not chunks and not n:
            return None
        kv_mean = self.G + self.sum_ctx0 / n if n else 0.0
        if chunks:
            us = self.price_mixed([(t, p) for _, t, p in chunks], n, kv_mean)
            return Batch(1, n, kv_mean, chunks, (us[0] * 1e-6, us[1] * 1e-6, us[2] * 1e-6))
        return self._stretch(n, kv_mean, horizon_s, drive, grow, kv_bytes, hold)

    def _restart_reserve(self) -> None:
        """SGLang's `retract_decode`: the new-token ratio becomes (output tokens emitted + retract_ratio_steps
        per request) / (their output lengths + 1) over the requests still decoding, at most 1, and decays from
        there."""
        decoding = [r for r in self.running if r.computed >= r.prompt]
        emitted = sum(r.out + self.G - r.g0 for r in decoding)
        ahead = self.lim.retract_ratio_steps * len(decoding)
        self.reserve_start = min(1.0, (emitted + ahead) / (sum(r.osl for r in decoding) + 1))
        self.reserve_step0 = self.stats.decode_steps

    def _hold(self, n: int) -> int:
        """hold_steps, with the counters kept: a release restarts them."""
        hold = self.hold_steps(n)
        if not hold and self.waiting:
            self.held = 0
        self.holding = hold > 0
        return hold

    def _prefill_only(self, grow: float, kv_bytes: float) -> Batch | None:
        """A step of prompt chunks alone, with the whole token budget (the decodes wait for the next step)."""
        chunks = self._chunks(self.lim.max_num_batched_tokens, grow, kv_bytes)
        if not chunks:
            return None
        us = self.price_mixed([(t, p) for _, t, p in chunks], 0, 0.0)
        return Batch(1, 0, 0.0, chunks, (us[0] * 1e-6, us[1] * 1e-6, us[2] * 1e-6))

    def _chunks(self, budget: int, grow: float, kv_bytes: float, admit: bool = True) -> list:
        """Prompt chunks for this step: requests part-way through their prompt continue, then (if `admit`)
        waiting ones are admitted in arrival order while the budget, max_num_seqs and the KV cache (less any
        reserve) allow."""
        lim = self.lim
        per_token = lim.kv_per_token
        free = lim.kv_capacity - kv_bytes - grow
        chunks = []
        for req in self.prefilling:
            if budget <= 0:
                break
            take = min(req.prompt - req.computed, budget, int(free // per_token))
            if take <= 0:
                break
            chunks.append((req, take, req.computed))
            budget -= take
            free -= take * per_token
        waiting = self.waiting
        if not waiting or budget <= 0 or not admit or self.latched:
            return chunks
        st = self.stats
        ratio = self.reserve_now() if lim.reserve else 0.0
        reserved = self.reserved_tokens(ratio) * per_token if ratio else 0.0
        clip = lim.reserve_clip
        while waiting and budget > 0:
            if len(self.running) >= lim.max_num_seqs:
                st.blocked_seqs += 1
                break
            req = waiting[0]
            todo = req.prompt - req.cached
            take = min(todo, budget)
            if not lim.chunked_prefill and take < todo and (chunks or self.num_decoding):
                break
            need = lim.kv_fixed + (req.cached + take) * per_token
            left = req.osl - req.out
            # the whole prompt and all of its output (to the clip) must fit beside the others' reserve
            if ratio:
                reserved += (min(left, clip) if clip else left) * per_token
                need = lim.kv_fixed + req.prompt * per_token + reserved
            if need > free:
                st.blocked_kv += 1
                self.latched = lim.admission_latch
                break
            waiting.popleft()
            req.computed = req.cached
            self.prefill_tokens += req.cached
            self.prefilling.append(req)
            self.running.append(req)
            chunks.append((req, take, req.cached))
            budget -= take
            free -= lim.kv_fixed + (req.cached + take) * per_token
        return chunks

    def _stretch(
        self, n: int, kv_mean: float, horizon_s: float, drive: int, grow: float, kv_bytes: float, cap: int = 0
    ) -> Batch:
        """Decode-only steps repeat unchanged until a request finishes, the next arrival, the KV cache fills
        or (cap) held prompts are released."""
        tps = self.lim.tokens_per_step
        steps = max(1, int(-(-(self.heap[0][0] - self.G) // tps)))  # ceil: steps until the first finish
        if cap:
            steps = min(steps, cap)
        if grow > 0:
            steps = min(steps, max(1, int((self.lim.kv_capacity - kv_bytes) // grow)))
        one = self.price_decode(n, kv_mean)
        if horizon_s != float("inf"):
            gap = horizon_s - self.clock[drive]
            steps = min(steps, max(1, int(gap / (one[drive] * 1e-6)) + 1))
        if steps > 1:  # step time is near-linear in kv: price the stretch at its middle
            one = self.price_decode(n, kv_mean + (steps - 1) * tps / 2)
        return Batch(
            steps, n, kv_mean, [], (one[0] * steps * 1e-6, one[1] * steps * 1e-6, one[2] * steps * 1e-6)
        )

    def _preempt(self) -> None:
        req = self.running.pop()
        self.latched = False
        st = self.stats
        st.preemptions += 1
        req.preemptions += 1
        if req in self.prefilling:
            self.prefilling.remove(req)
            self.prefill_tokens -= req.computed
        else:
            self.num_decoding -= 1
            self.sum_ctx0 -= req.ctx0 - req.g0
            self.sum_target -= req.target
            if req.over_clip:
                self._drop_over(req, req.target - self.lim.reserve_clip)
            req.out += self.G - req.g0
            req.epoch += 1
            req.prompt = req.prompt + int(req.out)  # recompute prompt and output so far
        req.computed = 0
        if self.lim.retract_ratio_steps:  # SGLang's _add_request_to_queue: behind every waiting request
            self.waiting.append(req)
        else:
            self.waiting.appendleft(req)

    # ---- step end ----------------------------------------------------------------------------------------
    def stream_out(self, batch: Batch, firsts: int, end: float, drive: int) -> float:
        """Queue the tokens a batch emitted (each decode step's tokens as the step ends, and `firsts` first
        tokens) on the API server (frontend_streams); returns how long after `end` (drive clock) the server
        has handled them."""
        lim = self.lim
        per_step = batch.decodes * lim.tokens_per_step
        cost = lim.frontend_out_token_s
        first_step_end = end - (batch.steps - 1) * batch.duration[drive] / batch.steps
        start = max(self.frontend_free, first_step_end)
        work = (batch.steps * per_step + firsts) * cost
        self.frontend_free = max(start + work, end + (per_step + firsts) * cost)
        return self.frontend_free - end

    def complete(self, batch: Batch) -> list[Request]:
        """Apply a finished batch at the lane clock; return the requests that finished."""
        st, lim = self.stats, self.lim
        c, d = self.clock, batch.duration
        c[0] += d[0]
        c[1] += d[1]
        c[2] += d[2]
        now = (c[0], c[1], c[2])
        k = batch.steps
        st.steps += k
        if lim.balance_ranks:  # its counter runs every iteration and restarts at the timeout
            self.held += k
            if not self.holding and self.held >= lim.balance_timeout_iters > 0:
                self.held %= lim.balance_timeout_iters
        elif self.holding:
            self.held += k
        done: list[Request] = []
        n = batch.decodes
        if n:
            adv = k * lim.tokens_per_step
            self.G += adv
            self.emitted += n * adv
            st.itl.append(((d[0] / k, d[1] / k, d[2] / k), n * k))
            st.decode_token_steps += n * k
            st.decode_steps += k
            if lim.frontend_out_token_s and d[0] > 0:
                self.decode_rate = n * adv / d[0]
        if batch.chunks:
            st.busy_mixed_s += batch.duration[0]
            for req, take, _ in batch.chunks:
                req.computed += take
                self.prefill_tokens += take
                st.prefill_tokens += take
                if req.computed >= req.prompt:
                    self._start_decoding(req, now, done)
        else:
            st.busy_decode_s += batch.duration[0]
        heap = self.heap
        while heap and heap[0][0] <= self.G + 1e-9:
            _, _, epoch, req = heapq.heappop(heap)
            if epoch != req.epoch or req.finish is not None:
                continue
            self.num_decoding -= 1
            self.sum_ctx0 -= req.ctx0 - req.g0
            self.sum_target -= req.target
            self._finish(req, now, done)
        kv_bytes = (
            len(self.running) * lim.kv_fixed
            + (self.sum_ctx0 + self.num_decoding * self.G + self.prefill_tokens) * lim.kv_per_token
        )  # self.kv_bytes() inline: this runs on every step
        frac = kv_bytes / lim.kv_capacity if lim.kv_capacity > 0 else 1.0
        if frac > st.peak_kv_frac:
            st.peak_kv_frac = frac
        return done

    def _start_decoding(self, req: Request, now: tuple, done: list) -> None:
        self.prefilling.remove(req)
        self.prefill_tokens -= req.computed
        if req.first is None:
            req.first = now
        req.out += 1  # the prefill step samples a token
        self.emitted += 1
        if req.out >= req.osl:
            self._finish(req, now, done)
            return
        req.ctx0, req.g0 = req.computed, self.G
        self.num_decoding += 1
        self.sum_ctx0 += req.ctx0 - req.g0
        self.sum_target += req.target
        heapq.heappush(self.heap, (req.target, req.idx, req.epoch, req))
        clip = self.lim.reserve_clip
        if clip and req.target - self.G > clip:
            cross = req.target - clip
            req.over_clip = True
            self.over_sum += cross
            self.over_n += 1
            heapq.heappush(self.over_heap, (cross, req.idx, req.epoch, req))

    def _finish(self, req: Request, now: tuple, done: list) -> None:
        req.finish = now
        self.completed += 1
        self.running.remove(req)
        if req.over_clip:  # finished before reserved_tokens looked again
            self._drop_over(req, req.target - self.lim.reserve_clip)
        self.latched = False
        done.append(req)
