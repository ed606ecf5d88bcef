"""A continuous-batching engine lane: request state, KV accounting and statistics; the engine's scheduling
policy (servelab.engines.policy, one class per engine) makes the decisions.

At each scheduling point the lane first makes room: while the KV cache cannot hold the decodes' next tokens,
it preempts the policy's victim (its prompt and output so far are recomputed later) and queues it where the
policy says. When prompts wait, the policy forms the step (decodes and prompt chunks together, prompt chunks
alone, or decodes alone while it holds new prompts); the lane supplies the prompt chunks: requests part-way
through their prompt continue (chunked prefill), then waiting requests are admitted in queue order while the
token budget (max_num_batched_tokens), the sequence limit (max_num_seqs) and the KV cache allow. A policy that
reserves KV for future output (its reserve ratio above 0) admits a request only if the cache also holds all
of its output, all of the output of the requests admitted before it in the same step, and that share of the
remaining output of the requests admitted earlier, each request counted to at most the policy's clip; where
the policy latches admission, a refusal closes it until a running request finishes or is preempted. A policy
that admits whole prompts (vLLM from 0.19.0) admits a request only where the cache holds all of its prompt,
not only the chunk this step computes.
Otherwise decodes run alone, as a stretch of identical steps.

Decoding requests are not touched one by one: they share a counter G of tokens each has emitted since the
start, and a request stores G at its entry, so a stretch of identical decode steps (nothing arrives, finishes
or is admitted) is one update however long it is. This is what makes 1,000 requests cost milliseconds.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from heapq import heappop, heappush

from servelab.engines.policy import SchedulingPolicy


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
    over_clip: bool = False  # counted in the lane's decodes with more output left than the clip

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
INF = float("inf")


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
    frontend_s: float = 0.0  # API-server time per request before the scheduler sees it (serial) ...
    frontend_token_s: float = 0.0  # ... and per prompt token
    frontend_out_token_s: float = 0.0  # API-server time per output token streamed, which slows the above
    frontend_step_s: float = 0.0  # ... per engine step whose outputs a serial output stream takes in
    frontend_chunk_s: float = 0.0  # ... per chunk it sends, one a token unless it falls behind (merged)
    # a running request's chunk waits for this many tokens (the engine's stream interval); a first token
    # is sent at once
    stream_interval: int = 1
    # attention-DP ranks that step together with this lane, each with requests of its own (1: this lane alone,
    # or some rank idle)
    dp_ranks: int = 1

    def without_api_server(self) -> LaneLimits:
        """These limits for a lane whose requests went through another worker's API server (a
        disaggregated decode worker): no intake and no streaming costs."""
        return replace(
            self,
            frontend_s=0.0,
            frontend_token_s=0.0,
            frontend_out_token_s=0.0,
            frontend_step_s=0.0,
            frontend_chunk_s=0.0,
        )

    def frontend_cost_s(self, prompt: int, decode_rate: float, streamed: bool = False) -> float:
        """API-server time to take in a request while the lane streams decode_rate tokens/s: its own work,
        stretched by the share of the CPU that streaming leaves (at most 20x: a saturated server still
        turns); `streamed` (a serial output stream): the streaming is queued work of its own
        (Lane.stream_out)."""
        work = self.frontend_s + self.frontend_token_s * prompt
        if streamed:
            return work
        busy = min(self.frontend_out_token_s * decode_rate, FRONTEND_MAX_BUSY)
        return work / (1.0 - busy)


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
    """One scheduler over one lane's requests, following `policy`. `price_decode(n, kv)` and
    `price_mixed(chunks, n, kv)` give step times in us per clock (nominal, low, high)."""

    def __init__(
        self, limits: LaneLimits, policy: SchedulingPolicy, price_decode, price_mixed, joins: bool = False
    ):
        """joins: requests arrive with their prompt's KV and first token (a disaggregated decode worker,
        servelab.predict.plan.disagg): they join the decoding batch (`_join`) instead of being admitted as
        prompts."""
        self.lim = limits
        self.joins = joins
        self.policy = policy
        self.price_decode, self.price_mixed = price_decode, price_mixed
        self.waiting: deque[Request] = deque()
        # requests that reached a scheduler forming its steps ahead (policy.schedules_ahead) during the step
        # under way: the next step was formed before they came, so they wait for the one after it
        self.ahead = policy.schedules_ahead()
        self.late: list[Request] = []
        self.prefilling: list[Request] = []
        self.running: list[Request] = []  # admission order
        self.heap: list = []  # (target G, idx, epoch, request) of decoding requests
        self.num_decoding = 0
        self.G = 0.0
        self.sum_ctx0 = 0.0  # sum of ctx0 - g0 over decoding requests: their KV tokens = sum + n * G
        self.sum_target = 0.0  # sum of target G over decoding requests: their remaining output = sum - n * G
        self.prefill_tokens = 0  # KV tokens held by requests still in prefill
        self.clock = (0.0, 0.0, 0.0)  # the lane's time, per clock (a tuple: requests keep it as theirs)
        self.emitted = 0.0  # output tokens emitted, all requests
        self.completed = 0  # requests finished, all of them
        self.busy = False
        self.frontend = bool(limits.frontend_s or limits.frontend_token_s)  # an API server to pass through
        self.streams = policy.serial_output_stream  # ... which queues every output token (stream_out)
        # a lagging stream merges the running requests' chunks only for a step of at most this many of them
        self.merge_slice = policy.output_slice or INF
        self.frontend_free = 0.0  # when the API server is next free (drive clock)
        self.decode_rate = 0.0  # output tokens/s of the last decode step (drive clock)
        self.arrived = 0  # requests handed to this scheduler
        # at most this many of a request's remaining output tokens count in the reserve (0: all)
        self.clip = policy.reserve_clip()
        self.reserves = policy.reserves()  # admission keeps KV room for future output
        self.latch = policy.latches_admission()  # a refusal closes admission until a request leaves
        self.whole_prompt = policy.admits_whole_prompt()  # admission needs room for the whole prompt
        self.holds = policy.holds(limits)  # the policy may hold new prompts back (it counts the steps)
        self.admission_closed = False  # no admission until a running request finishes or is preempted
        # the state policies keep here (servelab.engines.policy.LaneView)
        self.reserve_start: float | None = None  # where the reserve ratio restarted (None: never) ...
        self.reserve_step0 = 0  # ... at this many decode steps
        self.held = 0  # iterations counted by the policy's hold rule
        self.holding = False  # the step under way holds new prompts back
        # decoding requests with more output left than the clip: a heap of the G at which each falls to the
        # clip, and the sum and count of (target G - clip) over them (reserved_tokens takes that off)
        self.over_heap: list = []
        self.over_sum = 0.0
        self.over_n = 0
        self.stats = LaneStats()
        self.peak_kv_bytes = -INF  # the most KV bytes held after a step ...
        self.peak_capacity = -INF  # ... since the KV capacity was this

    # ---- KV ----------------------------------------------------------------------------------------------
    def kv_tokens(self) -> float:
        return self.sum_ctx0 + self.num_decoding * self.G + self.prefill_tokens

    def kv_bytes(self) -> float:
        return len(self.running) * self.lim.kv_fixed + self.kv_tokens() * self.lim.kv_per_token

    def reserved_tokens(self, ratio: float) -> float:
        """KV tokens held back for the remaining output of admitted requests (policies that reserve); a
        request counts at most the clip of its own."""
        tps = self.lim.tokens_per_step
        clip = self.clip
        decoding = self.sum_target - self.num_decoding * self.G
        if self.over_n:
            heap, G = self.over_heap, self.G
            while heap and heap[0][0] <= G:  # these are down to the clip now
                cross, _, epoch, req = heappop(heap)
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

    def decoding_output(self) -> tuple[int, float, int]:
        """Over the requests decoding now: how many, the output tokens they have emitted, and their output
        lengths."""
        decoding = [r for r in self.running if r.computed >= r.prompt]
        emitted = sum(r.out + self.G - r.g0 for r in decoding)
        return len(decoding), emitted, sum(r.osl for r in decoding)

    # ---- arrivals ----------------------------------------------------------------------------------------
    def idle_until(self, t: float, drive: int) -> None:
        """An idle lane's clocks move on to `t` (drive clock), each by the same gap (simulator._loop does this
        inline)."""
        c = self.clock
        if c[drive] < t:
            gap = t - c[drive]
            self.clock = (c[0] + gap, c[1] + gap, c[2] + gap)

    def add(self, req: Request) -> None:
        self.arrived += 1
        self.waiting.append(req)

    # ---- scheduling --------------------------------------------------------------------------------------
    def schedule(self, horizon_s: float, drive: int, one_step: bool = False) -> Batch | None:
        """The next step (or stretch of identical decode steps ending before horizon_s; `one_step`: a single
        step), or None when idle. (Written for speed, this runs on every step: KV bytes inline, bounds by
        comparisons, not min/max.)"""
        lim = self.lim
        n = self.num_decoding
        grow = n * lim.tokens_per_step * lim.kv_per_token  # the decodes' next tokens
        kv_bytes = (
            len(self.running) * lim.kv_fixed
            + (self.sum_ctx0 + n * self.G + self.prefill_tokens) * lim.kv_per_token
        )  # self.kv_bytes()
        if n and kv_bytes + grow > lim.kv_capacity:
            self._make_room()
            n = self.num_decoding
            grow = n * lim.tokens_per_step * lim.kv_per_token
            kv_bytes = self.kv_bytes()
        hold = 0
        waiting = self.waiting
        if self.joins and waiting and self._joinable(waiting[0]):
            self._join()
            n = self.num_decoding
            grow = n * lim.tokens_per_step * lim.kv_per_token
            kv_bytes = self.kv_bytes()
        # in a joining lane only a request to recompute (preempted) or without a token to decode is a prompt
        if self.prefilling or (waiting and not (self.joins and self._joinable(waiting[0]))):
            chunks, decodes, hold = self.policy.form_step(self)
            if chunks:
                m = n if decodes else 0
                kv_mean = self.G + self.sum_ctx0 / m if m else 0.0
                if len(chunks) == 1:
                    _, new, past = chunks[0]
                    us = self.price_mixed([(new, past)], m, kv_mean)
                else:
                    us = self.price_mixed([(t, p) for _, t, p in chunks], m, kv_mean)
                return Batch(1, m, kv_mean, chunks, (us[0] * 1e-6, us[1] * 1e-6, us[2] * 1e-6))
        else:
            self.holding = False  # nothing to hold
        if not n:
            return None
        # decode-only steps repeat unchanged until a request finishes, the next arrival, the KV cache fills or
        # held prompts are released (the hold)
        G, tps = self.G, lim.tokens_per_step
        kv_mean = G + self.sum_ctx0 / n
        steps = int(-(-(self.heap[0][0] - G) // tps))  # ceil: steps until the first finish
        if steps < 1:
            steps = 1
        if hold and hold < steps:
            steps = hold
        if one_step:
            steps = 1
        if grow > 0:
            room = int((lim.kv_capacity - kv_bytes) // grow)  # steps until the KV cache is full
            if room < steps:
                steps = room if room > 1 else 1
        one = self.price_decode(n, kv_mean)
        if horizon_s != INF:
            before = int((horizon_s - self.clock[drive]) / (one[drive] * 1e-6)) + 1  # steps to the horizon
            if before < steps:
                steps = before if before > 1 else 1
        if steps > 1:  # step time is near-linear in kv: price the stretch at its middle
            one = self.price_decode(n, kv_mean + (steps - 1) * tps / 2)
            return Batch(
                steps, n, kv_mean, [], (one[0] * steps * 1e-6, one[1] * steps * 1e-6, one[2] * steps * 1e-6)
            )
        return Batch(1, n, kv_mean, [], (one[0] * 1e-6, one[1] * 1e-6, one[2] * 1e-6))  # x * 1 is x

    @staticmethod
    def _joinable(req: Request) -> bool:
        """A request whose whole prompt is in the KV cache and which has tokens left to decode."""
        return req.computed == 0 and req.cached >= req.prompt and req.osl > 1

    def _join(self) -> None:
        """Arrived requests join the decoding batch at this scheduling point, in queue order, while
        max_num_seqs and the KV cache (their prompt beside the decodes' next tokens) allow. Each came with the
        first token the prefill worker sampled, delivered now; the batch's next decode step samples its
        second. (SGLang's decode side, disaggregation/decode.py: a transferred request takes its first
        output id from the metadata buffer, is streamed by a prebuilt batch that runs no forward, and is
        merged into the running decode batch.)"""
        lim, st, waiting = self.lim, self.stats, self.waiting
        per_token = lim.kv_per_token
        while waiting and self._joinable(waiting[0]):
            if len(self.running) >= lim.max_num_seqs:
                st.blocked_seqs += 1
                break
            req = waiting[0]
            free = (
                lim.kv_capacity - self.kv_bytes() - (self.num_decoding + 1) * lim.tokens_per_step * per_token
            )
            if lim.kv_fixed + req.prompt * per_token > free:
                st.blocked_kv += 1
                break
            waiting.popleft()
            req.computed = req.prompt
            self.prefill_tokens += req.computed  # counted as prefilling for the moment _start_decoding takes
            self.prefilling.append(req)
            self.running.append(req)
            self._start_decoding(req, self.clock, [])  # osl > 1: it does not finish here

    def _make_room(self) -> None:
        """Preempt the policy's victims until the decodes' next tokens fit the KV cache."""
        policy, lim = self.policy, self.lim
        while (
            self.num_decoding
            and self.kv_bytes() + self.num_decoding * lim.tokens_per_step * lim.kv_per_token > lim.kv_capacity
        ):
            req = policy.victim(self)
            self._preempt(req)
            policy.requeue(self, req)
        policy.after_preemption(self)

    def prompt_chunks(self, budget: int, admit: bool = True) -> list:
        """Prompt chunks for this step under `budget` tokens: requests part-way through their prompt
        continue, then (if `admit` and admission is open) waiting ones are admitted in queue order while the
        budget, max_num_seqs and the KV cache (less the policy's reserve) allow."""
        if budget <= 0 or not (self.prefilling or (admit and self.waiting and not self.admission_closed)):
            return []  # nothing to continue or admit (the usual case of a KV-bound lane: ask nothing more)
        lim = self.lim
        per_token = lim.kv_per_token
        n = self.num_decoding
        # the cache less what it holds and the decodes' next tokens (kv_bytes inline: this runs every step)
        kv_bytes = (
            len(self.running) * lim.kv_fixed + (self.sum_ctx0 + n * self.G + self.prefill_tokens) * per_token
        )
        free = lim.kv_capacity - kv_bytes - n * lim.tokens_per_step * per_token
        chunks = []
        for req in self.prefilling:
            if budget <= 0:
                break
            take = req.prompt - req.computed  # the rest of its prompt, within the budget and the free cache
            if budget < take:
                take = budget
            fits = int(free // per_token)
            if fits < take:
                take = fits
            if take <= 0:
                break
            chunks.append((req, take, req.computed))
            budget -= take
            free -= take * per_token
        waiting = self.waiting
        if not waiting or budget <= 0 or not admit or self.admission_closed:
            return chunks
        st = self.stats
        ratio = self.policy.reserve_ratio(self) if self.reserves else 0.0
        reserved = self.reserved_tokens(ratio) * per_token if ratio else 0.0
        clip = self.clip
        while waiting and budget > 0:
            if len(self.running) >= lim.max_num_seqs:
                st.blocked_seqs += 1
                break
            req = waiting[0]
            todo = req.prompt - req.cached
            take = todo if todo <= budget else budget
            if not lim.chunked_prefill and take < todo and (chunks or self.num_decoding):
                break
            need = held = lim.kv_fixed + (req.cached + take) * per_token  # what the chunk holds
            # the whole prompt and all of its output (to the clip) must fit beside the others' reserve
            if ratio:
                left = req.osl - req.out
                reserved += (min(left, clip) if clip else left) * per_token
                need = lim.kv_fixed + req.prompt * per_token + reserved
            elif self.whole_prompt:
                need = lim.kv_fixed + req.prompt * per_token
            if need > free:
                st.blocked_kv += 1
                self.admission_closed = self.latch
                break
            waiting.popleft()
            req.computed = req.cached
            self.prefill_tokens += req.cached
            self.prefilling.append(req)
            self.running.append(req)
            chunks.append((req, take, req.cached))
            budget -= take
            free -= held
        return chunks

    def _preempt(self, req: Request) -> None:
        """Take a running request out: its KV cache is freed, and its prompt and output so far are to be
        recomputed (the policy queues it again)."""
        running = self.running
        if running[-1] is req:
            running.pop()
        else:
            running.remove(req)
        self.admission_closed = False
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
                self._drop_over(req, req.target - self.clip)
            req.out += self.G - req.g0
            req.epoch += 1
            req.prompt = req.prompt + int(req.out)  # recompute prompt and output so far
        req.computed = 0

    # ---- step end ----------------------------------------------------------------------------------------
    def stream_out(self, batch: Batch, firsts: int, end: float, drive: int) -> float:
        """Queue the tokens a batch emitted (each decode step's tokens as the step ends, and `firsts` first
        tokens) on the API server (a serial output stream); returns how long after `end` (drive clock) the
        server has handled them."""
        lim = self.lim
        cost, step_cost, chunk = lim.frontend_out_token_s, lim.frontend_step_s, lim.frontend_chunk_s
        per_step = batch.decodes * lim.tokens_per_step
        last = (per_step + firsts) * cost + step_cost + firsts * chunk  # the last step's own outputs
        run_chunk = chunk / lim.stream_interval  # a running request's chunk per token
        merges = batch.decodes <= self.merge_slice  # its outputs fit one slice (policy.output_slice)
        steps = batch.steps
        if steps == 1:  # most batches: the general case below with no stretch to spread, inline
            free = self.frontend_free
            free = (free if free > end else end) + last
            if chunk:
                cap = end + batch.duration[drive] if merges else INF
                merged = free + per_step * run_chunk
                free = merged if merged < cap else (cap if cap > free else free)
        else:
            step_s = batch.duration[drive] / steps
            start = max(self.frontend_free, end - (steps - 1) * step_s)
            work = (steps * per_step + firsts) * cost + steps * step_cost + firsts * chunk
            # the running requests' chunks: one a stream interval while the server keeps up; behind by
            # more than a step, a request's tokens wait merged into one chunk (vLLM's
            # RequestOutputCollector) where the step's outputs fit one slice, so their chunks never hold
            # the queue longer than that
            cap = max(start + work, end + step_s) if merges else INF
            free = min(start + work + steps * per_step * run_chunk, cap)
            free = max(free, end + last)
        self.frontend_free = free
        return free - end

    def complete(self, batch: Batch) -> list[Request]:
        """Apply a finished batch at the lane clock; return the requests that finished."""
        st, lim = self.stats, self.lim
        c0, c1, c2 = self.clock
        d = batch.duration
        d0, d1, d2 = d
        now = self.clock = (c0 + d0, c1 + d1, c2 + d2)
        k = batch.steps
        st.steps += k
        if self.holds:
            self.policy.after_steps(self, k)
        done: list[Request] = []
        n = batch.decodes
        if n:
            adv = k * lim.tokens_per_step
            self.G += adv
            self.emitted += n * adv
            # the gap between tokens, per clock, and how many tokens saw it (one step: its own duration)
            st.itl.append((d, n) if k == 1 else ((d0 / k, d1 / k, d2 / k), n * k))
            st.decode_token_steps += n * k
            st.decode_steps += k
            if lim.frontend_out_token_s and d0 > 0:
                self.decode_rate = n * adv / d0
        chunks = batch.chunks
        if chunks:
            st.busy_mixed_s += d0
            for req, take, _ in chunks:
                computed = req.computed = req.computed + take
                self.prefill_tokens += take
                st.prefill_tokens += take
                if computed >= req.prompt:
                    self._start_decoding(req, now, done)
        else:
            st.busy_decode_s += d0
        heap = self.heap
        reached = self.G + 1e-9
        while heap and heap[0][0] <= reached:
            target, _, epoch, req = heappop(heap)
            if epoch != req.epoch or req.finish is not None:
                continue
            self.num_decoding -= 1
            self.sum_ctx0 -= req.ctx0 - req.g0
            self.sum_target -= target  # req.target: it has not moved since it was queued
            # self._finish(req, now, done) inline: a call less for every request
            req.finish = now
            self.completed += 1
            self.running.remove(req)
            if req.over_clip:  # finished before reserved_tokens looked again
                self._drop_over(req, req.target - self.clip)
            self.admission_closed = False
            done.append(req)
        kv_bytes = (
            len(self.running) * lim.kv_fixed
            + (self.sum_ctx0 + self.num_decoding * self.G + self.prefill_tokens) * lim.kv_per_token
        )  # self.kv_bytes() inline: this runs on every step
        # the peak share is the share of the peak (dividing by one capacity keeps the order): a division for
        # each new peak, not one a step
        cap = lim.kv_capacity
        if kv_bytes > self.peak_kv_bytes or cap != self.peak_capacity:
            self.peak_kv_bytes, self.peak_capacity = kv_bytes, cap
            frac = kv_bytes / cap if cap > 0 else 1.0
            if frac > st.peak_kv_frac:
                st.peak_kv_frac = frac
        return done

    def _start_decoding(self, req: Request, now: tuple, done: list) -> None:
        computed = req.computed
        self.prefilling.remove(req)
        self.prefill_tokens -= computed
        if req.first is None:
            req.first = now
        out = req.out = req.out + 1  # the prefill step samples a token
        self.emitted += 1
        osl = req.osl
        if out >= osl:
            self._finish(req, now, done)
            return
        G = self.G
        req.ctx0 = computed
        req.g0 = G
        target = G + osl - out  # req.target
        self.num_decoding += 1
        self.sum_ctx0 += req.ctx0 - G
        self.sum_target += target
        heappush(self.heap, (target, req.idx, req.epoch, req))
        clip = self.clip
        if clip and target - G > clip:
            cross = target - clip
            req.over_clip = True
            self.over_sum += cross
            self.over_n += 1
            heappush(self.over_heap, (cross, req.idx, req.epoch, req))

    def _finish(self, req: Request, now: tuple, done: list) -> None:
        req.finish = now
        self.completed += 1
        self.running.remove(req)
        if req.over_clip:  # finished before reserved_tokens looked again
            self._drop_over(req, req.target - self.clip)
        self.admission_closed = False
        done.append(req)
