"""Time real tensor- and expert-parallel steps over several GPUs (NCCL), or one rank of such a split alone on
one GPU, to check the step model's TP/EP terms.

A Qwen3-235B-A22B-shaped stack (first N layers, random bf16 weights) split the way vLLM splits it with
--tensor-parallel-size T --enable-expert-parallel: attention heads over T ranks (KV heads replicated when T >
4), experts over T ranks (each rank runs its local experts on every token), an all_reduce after attention and
after the MoE. Decode steps are captured in a CUDA graph (NCCL inside), prefill steps timed eagerly.

    python accuracy/gpu_tp_step_check.py --gpus 4 --out $OUT/tp_step_check.json
Compare: python accuracy/compare_step_check.py accuracy/results/tp_step_check_h200.json

--shard-of T builds rank 0 of a T-way split of --model on ONE GPU and runs it with no collective (the
all-reduces after attention and after the MoE, and MiniMax-M2's all-reduce of the q / k norm variance, are
priced separately): 1/T of the query heads, the KV heads as vLLM shards or replicates them, E/T experts that
receive the tokens a top-k router over all E experts sends them (softmax, or sigmoid with a correction bias,
as the config says), q / k norm, partial rotary embedding, SDPA; the LM head's 1/T of the vocabulary. Prefill
b1 s2048 / s8192 / s16384 eagerly, decode b16 / b64 at 8,192 cached tokens in a CUDA graph:

    python accuracy/gpu_tp_step_check.py --shard-of 8 --model minimax-m2.5 --layers 16 --out $OUT/shard.json
"""

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from gpu_shard_shapes import MODEL_CONFIGS, read_config, shard_dims

CONFIGS = Path(__file__).resolve().parents[1] / "src/servelab/specs/data/models"
SHARD_PREFILL = [(1, 2048), (1, 8192), (1, 16384)]
SHARD_DECODE = [(16, 8192), (64, 8192)]


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


def rotary(x, cos, sin, dims):
    """NeoX-style rotary embedding of the first `dims` of each head (MiniMax-M2 turns 64 of 128)."""
    half = dims // 2
    x1, x2, rest = x[..., :half], x[..., half:dims], x[..., dims:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest), dim=-1)


class RankShard:
    """Rank `rank` of a `world`-way TP attention + EP experts split, alone on one GPU (no collective): the
    first `layers` layers with random bf16 weights (the router's in float32 where vLLM keeps it so)."""

    def __init__(self, cfg, layers, world, rank=0):
        d = self.d = shard_dims(cfg, world, rank)
        g = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16) * 0.02  # noqa: E731
        ones = lambda n: torch.ones(n, device="cuda", dtype=torch.bfloat16)  # noqa: E731
        self.h, self.hd = d.hidden, d.head_dim
        # vLLM's MiniMax-M2 gate is a float32 linear layer (GateLinear, params_dtype and out_dtype float32)
        self.router_dtype = torch.float32 if d.scoring == "sigmoid" else torch.bfloat16
        q_norm = d.heads * d.head_dim if d.qk_norm == "per_layer" else d.head_dim
        k_norm = d.kv_heads * d.head_dim if d.qk_norm == "per_layer" else d.head_dim
        self.embed, self.lm_head = g(d.vocab_local, d.hidden), g(d.vocab_local, d.hidden)
        self.final_norm = ones(d.hidden)
        self.layers = [
            dict(
                n1=ones(d.hidden),
                n2=ones(d.hidden),
                qn=ones(q_norm),
                kn=ones(k_norm),
                qkv=g((d.heads + 2 * d.kv_heads) * d.head_dim, d.hidden),
                o=g(d.hidden, d.heads * d.head_dim),
                router=g(d.total_experts, d.hidden).to(self.router_dtype),
                bias=(torch.randn(d.total_experts, device="cuda") * 0.01),
                w13=g(d.experts, d.hidden, 2 * d.inter),  # grouped_mm takes [G, K, N]
                w2=g(d.experts, d.inter, d.hidden),
            )
            for _ in range(layers)
        ]
        self.theta = cfg.get("rope_theta", 1e6)
        self.attention_fn, self.ffn_fn = self.attention, self.ffn
        self.pairs = None  # a list while local_pairs counts the pairs each layer routes here
        self.lean = False  # moe_lean in place of moe (gpu_shard_profile.py --lean)

    def route(self, x, L):
        """Top-k of all experts for every token: (weights [T, k] float32, expert ids [T, k])."""
        d = self.d
        logits = x.to(self.router_dtype) @ L["router"].t()
        # MiniMax-M2: pick by score + correction bias, weigh by the score; either way renormalised
        if d.scoring == "sigmoid":
            scores = torch.sigmoid(logits.float())
            ids = torch.topk(scores + L["bias"], d.topk, -1).indices
            weights = scores.gather(1, ids)
        else:  # Qwen3-MoE: softmax, top-k, renormalise (norm_topk_prob)
            weights, ids = torch.topk(torch.softmax(logits.float(), -1), d.topk, -1)
        return weights / weights.sum(-1, keepdim=True), ids

    def moe(self, x, L):
        """This rank's experts on the (token, pick) pairs routed to them, in static shapes (a CUDA graph and
        torch.compile take them), as vLLM's fused MoE with an expert map runs them: every pair is sorted, the
        local ones first by expert; the grouped GEMMs run the local rows only, but the activation and the
        weighted top-k sum pass over all T x topk rows, the other ranks' pairs masked to zero."""
        d = self.d
        weights, ids = self.route(x, L)
        local = ids - d.first_expert
        mine = (local >= 0) & (local < d.experts)
        flat = torch.where(mine, local, d.experts).flatten()
        order = torch.argsort(flat)
        counts = torch.zeros(d.experts + 1, device=x.device, dtype=torch.int64)
        counts = counts.scatter_add_(0, flat, torch.ones_like(flat))[: d.experts]
        if self.pairs is not None:  # the counting pass (eager, untimed)
            self.pairs.append(counts.sum())
        offs = torch.cumsum(counts, 0).to(torch.int32)
        h13 = torch._grouped_mm(x[order // d.topk], L["w13"], offs=offs)
        out = torch._grouped_mm(F.silu(h13[:, : d.inter]) * h13[:, d.inter :], L["w2"], offs=offs)
        # back to (token, pick) order; rows past the local ones were never written, and where() drops them
        y = out[torch.argsort(order)].view(-1, d.topk, self.h)
        y = torch.where(mine.unsqueeze(-1), y, 0)
        return (y * weights.unsqueeze(-1).to(y.dtype)).sum(1)

    def moe_lean(self, x, L):
        """The same experts on the local pairs alone (found with a host sync, so eager prefill only): the
        gather, GEMMs and weighted sum touch about T rows, not T x topk; a floor for the glue around them."""
        d = self.d
        weights, ids = self.route(x, L)
        local = ids - d.first_expert
        t, j = torch.nonzero((local >= 0) & (local < d.experts), as_tuple=True)
        e = local[t, j]
        order = torch.argsort(e)
        t, j, e = t[order], j[order], e[order]
        offs = torch.cumsum(torch.bincount(e, minlength=d.experts), 0).to(torch.int32)
        h13 = torch._grouped_mm(x[t], L["w13"], offs=offs)
        out = torch._grouped_mm(F.silu(h13[:, : d.inter]) * h13[:, d.inter :], L["w2"], offs=offs)
        y = torch.zeros_like(x)
        return y.index_add_(0, t, out * weights[t, j].unsqueeze(-1).to(out.dtype))

    def attention(self, x, L, cos, sin, kc, vc, B, S):
        d = self.d
        y = rms_norm(x, L["n1"])
        q, k, v = (y @ L["qkv"].t()).split(
            [d.heads * self.hd, d.kv_heads * self.hd, d.kv_heads * self.hd], -1
        )
        if d.qk_norm == "per_layer":  # over this rank's part (the variance's all-reduce is priced apart)
            q, k = rms_norm(q, L["qn"]), rms_norm(k, L["kn"])
            q, k = q.view(B, S, d.heads, self.hd), k.view(B, S, d.kv_heads, self.hd)
        else:
            q = rms_norm(q.view(B, S, d.heads, self.hd), L["qn"])
            k = rms_norm(k.view(B, S, d.kv_heads, self.hd), L["kn"])
        q, k = rotary(q, cos, sin, d.rotary_dim), rotary(k, cos, sin, d.rotary_dim)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = v.view(B, S, d.kv_heads, self.hd).transpose(1, 2)
        if kc is None:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:  # decode against the cache (the step's own key is not appended, as in gpu_step_check.py)
            a = F.scaled_dot_product_attention(q, kc, vc, enable_gqa=True)
        return a.transpose(1, 2).reshape(B * S, -1) @ L["o"].t()

    def ffn(self, x, L):
        return (self.moe_lean if self.lean else self.moe)(rms_norm(x, L["n2"]), L)

    def forward(self, tokens, positions, cache=None):
        B, S = tokens.shape
        x = self.embed[tokens % self.d.vocab_local].view(B * S, self.h)
        half = self.d.rotary_dim // 2
        inv = 1.0 / (self.theta ** (torch.arange(half, device=x.device, dtype=torch.float32) / half))
        ang = positions.float().unsqueeze(-1) * inv
        shape = (1, S, 1, half) if cache is None else (B, 1, 1, half)
        cos, sin = ang.cos().to(x.dtype).view(shape), ang.sin().to(x.dtype).view(shape)
        for i, L in enumerate(self.layers):
            kc, vc = cache[i] if cache is not None else (None, None)
            x = x + self.attention_fn(x, L, cos, sin, kc, vc, B, S)
            x = x + self.ffn_fn(x, L)
        return rms_norm(x.view(B, S, self.h)[:, -1], self.final_norm) @ self.lm_head.t()

    def local_pairs(self, tokens, positions):
        """(token, pick) pairs routed to this rank's experts per token and layer, mean and max over
        the layers of one eager forward: 1 on average when topk / world of each token's picks land on each
        rank (MiniMax-M2 TP8: 8 / 8); the most loaded rank sets an EP step's pace."""
        fns, self.attention_fn, self.ffn_fn = (self.attention_fn, self.ffn_fn), self.attention, self.ffn
        self.pairs = []
        self.forward(tokens, positions)
        per_layer = [p.item() / tokens.numel() for p in self.pairs]
        self.pairs, (self.attention_fn, self.ffn_fn) = None, fns
        return statistics.mean(per_layer), max(per_layer)


def timed(fn, reps):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(reps):
        if dist.is_initialized():
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


def check_moe(stack, tokens=512):
    """The rank's MoE against a float32 loop over its experts, on fresh random tokens: the sorting and spare
    row must give every local pair its expert's output and the other pairs nothing (bf16: about 1e-2)."""
    d, L = stack.d, stack.layers[0]
    x = torch.randn(tokens, d.hidden, device="cuda", dtype=torch.bfloat16)
    got = (stack.moe_lean if stack.lean else stack.moe)(x, L).float()
    weights, ids = stack.route(x, L)
    ref = torch.zeros(tokens, d.hidden, device="cuda")
    for e in range(d.experts):
        t, j = torch.nonzero(ids == d.first_expert + e, as_tuple=True)
        h13 = x[t].float() @ L["w13"][e].float()
        out = (F.silu(h13[:, : d.inter]) * h13[:, d.inter :]) @ L["w2"][e].float()
        ref.index_add_(0, t, out * weights[t, j].unsqueeze(-1))
    err = ((got - ref).norm() / ref.norm()).item()
    print(
        f"MoE check{' (lean)' if stack.lean else ''}: relative error {err:.2e} over {tokens} tokens",
        flush=True,
    )
    if not err < 2e-2:  # NaN fails too
        raise SystemExit(f"the rank's MoE is wrong: relative error {err}")


def run_shard(args):
    """Rank 0 of a --shard-of way split on this one GPU: its prefill and decode steps, no collective."""
    cfg = read_config(args.model)
    torch.manual_seed(0)
    stack = RankShard(cfg, args.layers, args.shard_of)
    if args.compile:  # fuse elementwise glue as engines do (vLLM compiles its layers with torch.compile)
        torch._dynamo.config.cache_size_limit = 64
        stack.attention_fn = torch.compile(stack.attention, dynamic=False)
        stack.ffn_fn = torch.compile(stack.ffn, dynamic=False)
    rows = []
    with torch.inference_mode():
        check_moe(stack)
        for batch, seq in SHARD_PREFILL:
            tokens = torch.randint(0, stack.d.vocab, (batch, seq), device="cuda")
            pos = torch.arange(seq, device="cuda")
            mean_pairs, max_pairs = stack.local_pairs(tokens, pos)
            for _ in range(2):
                stack.forward(tokens, pos)
            if not stack.forward(tokens, pos).isfinite().all():
                raise SystemExit(f"prefill b{batch} s{seq}: the logits are not finite")
            med, p10, p90 = timed(lambda tokens=tokens, pos=pos: stack.forward(tokens, pos), 7)
            rows.append(
                dict(phase="prefill", batch=batch, seq=seq, ms=med, p10=p10, p90=p90)
                | dict(local_pairs=mean_pairs, local_pairs_max=max_pairs)
            )
            print(f"prefill b{batch} s{seq}: {med:.2f} ms; local pairs/token {mean_pairs:.3f}", flush=True)
        for batch, kv in SHARD_DECODE:
            shape = (batch, stack.d.kv_heads, kv, stack.hd)
            cache = [
                (
                    torch.randn(shape, device="cuda", dtype=torch.bfloat16),
                    torch.randn(shape, device="cuda", dtype=torch.bfloat16),
                )
                for _ in range(args.layers)
            ]
            tokens = torch.randint(0, stack.d.vocab, (batch, 1), device="cuda")
            pos = torch.full((batch,), kv, device="cuda")
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    stack.forward(tokens, pos, cache)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                logits = stack.forward(tokens, pos, cache)
            for _ in range(3):
                graph.replay()
            if not logits.isfinite().all():
                raise SystemExit(f"decode b{batch} kv{kv}: the logits are not finite")
            med, p10, p90 = timed(graph.replay, 30)
            rows.append(dict(phase="decode", batch=batch, kv_len=kv, ms=med, p10=p10, p90=p90))
            print(f"decode b{batch} kv{kv}: {med:.3f} ms", flush=True)
            del graph, cache, logits
            torch.cuda.empty_cache()
    for row in rows:
        row.update(
            model=args.model,
            config=MODEL_CONFIGS[args.model],
            layers=args.layers,
            tp=args.shard_of,
            ep=args.shard_of,
            shard_of=args.shard_of,
            rank=0,
            compiled=args.compile,
        )
    return rows


def driver_version():
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        return None
    return done.stdout.strip() or None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, nargs="+", default=[2])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--out", required=True)
    ap.add_argument("--compile", action="store_true", help="torch.compile the attention and MoE blocks")
    ap.add_argument(
        "--shard-of", type=int, default=0, help="time rank 0 of this many ranks alone on one GPU (no NCCL)"
    )
    ap.add_argument("--model", default="qwen3-235b-a22b", choices=sorted(MODEL_CONFIGS))
    args = ap.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    t0 = time.time()
    all_rows = []
    if args.shard_of:
        all_rows = run_shard(args)
    else:
        ctx = mp.get_context("spawn")
        for world in args.gpus:
            queue = ctx.Queue()
            mp.spawn(worker, args=(world, args, queue), nprocs=world, join=True)
            for row in queue.get():
                row.update(
                    model="qwen3-235b-a22b", layers=args.layers, tp=world, ep=world, compiled=args.compile
                )
                all_rows.append(row)
                print(world, row, flush=True)
    meta = dict(
        gpu=torch.cuda.get_device_name(0),
        driver=driver_version(),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        date=time.strftime("%Y-%m-%d"),
        seconds=round(time.time() - t0, 1),
        command=f"python accuracy/gpu_tp_step_check.py --layers {args.layers}"
        + (f" --shard-of {args.shard_of} --model {args.model}" if args.shard_of else "")
        + ("" if args.shard_of else f" --gpus {' '.join(map(str, args.gpus))}")
        + (" --compile" if args.compile else ""),
    )
    if args.shard_of:
        meta["collectives"] = "none: rank 0 alone; the all-reduces are priced separately"
        meta["sdpa_note"] = "SDPA backend chosen by PyTorch (no backend forced)"
    else:
        meta.update(
            gpus=args.gpus,
            nccl=".".join(map(str, torch.cuda.nccl.version())),
            nccl_nvls_enable=os.environ.get("NCCL_NVLS_ENABLE"),
        )
    Path(args.out).write_text(json.dumps({"provenance": meta, "rows": all_rows}, indent=1))


if __name__ == "__main__":
    main()
