"""What a campaign will cost before it runs: GPU-seconds per key from the roofline latency and the timing
method's own constants (setup, warm-up, replays of about TARGET_REPLAY_MS). A lead, not a promise: Triton
compiles and allocation of large inputs add to the first keys of each op."""

from servelab.collect import timing
from servelab.perfdb.ops import COMM_OPS, OpName

SETUP_S = 0.12  # allocation, a first call, the eager estimate and the capture of one key
SETUP_S_BY_OP = {
    OpName.moe: 0.3,
    OpName.dsv4_csa_context_module: 0.5,
    OpName.dsv4_hca_context_module: 0.4,
}


def key_seconds(key, roofline) -> float:
    return timed_seconds(roofline.latency(key).us, SETUP_S_BY_OP.get(key.op, SETUP_S))


def timed_seconds(us: float, setup_s: float = SETUP_S) -> float:
    """GPU-seconds of one time_op of an op that takes `us` microseconds."""
    replay_ms = max(timing.TARGET_REPLAY_MS, max(us, 1.0) / 1000)
    reps = min(timing.MAX_REPS, max(timing.MIN_REPS, timing.MAX_SECONDS * 1000 / replay_ms))
    return setup_s + (reps + timing.WARMUP_REPLAYS + 1) * replay_ms / 1000


def campaign_seconds(keys, roofline) -> tuple[float, float]:
    """(GPU-seconds of single-GPU keys, GPU-seconds of collectives counting every GPU they hold)."""
    single = comm = 0.0
    for key in keys:
        s = key_seconds(key, roofline)
        if key.op in COMM_OPS:
            comm += s * key.gpus
        else:
            single += s
    return single, comm
