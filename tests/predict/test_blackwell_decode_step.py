"""A decode step on a GPU with more of everything is not priced slower when nothing but the GPU changes: a
B200 (no tables, no fit of its own) prices its roofline with the H200's fit, so DeepSeek-R1's small decode
kernels pay the H200's fitted launch floor rather than the datasheet defaults' twice that, which priced the
B200's step above the H200's (docs/accuracy.md, "Blackwell decode steps")."""

import pytest

from servelab.perfdb.db import perfdb_for
from servelab.perfdb.efficiencies import efficiencies
from servelab.predict.engines import GPU_MOE_TERMS, engine_profile
from servelab.predict.graph import StepShape, step_ops
from servelab.predict.step import kernel_sum, priced_step
from servelab.specs import Parallel, load_model, load_system

H200, B200 = load_system("h200_sxm"), load_system("b200_sxm")
SPLIT = Parallel(tp=8, ep=8)
DECODE = StepShape(decode_batch=2, decode_kv_len=1500)


@pytest.mark.parametrize("backend", ["trtllm", "sglang"])
def test_a_b200_decode_step_is_not_priced_above_the_h200_one(backend):
    engine = engine_profile(backend, H200.hbm_gib, gpu_name=H200.gpu_name)  # one profile: only the GPU moves
    model = engine.model_as_served(load_model("deepseek-ai/DeepSeek-R1"))
    h200_db, b200_db = perfdb_for(H200, backend), perfdb_for(B200, backend)
    for op in step_ops(model, SPLIT, DECODE):
        assert b200_db.query(op.key).us <= h200_db.query(op.key).us, op.name
    h200, b200 = (priced_step(model, SPLIT, DECODE, engine, db) for db in (h200_db, b200_db))
    # the overheads are the same but for the fit's MoE terms of GPU time, which stay on the H200 it ran on
    without = engine.model_copy(update=dict.fromkeys(GPU_MOE_TERMS, 0.0))
    assert b200.kernel_us < h200.kernel_us
    assert b200.overhead_us == priced_step(model, SPLIT, DECODE, without, h200_db).overhead_us
    # with the datasheet defaults (a 4 us launch floor a kernel) the same B200 kernels cost more than the
    # H200's (named apart: perfdb_for shares one PerfDB per system name)
    defaults = B200.model_copy(
        update={"name": "b200_defaults", "efficiencies": efficiencies("").model_dump()}
    )
    ops = step_ops(model, SPLIT, DECODE)
    assert kernel_sum(ops, perfdb_for(defaults, backend)).us > h200.kernel_us
