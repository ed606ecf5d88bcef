"""Step prices for the simulator: one lane's step shape -> (us, low_us, high_us), looked up on a grid.

The step model costs about 100 us per new shape, and a simulation asks for thousands of steps, so shapes are
put on a geometric grid (predictions are lookups into a rounded grid). Decode-only steps, which make up most
of a run, are interpolated bilinearly in (batch, kv_len) between grid points; mixed prefill+decode steps are
interpolated in their largest chunk and snap the minor counts (decode batch, other chunks) to a coarser grid.

A lane is what one scheduler serves: one attention-DP rank (ranks step in lockstep through the MoE layers, so
the replica's step is `attn_dp` copies of the lane's), and one of `pp` microbatches in flight.
"""

from __future__ import annotations

import math

from servelab.predict.graph import StepShape
from servelab.predict.memory import sglang_cuda_graph_max_bs
from servelab.predict.step import priced_step

EXACT_BELOW = 16  # counts up to here are priced exactly (small batches change the price most)
RATIO = 1.25  # grid ratio above that: a snapped count is at most ~12 % off, interpolation recovers most of it
_LOG_R = math.log(RATIO)


_BELOW: dict = {}
_ABOVE: dict = {}


def grid_below(x: float) -> int:
    """The largest grid point <= x (x >= 1); memoized, the simulator asks on every step."""
    hit = _BELOW.get(x)
    if hit is None:
        if x <= EXACT_BELOW:
            hit = max(1, int(x))
        else:
            hit = _point(int(math.log(x / EXACT_BELOW) / _LOG_R + 1e-9))
        _BELOW[x] = hit
    return hit


def _point(i: int) -> int:
    return round(EXACT_BELOW * RATIO**i)


def grid_above(x: float) -> int:
    hit = _ABOVE.get(x)
    if hit is None:
        lo = grid_below(x)
        if lo >= x:
            hit = lo
        elif x <= EXACT_BELOW:
            hit = lo + 1
        else:
            hit = _point(int(math.log(x / EXACT_BELOW) / _LOG_R + 1e-9) + 1)
        _ABOVE[x] = hit
    return hit


_SNAPPED: dict = {}


def snap(x: float) -> int:
    """The nearest grid point (geometrically) to round(x); memoized, the simulator calls it on every step."""
    x = int(x + 0.5)
    hit = _SNAPPED.get(x)
    if hit is None:
        if x <= 0:
            hit = 0
        else:
            lo, hi = grid_below(x), grid_above(x)
            hit = lo if hi == lo or x * x <= lo * hi else hi
        _SNAPPED[x] = hit
    return hit


_COARSE: dict = {}


def snap_coarse(x: float) -> int:
    """Nearest point of the grid 1, 2, 3, 4, 6, 8, 12, 16, ... (ratio about 1.41), for the minor parts of a
    step."""
    x = int(x + 0.5)
    hit = _COARSE.get(x)
    if hit is None:
        if x <= 4:
            hit = max(x, 0)
        else:
            p = 1 << (x.bit_length() - 1)  # p <= x < 2p; candidates p, 1.5p, 2p
            hit = min((p, p * 3 // 2, 2 * p), key=lambda g: abs(math.log(x / g)))
        _COARSE[x] = hit
    return hit


class StepPricer:
    """Prices lane steps for one (model, parallel, engine, perfdb); results are memoized per grid key."""

    def __init__(self, model, parallel, engine, db, spec_tokens: int = 0, ranks: int = 0):
        """ranks: attention-DP ranks with work (0: all), when fewer requests than ranks leave some idle."""
        if engine.cuda_graph_by_split:
            graphs = sglang_cuda_graph_max_bs(db.system.hbm_gib, parallel)
            engine = engine.model_copy(update={"cuda_graph_max_batch": graphs})
        self.model, self.parallel, self.engine, self.db = model, parallel, engine, db
        self.dp = min(ranks or parallel.attn_dp, parallel.attn_dp)
        self.ranks = self.dp if self.dp < parallel.attn_dp else 0
        self.spec_tokens = spec_tokens
        # decode steps up to this lane batch replay a CUDA graph; keep interpolation on one side of the jump
        self.graph_limit = engine.cuda_graph_max_batch // parallel.attn_dp
        # where graphs are captured by tokens (vLLM), a mixed step of up to this many tokens on a rank replays
        # one too, and a decoding sequence takes 1 + spec_tokens of them
        self.mixed_graph_tokens = engine.cuda_graph_max_batch if engine.graphs_by_tokens else -1
        if engine.graphs_by_tokens:
            self.graph_limit //= 1 + spec_tokens
        self._cache: dict = {}
        self._decode: dict = {}  # (n, int kv) -> interpolated price
        # (new tokens of the largest chunk, the other chunks snapped, its snapped past, decodes, kv) -> price
        self._mixed: dict = {}
        self.priced = 0  # distinct shapes sent to the step model (a cost the planner watches)

    def _price(self, prefill: tuple, n: int, kv: int) -> tuple[float, float, float]:
        key = (prefill, n, kv)
        hit = self._cache.get(key)
        if hit is None:
            shape = StepShape(
                prefill=prefill * self.dp,
                decode_batch=n * self.dp,
                decode_kv_len=kv if n else 0,
                spec_tokens=self.spec_tokens if n else 0,
                ranks=self.ranks,
            )
            hit = self._cache[key] = self._priced(shape)
            self.priced += 1
        return hit

    def _priced(self, shape: StepShape) -> tuple:
        """One grid shape's price per clock (nominal, low, high), in us."""
        st = priced_step(self.model, self.parallel, shape, self.engine, self.db)
        return (st.us, st.low_us, st.high_us)

    def decode(self, n: int, kv: float) -> tuple[float, float, float]:
        """A decode-only step of n sequences at mean context kv, bilinear between grid points."""
        kv = int(kv)
        if kv < 1:
            kv = 1
        hit = self._decode.get((n, kv))
        if hit is None:
            hit = self._decode[(n, kv)] = self._interpolate(n, kv)
        return hit

    def _interpolate(self, n: int, kv: int) -> tuple[float, float, float]:
        n0, n1 = grid_below(n), grid_above(n)
        limit = self.graph_limit
        if n <= limit < n1:
            n1 = limit
        if n0 <= limit < n:
            n0 = limit + 1
        k0, k1 = grid_below(kv), grid_above(kv)
        a, b = self._price((), n0, k0), self._price((), n0, k1)
        fk = (kv - k0) / (k1 - k0) if k1 > k0 else 0.0
        lo = (a[0] + (b[0] - a[0]) * fk, a[1] + (b[1] - a[1]) * fk, a[2] + (b[2] - a[2]) * fk)
        if n1 == n0:
            return lo
        c, d = self._price((), n1, k0), self._price((), n1, k1)
        hi = (c[0] + (d[0] - c[0]) * fk, c[1] + (d[1] - c[1]) * fk, c[2] + (d[2] - c[2]) * fk)
        fn = (n - n0) / (n1 - n0)
        return (lo[0] + (hi[0] - lo[0]) * fn, lo[1] + (hi[1] - lo[1]) * fn, lo[2] + (hi[2] - lo[2]) * fn)

    def mixed(self, chunks: list[tuple[int, int]], n: int, kv: float) -> tuple[float, float, float]:
        """A step with prefill chunks (new, past) and n decoding sequences. The largest chunk sets most of the
        step's time: it is interpolated linearly between its two grid neighbours. The other chunks and the
        decode batch snap to a coarser grid, which keeps the distinct shapes (each a step-model call) in the
        tens."""
        if len(chunks) == 1:  # the common case: one prompt chunk, nothing to snap or sort
            new, past = chunks[0]
            rest: tuple = ()
        else:
            # the first largest chunk, as max(range(len(chunks)), key=...) picks it, without a call per chunk
            news = [t for t, _ in chunks]
            big = news.index(max(news))
            new, past = chunks[big]
            rest = tuple([(snap_coarse(t) or 1, snap_coarse(p)) for t, p in chunks[:big] + chunks[big + 1 :]])
        # the price depends on the snapped counts alone: kept, a repeated key skips the interpolation. The
        # snaps' memos are read here first (whole numbers are their own memo keys): one call less each on a
        # step the simulator prices hundreds of times a run
        past_q = _SNAPPED.get(past)
        if past_q is None:
            past_q = snap(past)
        n_q = _COARSE.get(n)
        if n_q is None:
            n_q = snap_coarse(n)
        if n:
            kv_q = _SNAPPED.get(int(kv + 0.5))
            if kv_q is None:
                kv_q = snap(kv)
        else:
            kv_q = 0
        key = (new, rest, past_q, n_q, kv_q)
        hit = self._mixed.get(key)
        if hit is None:
            hit = self._mixed[key] = self._mixed_price(new, rest, past_q, n_q, kv_q)
        return hit

    def _mixed_price(
        self, new: int, rest: tuple, past_q: int, n_q: int, kv_q: int
    ) -> tuple[float, float, float]:
        """The largest chunk (new tokens, its snapped past) interpolated between its grid neighbours, beside
        the snapped other chunks and decodes."""
        size = new if new > 1 else 1
        lo, hi = grid_below(size), grid_above(size)
        # keep both neighbours on the step's side of the graph limit (the largest chunk's share of it)
        limit = self.mixed_graph_tokens - sum(t for t, _ in rest) - n_q * (1 + self.spec_tokens)
        if size <= limit < hi:
            hi = limit
        if lo <= limit < size:
            lo = limit + 1
        a = self._price(tuple(sorted(rest + ((lo, past_q),))) if rest else ((lo, past_q),), n_q, kv_q)
        if hi == lo:
            return a
        b = self._price(tuple(sorted(rest + ((hi, past_q),))) if rest else ((hi, past_q),), n_q, kv_q)
        f = (new - lo) / (hi - lo)
        return (a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f)

    def shape(self, chunks: list[tuple[int, int]], n: int, kv: float) -> StepShape:
        """The replica step shape the price of a lane step stands for (used by --breakdown and --explain)."""
        return StepShape(
            prefill=tuple(chunks) * self.dp,
            decode_batch=n * self.dp,
            decode_kv_len=int(kv) if n else 0,
            spec_tokens=self.spec_tokens if n else 0,
            ranks=self.ranks,
        )
