"""Time real engine steps on a GPU and save them, to check servelab's `torch` backend (kernel time only).

Builds decoder stacks with random weights from the embedded configs (a Qwen3-32B-shaped dense model and a
Qwen3-30B-A3B-shaped MoE model, first N layers plus embedding and LM head) from plain torch ops: RMSNorm, QKV
and output GEMMs, per-head q/k norm, rotary embedding, SDPA attention (PyTorch picks the backend), SwiGLU FFN
or a top-k MoE over torch._grouped_mm. Prefill steps are timed eagerly (kernels are long); decode steps are
captured in a CUDA graph and replayed, as engines do. Medians with p10/p90 from CUDA events.

Runs on the device only (torch + CUDA); needs nothing from servelab:
    python accuracy/gpu_step_check.py --out $OUT/step_check.json
Compare with predictions on any machine:
    python accuracy/compare_step_check.py accuracy/results/step_check_h200.json
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

CONFIGS = Path(__file__).resolve().parents[1] / "src/servelab/specs/data/models"


def rms_norm(x, w, eps=1e-6):
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def rotary(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Stack:
    """The first `layers` decoder layers of a GQA model (dense SwiGLU or top-k MoE), random bf16 weights."""

    def __init__(self, cfg: dict, layers: int, device="cuda"):
        g = lambda *s: torch.randn(*s, device=device, dtype=torch.bfloat16) * 0.02  # noqa: E731
        self.h, self.heads, self.kvh = (
            cfg["hidden_size"],
            cfg["num_attention_heads"],
            cfg["num_key_value_heads"],
        )
        self.hd = cfg.get("head_dim") or self.h // self.heads
        self.vocab = cfg["vocab_size"]
        self.experts = cfg.get("num_experts", 0)
        self.topk = cfg.get("num_experts_per_tok", 0)
        self.inter = cfg["moe_intermediate_size"] if self.experts else cfg["intermediate_size"]
        self.embed = g(self.vocab, self.h)
        self.lm_head = g(self.vocab, self.h)
        self.final_norm = torch.ones(self.h, device=device, dtype=torch.bfloat16)
        self.layers = []
        for _ in range(layers):
            layer = {
                "n1": torch.ones(self.h, device=device, dtype=torch.bfloat16),
                "n2": torch.ones(self.h, device=device, dtype=torch.bfloat16),
                "qn": torch.ones(self.hd, device=device, dtype=torch.bfloat16),
                "kn": torch.ones(self.hd, device=device, dtype=torch.bfloat16),
                "qkv": g((self.heads + 2 * self.kvh) * self.hd, self.h),
                "o": g(self.h, self.heads * self.hd),
            }
            if self.experts:
                layer["router"] = g(self.experts, self.h)
                layer["w13"] = g(self.experts, self.h, 2 * self.inter)  # grouped_mm takes [G, K, N]
                layer["w2"] = g(self.experts, self.inter, self.h)
            else:
                layer["gate_up"] = g(2 * self.inter, self.h)
                layer["down"] = g(self.h, self.inter)
            self.layers.append(layer)
        self.layer_fn = self.layer

    def moe(self, x, L):
        logits = x @ L["router"].t()
        weights, ids = torch.topk(torch.softmax(logits.float(), dim=-1), self.topk, dim=-1)
        flat = ids.flatten()
        order = torch.argsort(flat)
        counts = F.one_hot(flat, self.experts).sum(0)
        offs = torch.cumsum(counts, 0).to(torch.int32)
        xs = x.repeat_interleave(self.topk, dim=0)[order]
        h13 = torch._grouped_mm(xs, L["w13"], offs=offs)
        a = F.silu(h13[:, : self.inter]) * h13[:, self.inter :]
        out = torch._grouped_mm(a, L["w2"], offs=offs)
        y = torch.empty_like(out)
        y[order] = out
        y = (y.view(-1, self.topk, self.h) * weights.unsqueeze(-1).to(y.dtype)).sum(1)
        return y

    def layer(self, x, L, cos, sin, kc, vc, B, S, prefill):
        r = x
        y = rms_norm(x, L["n1"])
        qkv = y @ L["qkv"].t()
        q, k, v = qkv.split([self.heads * self.hd, self.kvh * self.hd, self.kvh * self.hd], dim=-1)
        q = rotary(rms_norm(q.view(B, S, self.heads, self.hd), L["qn"]), cos, sin)
        k = rotary(rms_norm(k.view(B, S, self.kvh, self.hd), L["kn"]), cos, sin)
        v = v.view(B, S, self.kvh, self.hd)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if prefill:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            a = F.scaled_dot_product_attention(q, kc, vc, enable_gqa=True)
        a = a.transpose(1, 2).reshape(B * S, self.heads * self.hd)
        x = r + a @ L["o"].t()
        r = x
        y = rms_norm(x, L["n2"])
        if self.experts:
            y = self.moe(y, L)
        else:
            gu = y @ L["gate_up"].t()
            y = (F.silu(gu[:, : self.inter]) * gu[:, self.inter :]) @ L["down"].t()
        return r + y

    def forward(self, tokens, positions, cache=None, prefill=True):
        """tokens [B, S]; prefill: causal over S; decode: S == 1 against cache (k, v) of [B, kvh, L, hd]
        each."""
        B, S = tokens.shape
        x = self.embed[tokens].view(B * S, self.h)
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2, device=x.device, dtype=torch.float32) / self.hd))
        ang = positions.float().unsqueeze(-1) * inv
        shape = (1, S, 1, -1) if prefill else (B, 1, 1, -1)
        cos, sin = ang.cos().to(x.dtype).view(shape), ang.sin().to(x.dtype).view(shape)
        for i, L in enumerate(self.layers):
            kc, vc = cache[i] if cache is not None else (None, None)
            x = self.layer_fn(x, L, cos, sin, kc, vc, B, S, prefill)
        last = x.view(B, S, self.h)[:, -1]
        return rms_norm(last, self.final_norm) @ self.lm_head.t()


def timed(fn, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end))
    out.sort()
    return statistics.median(out), out[len(out) // 10], out[(len(out) * 9) // 10]


def run_model(name, layers, prefill_cases, decode_cases, rows, compiled=False):
    cfg = json.loads((CONFIGS / f"{name}.json").read_text())
    torch.manual_seed(0)
    stack = Stack(cfg, layers)
    if compiled:  # fuse the elementwise ops as engines do (vLLM compiles its layers with torch.compile too)
        stack.layer_fn = torch.compile(stack.layer, dynamic=False)
    for batch, seq in prefill_cases:
        tokens = torch.randint(0, stack.vocab, (batch, seq), device="cuda")
        pos = torch.arange(seq, device="cuda")
        with torch.inference_mode():
            for _ in range(2):
                stack.forward(tokens, pos)
            med, p10, p90 = timed(lambda tokens=tokens, pos=pos: stack.forward(tokens, pos), 7)
        rows.append(
            dict(
                model=name,
                layers=layers,
                phase="prefill",
                batch=batch,
                seq=seq,
                ms=med,
                p10=p10,
                p90=p90,
                compiled=compiled,
            )
        )
        print(f"{name} prefill b{batch} s{seq}: {med:.2f} ms", flush=True)
    for batch, kv in decode_cases:
        cache = [
            (
                torch.randn(batch, stack.kvh, kv, stack.hd, device="cuda", dtype=torch.bfloat16),
                torch.randn(batch, stack.kvh, kv, stack.hd, device="cuda", dtype=torch.bfloat16),
            )
            for _ in range(layers)
        ]
        tokens = torch.randint(0, stack.vocab, (batch, 1), device="cuda")
        pos = torch.full((batch,), kv, device="cuda")
        with torch.inference_mode():
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    stack.forward(tokens, pos, cache, prefill=False)
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                stack.forward(tokens, pos, cache, prefill=False)
            for _ in range(5):
                graph.replay()
            med, p10, p90 = timed(graph.replay, 30)
        rows.append(
            dict(
                model=name,
                layers=layers,
                phase="decode",
                batch=batch,
                kv_len=kv,
                ms=med,
                p10=p10,
                p90=p90,
                compiled=compiled,
            )
        )
        print(f"{name} decode b{batch} kv{kv}: {med:.3f} ms", flush=True)
        del cache, graph
        torch.cuda.empty_cache()
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--compile", action="store_true", help="torch.compile each layer (fused elementwise ops)")
    args = ap.parse_args()
    t0 = time.time()
    rows: list = []
    prefill = [(1, 1024), (1, 4096), (1, 8192), (4, 2048)]
    decode = [(1, 2048), (8, 2048), (32, 2048), (128, 2048), (64, 8192)]
    if args.quick:
        prefill, decode = prefill[:1], decode[:2]
    if args.compile:
        prefill, decode = [(1, 4096), (4, 2048)], [(1, 2048), (32, 2048), (64, 8192)]
        torch._dynamo.config.cache_size_limit = 64
    run_model("qwen3-32b", args.layers, prefill, decode, rows, args.compile)
    run_model("qwen3-30b-a3b", args.layers, prefill, decode, rows, args.compile)
    props = torch.cuda.get_device_properties(0)
    meta = dict(
        gpu=props.name,
        torch=torch.__version__,
        cuda=torch.version.cuda,
        cudnn=torch.backends.cudnn.version(),
        date=time.strftime("%Y-%m-%d"),
        command="python accuracy/gpu_step_check.py"
        + (" --compile" if args.compile else "")
        + " --out OUT/step_check.json",
        seconds=round(time.time() - t0, 1),
        sdpa_note="SDPA backend chosen by PyTorch (no backend forced)",
    )
    Path(args.out).write_text(json.dumps({"provenance": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
