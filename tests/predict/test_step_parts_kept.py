"""Step prices keep their parts per (model, parallel): a step priced through what was kept is the step
priced from parts computed afresh, and two parallel layouts (or two models) never share a part."""

import servelab.predict.step as step_mod
from servelab.engines import Engine
from servelab.perfdb.db import perfdb_for
from servelab.predict.engines import engine_profile
from servelab.predict.graph import StepShape, step_ops
from servelab.predict.step import _price_step, kernel_sum, priced_step
from servelab.specs import Parallel, load_model, load_system

SYS = load_system("h200_sxm")


def _afresh(model, parallel, shape, engine, db):
    """The step priced with no part kept."""

    def part(part_shape: StepShape, which: str):
        return kernel_sum(step_ops(model, parallel, part_shape, frozenset((which,))), db)

    return _price_step(part, model, parallel, shape, engine)


def test_kept_parts_price_steps_as_fresh_parts_do(monkeypatch):
    db = perfdb_for(SYS)
    engine = engine_profile(Engine.VLLM)
    shapes = [
        StepShape(((2048, 0),), 0, 0),
        StepShape((), 64, 3000),
        StepShape(((512, 1024), (37, 0)), 12, 900),
        StepShape((), 7, 20000, 2),
        StepShape(((8192, 0),) * 8, 256, 5000, 0, 4),
    ]
    pairs = [
        (load_model("qwen3-32b"), Parallel(tp=2)),
        (load_model("qwen3-32b"), Parallel(tp=4)),
        (load_model("deepseek-v3"), Parallel(tp=8, ep=8)),
        (load_model("deepseek-v3"), Parallel(tp=8, ep=8, dp_attn=True)),
    ]
    # twice round: the second pass is answered from what the first kept, pairs interleaved; then, with room
    # for two pairs only, steps not priced before (their parts partly kept by pairs dropped since)
    for memo_pairs, more_kv in ((64, 0), (64, 0), (2, 1), (2, 2)):
        monkeypatch.setattr(step_mod, "MEMO_PAIRS", memo_pairs)
        for shape in shapes:
            shape = shape._replace(decode_kv_len=shape.decode_kv_len + more_kv)
            for model, parallel in pairs if memo_pairs > 2 else [*pairs, (pairs[0][0], Parallel(tp=1))]:
                got = priced_step(model, parallel, shape, engine, db)
                assert got == _afresh(model, parallel, shape, engine, db), (model.name, parallel, shape)
        assert len(step_mod._prices(db).parts) <= memo_pairs
    # the layouts differ where the pricing says they should (no pair reads another's parts)
    one, other = (priced_step(m, p, StepShape((), 64, 3000), engine, db).us for m, p in pairs[:2])
    assert one != other
