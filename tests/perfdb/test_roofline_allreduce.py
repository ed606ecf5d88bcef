"""The roofline's all-reduce: engines run peer-memory one-shot / two-shot kernels inside an NVLink domain,
torch runs NCCL's ring (what its tables measure)."""

from importlib import resources

import pandas as pd
import pytest

from servelab.perfdb.db import PerfDB
from servelab.perfdb.keys import Comm
from servelab.perfdb.ops import OpName
from servelab.perfdb.roofline import BUS_EFFICIENCY, PEER_ALLREDUCE_BACKENDS, PEER_BARRIER_US, Roofline
from servelab.predict.graph import StepShape, op_category, step_ops
from servelab.specs import Parallel, load_model, load_system

H200 = load_system("h200_sxm")
DECODE_BYTES = 256 << 10  # a decode step's hidden states: batch 16 of hidden 8192 in bf16


def measured_nccl_allreduce() -> pd.DataFrame:
    path = resources.files("servelab.perfdb") / "data" / "h200_sxm" / "torch" / "2.11.0" / "comm.parquet"
    df = pd.read_parquet(str(path))
    return df[(df.op == "allreduce") & df.measured & (df.bytes <= DECODE_BYTES)]


@pytest.mark.parametrize("backend", sorted(PEER_ALLREDUCE_BACKENDS))
def test_engine_allreduce_at_decode_sizes_is_below_the_measured_nccl_floor(backend):
    rows = measured_nccl_allreduce()
    assert len(rows) >= 10 and set(rows.gpus) >= {2, 4}
    roof = Roofline(H200, backend=backend)
    for r in rows.itertuples():
        us = roof.latency(Comm(int(r.bytes), int(r.gpus))).us
        assert PEER_BARRIER_US <= us < r.latency_us, (r.bytes, r.gpus)


def test_one_shot_for_small_messages_two_shot_for_large():
    roof = Roofline(H200, backend="vllm")
    busbw = H200.nvlink_gbs * 1e9 * BUS_EFFICIENCY
    small, large = 4 << 10, 64 << 20
    # one barrier, then every rank reads the n - 1 peer copies
    spread = roof.latency(Comm(small, 8)).us - roof.latency(Comm(small, 2)).us
    assert spread == pytest.approx(6 * small / busbw * 1e6)
    # a large message moves the ring's volume (two barriers), not n - 1 copies
    ring = 2 * 7 / 8 * large / busbw * 1e6
    assert roof.latency(Comm(large, 8)).us == pytest.approx(2 * PEER_BARRIER_US + ring)


def test_torch_and_other_collectives_keep_nccl_ring():
    torch, engine = Roofline(H200), Roofline(H200, backend="sglang")
    for key in (Comm(DECODE_BYTES, 8), Comm(DECODE_BYTES, 16), Comm(DECODE_BYTES, 8, OpName.allgather)):
        if key.op == OpName.allreduce and key.gpus <= H200.nvlink_domain:
            assert torch.latency(key).us > engine.latency(key).us
        else:  # outside the NVLink domain, and for other collectives, the engines use NCCL too
            assert torch.latency(key).us == engine.latency(key).us


def test_engine_perfdb_prices_tp8_decode_allreduces_with_peer_kernels():
    """Dense Llama-3.1-70B decode at tp 8: the engine's step pays a peer-memory all-reduce per layer half,
    torch's the NCCL table's."""
    model, parallel = load_model("llama-3.1-70b"), Parallel(tp=8)
    ops = step_ops(model, parallel, StepShape(decode_batch=4, decode_kv_len=2048))
    comm = [op for op in ops if op_category(op.name).value == "communication" and op.key.op == "allreduce"]
    assert sum(op.count for op in comm) == 2 * model.num_layers
    engine, torch = PerfDB(H200, backend="vllm", use_tables=False), PerfDB(H200, backend="torch")
    engine_us = sum(engine.query(op.key).us * op.count for op in comm)
    torch_us = sum(torch.query(op.key).us * op.count for op in comm)
    assert engine_us < 0.6 * torch_us
    assert engine.query(comm[0].key).source == "roofline"
