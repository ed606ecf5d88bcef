"""GLM-5-FP8 at TP8 with SGLang: servelab's price of each op of one layer against AIConfigurator's measured
SGLang tables at the same shapes, on B200 (FP8 KV cache) or H200 (BF16, SGLang's Hopper default). Evidence for
issue 30 (why the twin prices GLM-5 on B200 0.3-0.7x of measured); no servelab code reads these tables, and
none is shipped.

    PYTHONPATH=src python accuracy/glm5_ops_vs_aic.py --aic-git-dir AIC/.git [--system h200_sxm]

The tables are read from AIConfigurator's git history at a pinned commit (`git show`), never copied:
- the DSA attention module (`sparse_attention/sglang/{0.5.10,0.5.14}/dsa_{generation,context}_module_perf`,
  zai-org/GLM-5 (0.5.10) or zai-org/GLM-5-FP8 (0.5.14), 8 heads a rank (TP8), block-FP8 GEMMs).
  AIConfigurator times DeepseekV2AttentionMLA's forward of one layer (collector/sglang/collect_mla_module.py:
  q_a/kv_a, q_b, the indexer's projections, logits and top-k, the sparse attention, o_proj; no norm before
  it, no all-reduce after it). servelab's matching ops are ATTENTION_OPS.
- the fused MoE (`moe/sglang/0.5.10/moe_perf`, Triton block-FP8, hidden 6,144, expert width 2,048 split by
  TP8, 256 experts, top 8, balanced routing): select_experts plus the fused experts
  (collector/sglang/collect_moe.py). servelab's matching ops are MOE_OPS.
- SGLang's custom all-reduce (`comm/sglang/0.5.10/custom_allreduce_perf`, 8 GPUs, BF16; its message size in
  elements): the CUDA-graph variant for decode, the eager one for prefill.
- block-FP8 and BF16 GEMMs (`gemm/sglang/0.5.10/gemm_perf`) where the op's (m, n, k) is on its grid.
Every servelab price of these ops is the roofline's on both systems (the `twin sources` line): no servelab
table covers B200, and the H200 tables predate GLM-5's shapes.
"""

import argparse
import io
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from servelab.perfdb.db import perfdb_for
from servelab.predict.graph import StepShape, step_ops
from servelab.specs import Parallel, load_model, load_system

AIC_COMMIT = "095f58a51"  # ai-dynamo/aiconfigurator, 2026-12 snapshot
DATA = "aic-core/src/aiconfigurator_core/systems/data"
KV = {"b200_sxm": ("fp8", "fp8"), "h200_sxm": ("bf16", "bfloat16")}  # SGLang 0.5.10's default cache for DSA
ATTENTION_OPS = ("qkv_a_proj", "q_b_proj", "kv_b_proj", "mla_q_absorb", "mla_v_absorb", "indexer_q_proj",
                 "indexer_k_proj", "dsa_indexer", "dsa_decode", "dsa_prefill", "o_proj")  # fmt: skip
MOE_OPS = ("moe_route", "moe_permute", "moe_experts", "moe_combine")
OTHER_OPS = ("attn_norm", "ffn_norm", "router", "shared_gate_up", "shared_down")
LAYERS = 78
MOE_SHAPE = ("fp8_block", 6144, 2048, 8, 256)  # dtype, hidden, expert width, top-k, experts
DECODE = [(b, kv) for kv in (1024, 2048, 8192) for b in (4, 8, 16, 32, 64)]
PREFILL = (1024, 2048, 4096, 8192)


def aic_rows(git_dir: Path, system: str, path: str) -> list[dict]:
    """The rows of one table; none where the snapshot has no such table."""
    done = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{AIC_COMMIT}:{DATA}/{system}/{path}"],
                          capture_output=True)  # fmt: skip
    return pq.read_table(io.BytesIO(done.stdout)).to_pylist() if done.returncode == 0 else []


class Aic:
    """AIConfigurator's measured SGLang rows of one system at GLM-5's shapes, in microseconds."""

    def __init__(self, git_dir: Path, system: str) -> None:
        kv = KV[system][1]

        def dsa(version: str, phase: str, model: str) -> dict:
            return {
                (r["batch_size"], r["isl"], r["step"]): r["latency"] * 1e3
                for r in aic_rows(git_dir, system, f"sparse_attention/sglang/{version}/dsa_{phase}_module_perf.parquet")  # noqa: E501
                if r["model"] == model and r["num_heads"] == 8 and r["kv_cache_dtype"] == kv
                and r["gemm_type"] == "fp8_block"
            }  # fmt: skip

        self.gen = {
            v: dsa(v, "generation", m)
            for v, m in (("0.5.10", "zai-org/GLM-5"), ("0.5.14", "zai-org/GLM-5-FP8"))
        }
        self.ctx = {
            v: dsa(v, "context", m) for v, m in (("0.5.10", "zai-org/GLM-5"), ("0.5.14", "zai-org/GLM-5-FP8"))
        }
        self.moe = {
            r["num_tokens"]: r["latency"] * 1e3
            for r in aic_rows(git_dir, system, "moe/sglang/0.5.10/moe_perf.parquet")
            if (r["moe_dtype"], r["hidden_size"], r["inter_size"], r["topk"], r["num_experts"]) == MOE_SHAPE
            and (r["moe_tp_size"], r["moe_ep_size"], r["distribution"]) == (8, 1, "balanced")
        }  # fmt: skip
        self.allreduce = {
            (r["backend"], r["message_size"]): r["latency"] * 1e3
            for r in aic_rows(git_dir, system, "comm/sglang/0.5.10/custom_allreduce_perf.parquet")
            if r["num_gpus"] == 8 and r["allreduce_dtype"] == "bfloat16"
        }
        self.gemm = {
            (r["gemm_dtype"], r["m"], r["n"], r["k"]): r["latency"] * 1e3
            for r in aic_rows(git_dir, system, "gemm/sglang/0.5.10/gemm_perf.parquet")
        }

    def allreduce_us(self, backend: str, elements: int) -> float | None:
        """Linear between the two measured message sizes around `elements` (sizes are powers of two)."""
        sizes = sorted(s for b, s in self.allreduce if b == backend)
        lo = max((s for s in sizes if s <= elements), default=None)
        hi = min((s for s in sizes if s >= elements), default=None)
        if lo is None or hi is None:
            return None
        a, b = self.allreduce[(backend, lo)], self.allreduce[(backend, hi)]
        return a if hi == lo else a + (b - a) * (elements - lo) / (hi - lo)


def layer_ops(db, model, shape: StepShape) -> dict[str, tuple[float, object, str]]:
    """(us, key, source) of each op of one MoE layer of the step (the attention ops are alike in all)."""
    out: dict[str, tuple[float, object, str]] = {}
    for op in step_ops(model, Parallel(tp=8), shape):
        if op.count > 3 or op.name not in out:  # the 75 MoE layers come after the 3 dense ones
            lat = db.query(op.key)
            out[op.name] = (lat.us, op.key, lat.source)
    return out


def row(label: str, twin: float, aic: float | None) -> str:
    ratio = f"{twin / aic:6.2f}" if aic else "     -"
    measured = f"{aic:9.1f}" if aic else "        -"
    return f"  {label:34} {twin:9.1f} {measured} {ratio}"


def compare(
    aic: Aic, db, model, shape: StepShape, tokens: int, attn: dict, graph: bool
) -> tuple[float, float]:
    ops = layer_ops(db, model, shape)
    twin_attn = sum(ops[n][0] for n in ATTENTION_OPS if n in ops)
    twin_moe = sum(ops[n][0] for n in MOE_OPS)
    print(f"  {'op (one MoE layer)':34} {'twin us':>9} {'AIC us':>9} {'twin/AIC':>6}")
    for version, us in attn.items():
        print(row(f"attention module (AIC {version})", twin_attn, us))
    print(row("MoE: route + experts (AIC 0.5.10)", twin_moe, aic.moe.get(tokens)))
    elements = tokens * model.hidden_size
    ar_us = aic.allreduce_us("sglang_graph" if graph else "sglang_eager", elements)
    print(row(f"all-reduce {elements:,} elements", ops["attn_allreduce"][0], ar_us))
    for name in ("q_b_proj", "o_proj", "indexer_q_proj", "shared_gate_up", "shared_down", "router"):
        key = ops[name][1]
        dtype = "fp8_block" if key.dtype == "fp8_block" else "bfloat16"
        print(
            row(
                f"GEMM {name} {key.m}x{key.n}x{key.k}",
                ops[name][0],
                aic.gemm.get((dtype, key.m, key.n, key.k)),
            )
        )
    rest = sum(ops[n][0] for n in OTHER_OPS)
    sources = sorted(
        {ops[n][2] for n in (*ATTENTION_OPS, *MOE_OPS, *OTHER_OPS, "attn_allreduce") if n in ops}
    )
    print(f"  twin sources: {', '.join(sources)}")
    twin_layer = twin_attn + twin_moe + 2 * ops["attn_allreduce"][0] + rest
    aic_attn = attn.get("0.5.10") or attn.get("0.5.14")
    if aic_attn is None or tokens not in aic.moe or ar_us is None:
        return twin_layer, float("nan")
    aic_layer = aic_attn + aic.moe[tokens] + 2 * ar_us + rest  # norms, router, shared expert: the twin's
    print(row("layer: attention + MoE + 2 all-reduces + rest", twin_layer, aic_layer))
    return twin_layer, aic_layer


def step_total(twin_layer_us: float, aic_layer_us: float) -> None:
    twin, aic = twin_layer_us * LAYERS / 1e3, aic_layer_us * LAYERS / 1e3
    print(f"  x {LAYERS} layers: twin {twin:.2f} ms, with AIC's measured ops {aic:.2f} ms\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--aic-git-dir", type=Path, required=True, help="ai-dynamo/aiconfigurator's git directory"
    )
    ap.add_argument("--system", choices=tuple(KV), default="b200_sxm")
    args = ap.parse_args(argv)
    if not (args.aic_git_dir / "HEAD").is_file():
        print(
            f"--aic-git-dir: {args.aic_git_dir} is not a git directory (expected a HEAD file there)",
            file=sys.stderr,
        )
        return 2
    aic = Aic(args.aic_git_dir, args.system)
    if not aic.gen["0.5.10"] or not aic.moe:
        print(
            f"--aic-git-dir: no GLM-5 DSA or MoE table of {args.system} at commit {AIC_COMMIT}",
            file=sys.stderr,
        )
        return 2
    kv = KV[args.system][0]
    model = load_model("zai-org/GLM-5-FP8", kv_dtype=kv, hub=False)
    db = perfdb_for(load_system(args.system), "sglang")
    print(f"GLM-5-FP8 on {args.system}, SGLang, TP8, {kv} KV; AIC: measured ({AIC_COMMIT})")
    print(f"{LAYERS} layers; a step's 'layer' totals x {LAYERS} approximate the step's kernel time\n")
    for batch, kv_len in DECODE:
        print(f"decode, batch {batch}, {kv_len:,} cached tokens:")
        attn = {v: t.get((batch, 1, kv_len)) for v, t in aic.gen.items()}
        shape = StepShape(decode_batch=batch, decode_kv_len=kv_len)
        step_total(*compare(aic, db, model, shape, batch, attn, True))
    for n in PREFILL:
        print(f"prefill of one {n:,}-token prompt:")
        attn = {v: t.get((1, n, 0)) for v, t in aic.ctx.items()}
        step_total(*compare(aic, db, model, StepShape(prefill=((n, 0),)), n, attn, False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
