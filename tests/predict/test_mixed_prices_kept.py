"""StepPricer keeps the price of each one-chunk mixed step by its snapped counts: what it keeps is what
interpolating every time gives, and the same shapes go to the step model."""

from servelab.engines import Engine
from servelab.perfdb.db import perfdb_for
from servelab.predict.engines import engine_profile
from servelab.predict.serving import StepPricer
from servelab.predict.serving.pricing import grid_above, grid_below, snap, snap_coarse
from servelab.specs import Parallel, load_model, load_system

SYS = load_system("h200_sxm")
MODEL = load_model("qwen3-32b")
TP2 = Parallel(tp=2)


def _interpolated(pricer: StepPricer, chunks: list, n: int, kv: float) -> tuple:
    """A mixed step priced as `StepPricer.mixed` did before it kept its answers."""
    rest: tuple = ()
    if len(chunks) == 1:
        new, past = chunks[0]
    else:
        big = max(range(len(chunks)), key=lambda i: chunks[i][0])
        rest = tuple((snap_coarse(t) or 1, snap_coarse(p)) for i, (t, p) in enumerate(chunks) if i != big)
        new, past = chunks[big]
    past_q, n_q, kv_q = snap(past), snap_coarse(n), (snap(kv) if n else 0)
    lo, hi = grid_below(max(new, 1)), grid_above(max(new, 1))
    a = pricer._price(tuple(sorted(rest + ((lo, past_q),))), n_q, kv_q)
    if hi == lo:
        return a
    b = pricer._price(tuple(sorted(rest + ((hi, past_q),))), n_q, kv_q)
    f = (new - lo) / (hi - lo)
    return (a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f)


def test_kept_mixed_prices_are_the_interpolated_ones():
    engine = engine_profile(Engine.VLLM)
    kept = StepPricer(MODEL, TP2, engine, perfdb_for(SYS))
    reference = StepPricer(MODEL, TP2, engine, perfdb_for(SYS))
    cases = [([(new, past)], n, kv) for new in (1, 7, 100, 1000, 1003, 8000) for past in (0, 500, 4097)
             for n, kv in ((0, 0.0), (1, 10.5), (37, 1234.7), (37, 1240.2), (200, 9000.0))]  # fmt: skip
    cases += [([(900, 0), (120, 40), (7, 3000)], 12, 555.5), ([(64, 0), (64, 0)], 0, 0.0)]
    for chunks, n, kv in cases * 2:  # the second pass is answered from what the first kept
        assert kept.mixed(chunks, n, kv) == _interpolated(reference, chunks, n, kv), (chunks, n, kv)
    assert kept.priced == reference.priced  # the same shapes went to the step model
