"""Synthetic collector campaigns from known analytic latency functions, so interpolation error can be
asserted. These are test fixtures only: never merged into the shipped data."""

import json
import math
from pathlib import Path

GPU = "NVIDIA H200"


def provenance(date: str = "2025-11-29T10:00:00Z", gpu: str = GPU) -> dict:
    return {
        "gpu_name": gpu,
        "driver": "580.00",
        "cuda": "13.0",
        "torch": "2.11.0",
        "cudnn": "9.19",
        "nccl": "2.28",
        "date": date,
        "clocks": "synthetic",
        "command": "tests/perfdb/synth.py",
    }


def gemm_us(m: int, n: int, k: int) -> float:
    """A smooth GEMM-like latency: launch floor + max(compute at 650 TF/s, weight/activation traffic at 4
    TB/s), blended so the knee is soft, with a mild wave in log m (kernel choice changing with m)."""
    compute = 2.0 * m * n * k / 650e12 * 1e6
    memory = (n * k * 2 + m * k * 2 + m * n * 2) / 4.0e12 * 1e6
    return 4.0 + (compute**3 + memory**3) ** (1 / 3) * (1.0 + 0.04 * math.sin(math.log2(m)))


def prefill_us(batch: int, seq: int, heads: int, head_dim: int) -> float:
    """Flash-attention-like: a launch floor, compute at up to 520 TF/s, slowed where the (sequence, head,
    128-query tile) grid leaves SMs idle (with a softer exponent than the reference assumes) and by a ramp in
    sequence length (short tiles amortise less)."""
    flops = 4.0 * batch * heads * seq * (seq + 1) / 2 * head_dim
    occupancy = min(1.0, batch * heads * math.ceil(seq / 128) / 132) ** 0.8
    return 8.0 + flops / (520e12 * occupancy * (1 - 0.3 * math.exp(-seq / 4096.0))) * 1e6


def decode_us(batch: int, kv_len: int, kv_heads: int, head_dim: int) -> float:
    return 6.0 + batch * kv_len * 2 * kv_heads * head_dim * 2 / 4.2e12 * 1e6 + 0.02 * batch


def dsv4_gen_us(native: int, heads: int, batch: int, kv_len: int) -> float:
    entries = min(native * 8, kv_len // 4) + min(kv_len, 128)
    return 20.0 + batch * (entries * 584 + kv_len // 4 * 132) / 3.5e12 * 1e6 + batch * heads * 0.05


def allreduce_us(nbytes: int, gpus: int) -> float:
    return 16.0 + 2.0 * (gpus - 1) / gpus * nbytes / 330e9 * 1e6


def row(op: str, us: float, **fields) -> dict:
    return {"op": op, **fields, "latency_us": us, "p10_us": us * 0.99, "p90_us": us * 1.01, "reps": 50}


GEMM_M = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
GEMM_NK = [(4096, 4096), (8192, 4096), (4096, 8192), (12288, 4096), (4096, 14336)]


def gemm_rows(ms=GEMM_M, nks=GEMM_NK) -> list[dict]:
    return [row("gemm", gemm_us(m, n, k), m=m, n=n, k=k, dtype="bf16") for n, k in nks for m in ms]


def prefill_rows() -> list[dict]:
    out = []
    for heads, kv in ((32, 8), (16, 4), (8, 2)):
        for b in (1, 2, 4, 8):
            for s in (256, 512, 1024, 2048, 4096, 8192):
                if b * s <= 32768:
                    out.append(
                        row(
                            "attention_prefill",
                            prefill_us(b, s, heads, 128),
                            batch=b,
                            seq=s,
                            heads=heads,
                            kv_heads=kv,
                            head_dim=128,
                        )
                    )
    return out


def decode_rows() -> list[dict]:
    out = []
    for heads, kv in ((32, 8), (8, 2)):
        for b in (1, 8, 32, 64, 128, 256):
            for kvl in (512, 1024, 2048, 4096, 8192, 16384, 32768):
                out.append(
                    row(
                        "attention_decode",
                        decode_us(b, kvl, kv, 128),
                        batch=b,
                        kv_len=kvl,
                        heads=heads,
                        kv_heads=kv,
                        head_dim=128,
                    )
                )
    return out


def dsv4_rows(native: int = 64, tps=(1, 2, 4, 8)) -> list[dict]:
    out = []
    for tp in tps:
        h = native // tp
        for b in (1, 4, 16, 64):
            for kvl in (1024, 4096, 16384, 65536):
                out.append(
                    row(
                        "dsv4_csa_generation_module",
                        dsv4_gen_us(native, h, b, kvl),
                        native_heads=native,
                        heads=h,
                        batch=b,
                        kv_len=kvl,
                        tp=tp,
                        model=f"v4-{native}",
                    )
                )
    return out


def comm_rows() -> list[dict]:
    return [
        row("allreduce", allreduce_us(2**e, g), bytes=2**e, gpus=g)
        for g in (2, 4, 8)
        for e in range(10, 31, 2)
    ]


def write_campaign(directory: Path, rows: list[dict], prov: dict | None = None, errors: int = 0) -> Path:
    directory = Path(directory)
    (directory / "rows").mkdir(parents=True, exist_ok=True)
    by_op: dict[str, list[dict]] = {}
    for r in rows:
        by_op.setdefault(r["op"], []).append(r)
    for op, rs in by_op.items():
        (directory / "rows" / f"{op}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rs))
    (directory / "provenance.json").write_text(json.dumps(prov or provenance()))
    (directory / "errors.jsonl").write_text(
        "".join(json.dumps({"op": "gemm", "error": "OOM"}) + "\n" for _ in range(errors))
    )
    return directory


def all_rows() -> list[dict]:
    return gemm_rows() + prefill_rows() + decode_rows() + dsv4_rows() + comm_rows()
