"""Time real tensor- and expert-parallel steps over several GPUs (NCCL), to check the step model's TP/EP
terms.

A Qwen3-235B-A22B-shaped stack (first N layers, random bf16 weights) split the way vLLM splits it with
--tensor-parallel-size T --enable-expert-parallel: attention heads over T ranks (KV heads replicated when T >
4), experts over T ranks (each rank runs its local experts on every token), an all_reduce after attention and
after the MoE. Decode steps are captured in a CUDA graph (NCCL inside), prefill steps timed eagerly.

    python accuracy/gpu_tp_step_check.py --gpus 4 --out $OUT/tp_step_check.json
Compare: python accuracy/compare_step_check.py accuracy/results/tp_step_check_h200.json
"""

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

CONFIGS = Path(__file__).resolve().parents[1] / "src/servelab/specs/data/models"


def rms_norm(x, w):
    return F.rms_norm(x, (x.shape[-1],), w, 1e-6)


class ShardedStack:
    def __init__(self, cfg, layers, rank, world):
        dev = torch.device("cuda", rank)
        g = lambda *s: torch.randn(*s, device=dev, dtype=torch.bfloat16) * 0.02  # noqa: E731
        self.h, self.hd = cfg["hidden_size"], cfg["head_dim"]
        self.heads = cfg["num_attention_heads"] // world
        self.kvh = max(1, cfg["num_key_value_heads"] // world)
        self.experts = cfg["num_experts"] // world
        self.topk, self.inter, self.total_experts = (
            cfg["num_experts_per_tok"],
            cfg["moe_intermediate_size"],
            cfg["num_experts"],
        )
        self.first_expert = rank * self.experts
        self.vocab = cfg["vocab_size"] // world
        self.embed, self.lm_head = g(cfg["vocab_size"], self.h), g(self.vocab, self.h)
        self.ones = torch.ones(self.h, device=dev, dtype=torch.bfloat16)
        self.layers = [
            dict(
                qkv=g((self.heads + 2 * self.kvh) * self.hd, self.h),
                o=g(self.h, self.heads * self.hd),
                router=g(self.total_experts, self.h),
                w13=g(self.experts, self.h, 2 * self.inter),
                w2=g(self.experts, self.inter, self.h),
            )
            for _ in range(layers)
        ]
        self.attention_fn, self.ffn_fn = self.attention, self.ffn

    def moe(self, x, L):
        weights, ids = torch.topk(torch.softmax((x @ L["router"].t()).float(), -1), self.topk, -1)
        local = ids - self.first_expert
        mine = (local >= 0) & (local < self.experts)
        flat = torch.where(
            mine, local, self.experts
        ).flatten()  # non-local picks go to a dummy group at the end
        order = torch.argsort(flat)
        counts = F.one_hot(flat, self.experts + 1).sum(0)[: self.experts]
        offs = torch.cumsum(counts, 0).to(torch.int32)
        xs = x.repeat_interleave(self.topk, 0)[order]
        h13 = torch._grouped_mm(xs, L["w13"], offs=offs)
        out = torch._grouped_mm(F.silu(h13[:, : self.inter]) * h13[:, self.inter :], L["w2"], offs=offs)
        y = torch.zeros_like(out)
        y[order] = out
        w = (weights * mine).unsqueeze(-1).to(y.dtype)
        return (y.view(-1, self.topk, self.h) * w).sum(1)

    def attention(self, x, L, kc, vc, B, S):
        y = rms_norm(x, self.ones)
        q, k, v = (y @ L["qkv"].t()).split([self.heads * self.hd, self.kvh * self.hd, self.kvh * self.hd], -1)
        q = q.view(B, S, self.heads, self.hd).transpose(1, 2)
        k = k.view(B, S, self.kvh, self.hd).transpose(1, 2)
        v = v.view(B, S, self.kvh, self.hd).transpose(1, 2)
        if kc is None:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            a = F.scaled_dot_product_attention(q, kc, vc, enable_gqa=True)
        return a.transpose(1, 2).reshape(B * S, -1) @ L["o"].t()

    def ffn(self, x, L):
        return self.moe(rms_norm(x, self.ones), L)

    def forward(self, tokens, cache=None):
        B, S = tokens.shape
        x = self.embed[tokens].view(B * S, self.h)
        for i, L in enumerate(self.layers):
            kc, vc = cache[i] if cache is not None else (None, None)
            a = self.attention_fn(x, L, kc, vc, B, S)
            dist.all_reduce(a)
            x = x + a
            m = self.ffn_fn(x, L)
            dist.all_reduce(m)
            x = x + m
        return rms_norm(x.view(B, S, self.h)[:, -1], self.ones) @ self.lm_head.t()


def timed(fn, reps):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(reps):
        dist.barrier()
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e))
    out.sort()
    return statistics.median(out), out[len(out) // 10], out[len(out) * 9 // 10]


def worker(rank, world, args, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29500 + world))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    cfg = json.loads((CONFIGS / "qwen3-235b-a22b.json").read_text())
    torch.manual_seed(rank)
    stack = ShardedStack(cfg, args.layers, rank, world)
    if args.compile:  # fuse elementwise glue as engines do; collectives stay eager between compiled blocks
        torch._dynamo.config.cache_size_limit = 64
        stack.attention_fn = torch.compile(stack.attention, dynamic=False)
        stack.ffn_fn = torch.compile(stack.ffn, dynamic=False)
    rows = []
    with torch.inference_mode():
        for batch, seq in [(1, 2048), (1, 8192)]:
            tokens = torch.randint(0, cfg["vocab_size"], (batch, seq), device="cuda")
            for _ in range(2):
                stack.forward(tokens)
            med, p10, p90 = timed(lambda tokens=tokens: stack.forward(tokens), 5)
            rows.append(dict(phase="prefill", batch=batch, seq=seq, ms=med, p10=p10, p90=p90))
        for batch, kv in [(1, 2048), (16, 2048), (64, 2048), (128, 4096)]:
            cache = [
                (
                    torch.randn(batch, stack.kvh, kv, stack.hd, device="cuda", dtype=torch.bfloat16),
                    torch.randn(batch, stack.kvh, kv, stack.hd, device="cuda", dtype=torch.bfloat16),
                )
                for _ in range(args.layers)
            ]
            tokens = torch.randint(0, cfg["vocab_size"], (batch, 1), device="cuda")
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    stack.forward(tokens, cache)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                stack.forward(tokens, cache)
            for _ in range(3):
                graph.replay()
            med, p10, p90 = timed(graph.replay, 20)
            rows.append(dict(phase="decode", batch=batch, kv_len=kv, ms=med, p10=p10, p90=p90))
            del graph, cache
    if rank == 0:
        queue.put(rows)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, nargs="+", default=[2])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--out", required=True)
    ap.add_argument("--compile", action="store_true", help="torch.compile the attention and MoE blocks")
    args = ap.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    t0 = time.time()
    all_rows = []
    ctx = mp.get_context("spawn")
    for world in args.gpus:
        queue = ctx.Queue()
        mp.spawn(worker, args=(world, args, queue), nprocs=world, join=True)
        for row in queue.get():
            row.update(model="qwen3-235b-a22b", layers=args.layers, tp=world, ep=world, compiled=args.compile)
            all_rows.append(row)
            print(world, row, flush=True)
    meta = dict(
        gpu=torch.cuda.get_device_name(0),
        gpus=args.gpus,
        torch=torch.__version__,
        cuda=torch.version.cuda,
        nccl=".".join(map(str, torch.cuda.nccl.version())),
        date=time.strftime("%Y-%m-%d"),
        nccl_nvls_enable=os.environ.get("NCCL_NVLS_ENABLE"),
        seconds=round(time.time() - t0, 1),
        command=f"python accuracy/gpu_tp_step_check.py --gpus {' '.join(map(str, args.gpus))} "
        f"--layers {args.layers}" + (" --compile" if args.compile else ""),
    )
    Path(args.out).write_text(json.dumps({"provenance": meta, "rows": all_rows}, indent=1))


if __name__ == "__main__":
    main()
