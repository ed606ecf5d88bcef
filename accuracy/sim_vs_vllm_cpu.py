"""Check servelab's aggregated-serving simulator against a real engine: vLLM (V1, CPU backend) serving a tiny
random-weight Llama on this machine.

1. Measure the engine's step costs with requests unlike the checked ones, from the server's own /metrics
   histograms: lone prompts of 32-1024 tokens that emit one token (a prefill step: vllm:request_prefill_time_
   seconds), and batches of 1-16 short prompts decoding 96 tokens together (a decode step at that batch:
   vllm:request_time_per_output_token_seconds), with the fixed path from vLLM's front end to its engine. One
   round of these runs before every measured load below, so costs and loads span the same minutes.
2. Fit servelab's own step model to those steps: the tiny model's op graph priced by the roofline of a "CPU
   system" whose bf16 GEMM and attention rates are fitted (and without a GPU's GEMM tiles), plus an engine
   profile whose per-step and per-sequence overheads are fitted (the same Nelder-Mead as the engine
   calibration, servelab.calibrate.fit).
3. Run closed-loop loads (`vllm bench serve --max-concurrency` style) at concurrencies 1, 4, 16 and two
   input/output lengths (each request's lengths varied by up to 20 %), twice (the second pass gives the
   run-to-run spread), and compare mean TTFT and TPOT with what the simulator predicts for the same workload
   (same request count, same start from idle, same length spread).

    .venv/bin/python accuracy/sim_vs_vllm_cpu.py [--json out.json] [--markdown]

Needs the vLLM CPU venv (scripts/setup_vllm_cpu.sh, default .venv-vllm or $SERVELAB_VLLM_VENV). Standalone it
serves the e2e tests' tiny model (servelab.runner.tiny_llama, cached under .cache/e2e) on its own server, or
checks a running one (--base-url, as the e2e test does).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import statistics as st
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import numpy as np

from servelab.calibrate.fit import nelder_mead
from servelab.perfdb.db import PerfDB
from servelab.predict.engines import EngineProfile
from servelab.predict.graph import StepShape, step_ops
from servelab.predict.serving import Workload, estimate_aggregated
from servelab.predict.step import step_time
from servelab.runner.server_metrics import metric_sums
from servelab.runner.tiny_llama import build_tiny_llama
from servelab.runner.vllm_cpu import VENV_ENV, VllmCpuServer, vllm_python
from servelab.specs import Parallel, SystemSpec, load_model

REPO = Path(__file__).resolve().parents[1]

PORT = 19031  # this check's port (19000-19499 belongs to this work)
MAX_NUM_SEQS = 16  # as servelab.runner.vllm_cpu.VllmCpuServer starts vLLM
MAX_NUM_BATCHED_TOKENS = (
    2048  # vLLM's CPU default for the API server; passed explicitly so the profile matches
)
KV_SPACE_GIB = 2  # VLLM_CPU_KVCACHE_SPACE there
# Checked loads vary each request's lengths by up to RANGE_RATIO either way (vLLM's --random-range-ratio), and
# the simulator is given U[1 - r, 1 + r]: identical requests would keep a closed loop in lockstep in the
# simulator while two busy cores stagger them on the engine (TTFT at concurrency 4, 512/32: 17.6 ms predicted
# in lockstep, 3.8 ms measured), a property of the check's load, not of serving. Prompt lengths take five
# levels, each warmed before measuring: vLLM's CPU runner pays 6-10 ms extra the first time a step has a token
# count it has not run before (lone prompts of 131-142 tokens: 8-12 ms the first time, 2.0-2.4 ms the second),
# which would measure warm-up instead of serving with every fresh length.
RANGE_RATIO = 0.2
KEEPALIVE_S = 2.0  # the client's keep-alive, under the server's 5 s (_session)
SEND_TRIES = 3  # sends of a request whose connection closed before any answer (_stream)
PROMPT_LEVELS = (0.8, 0.9, 1.0, 1.1, 1.2)
POINTS = [(c, isl, osl) for isl, osl in ((128, 64), (512, 32)) for c in (1, 4, 16)]
PREFILL_LENS = (32, 256, 1024)
DECODE_BATCHES = (1, 2, 4, 8, 16)  # up to max_num_seqs: one batch each
DECODE_TOKENS = 96


# ---------------------------------------------------------------------------------------------- step costs
async def _stream(session, url: str, prompt: list[int], max_tokens: int, model: str) -> list[float]:
    """Arrival times (s after sending) of the content events of one streamed completion."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "min_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }
    for attempt in range(SEND_TRIES):
        t0 = time.perf_counter()
        try:
            resp = await session.post(url, json=body)
            break
        except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
            # no answer began: the server closed the connection as the request was written (a keep-alive
            # race a starved client loses even under KEEPALIVE_S), so the request is sent again, timed anew
            if attempt == SEND_TRIES - 1:
                raise
    times = []
    async with resp:
        resp.raise_for_status()
        async for line in resp.content:
            if line.startswith(b"data: {") and b'"text"' in line:
                times.append(time.perf_counter() - t0)
            elif line.startswith(b"data: {") and b'"error"' in line:
                raise RuntimeError(f"vLLM streamed an error: {line[:300]!r}")
    if not times:
        raise RuntimeError("vLLM sent no content event")
    return times


VOCAB = {"size": 1000}  # set from the served model's config before measuring


def _prompt(rng: random.Random, n: int) -> list[int]:
    # random ids below the vocabulary (no special tokens): no prefix-cache hits between requests
    return [rng.randint(3, VOCAB["size"] - 1) for _ in range(n)]


@dataclass
class StepCosts:
    prefill_ms: dict = field(default_factory=dict)  # prompt tokens -> engine time of the prefill step
    decode_ms: dict = field(default_factory=dict)  # batch -> decode step time (engine time per output token)
    http_ms: float = 0.0  # client TTFT minus the engine's queue + prefill time, lone requests
    frontend_ms: float = 0.0  # vLLM's own TTFT (from its front end's arrival) minus its queue + prefill time


async def _prefill_step(s, url: str, base_url: str, rng, n: int, model: str) -> tuple[float, float, float]:
    """One lone prompt of n tokens emitting one token: (engine prefill ms, client path ms, front-end path
    ms)."""
    before = metric_sums(base_url)
    ttft = (await _stream(s, url, _prompt(rng, n), 1, model))[0]
    after = metric_sums(base_url)

    def delta(name):
        return after[name + "_sum"] - before[name + "_sum"]

    prefill, queue = delta("vllm:request_prefill_time_seconds"), delta("vllm:request_queue_time_seconds")
    engine_ttft = delta("vllm:time_to_first_token_seconds")
    return prefill * 1000, (ttft - prefill - queue) * 1000, (engine_ttft - prefill - queue) * 1000


async def _decode_step(s, url: str, base_url: str, rng, b: int, model: str) -> float:
    """b short prompts decoding DECODE_TOKENS together: the engine's own time per output token, ms (the metric
    the check compares TPOT with; stamped by the engine core, so a starved API process does not blur it)."""
    before = metric_sums(base_url)
    await asyncio.gather(*[_stream(s, url, _prompt(rng, 16), DECODE_TOKENS, model) for _ in range(b)])
    after = metric_sums(base_url)
    name = "vllm:request_time_per_output_token_seconds"
    return (
        (after[name + "_sum"] - before[name + "_sum"])
        / (after[name + "_count"] - before[name + "_count"])
        * 1000
    )


@dataclass
class StepSamples:
    """Step-cost samples gathered in rounds (every prompt length and decode batch once per round). The check
    runs one round before each measured pass of each point, so the costs and the checked loads span the same
    minutes: this 2-core machine's speed drifts by up to 2x within a run (a 32-token prefill read 2.85 ms
    while step costs were measured in one block at the start, then a whole 128-token request took 2.4 ms in
    the checked loads)."""

    prefill: dict = field(default_factory=lambda: {n: [] for n in PREFILL_LENS})
    decode: dict = field(default_factory=lambda: {b: [] for b in DECODE_BATCHES})
    http: list = field(default_factory=list)
    front: list = field(default_factory=list)

    async def _round(self, base_url: str, model: str, rng: random.Random, keep: bool) -> None:
        url = base_url + "/v1/completions"
        async with _session() as s:
            for n in PREFILL_LENS:
                step, client_path, front_path = await _prefill_step(s, url, base_url, rng, n, model)
                if keep:
                    self.prefill[n].append(step)
                    self.http.append(client_path)
                    self.front.append(front_path)
            for b in DECODE_BATCHES:
                tpot = await _decode_step(s, url, base_url, rng, b, model)
                if keep:
                    self.decode[b].append(tpot)

    def measure_round(self, base_url: str, model: str, seed: int, keep: bool = True) -> None:
        asyncio.run(self._round(base_url, model, random.Random(seed), keep))

    def costs(self) -> StepCosts:
        return StepCosts(
            prefill_ms={n: st.median(v) for n, v in self.prefill.items()},
            decode_ms={b: st.median(v) for b, v in self.decode.items()},
            http_ms=st.median(self.http),
            frontend_ms=st.median(self.front),
        )


# ---------------------------------------------------------------------------------------------- the model
def cpu_system(bf16_tflops: float, attention_tflops: float | None = None):
    """This machine as a servelab SystemSpec: the bf16 rate is fitted; memory is vLLM's KV space plus room for
    the tiny model (servelab's memory model keeps a 3 GiB framework reserve, so it is added here). With an
    attention rate, the roofline is a CPU's: attention at its own fitted rate (vLLM's CPU attention kernels
    and its GEMMs need not run at one rate), and no GPU 128-row GEMM tiles, which price a decode step of 8
    sequences as one of 16 (or 128), so the fit could not follow the measured decode steps (26 % median
    error on an AVX2 machine, 2 % without the tiles and with the attention rate). Without one, the GPU
    defaults that the fits before 2026-12-02 used."""
    efficiencies = {}
    if attention_tflops is not None:
        efficiencies = {"tile_quantized": False, "attention_compute": attention_tflops / bf16_tflops}
    return SystemSpec(
        name="cpu_2core_vllm",
        gpu_name="2-core CPU (vLLM CPU backend)",
        sm_count=2,
        compute_capability=0,
        hbm_gib=(KV_SPACE_GIB + 3.5) / 0.9,
        hbm_bw_tbs=0.02,
        peak_tflops={"bf16": bf16_tflops, "fp8": 0.0, "fp4": 0.0},
        power_w=0,
        gpus_per_node=1,
        nvlink_domain=1,
        nvlink_gbs=0,
        network_gbs=0,
        l2_mb=32,
        source="fitted to measured vLLM CPU steps by accuracy/sim_vs_vllm_cpu.py",
        efficiencies=efficiencies,
    )


def cpu_engine(step_overhead_us: float, per_seq_overhead_us: float, prompt_step_us_per_op: float):
    """vLLM's CPU runner as an engine profile. Steps that carry a prompt cost a fixed ~2 ms more than decode
    steps here (measured: a 32-token prefill step 2.7 ms, a decode step of one sequence 0.9 ms); servelab's
    step model has that distinction as graphed decode vs eager steps, so decode steps are 'graphed' (no per-op
    cost) and steps with a prompt pay a fitted cost per op (the eager-launch term)."""
    return EngineProfile(
        name="vllm",
        step_overhead_us=step_overhead_us,
        per_seq_overhead_us=per_seq_overhead_us,
        kernel_gap_us=0.0,
        eager_launch_us=prompt_step_us_per_op,
        cuda_graph_max_batch=1 << 20,
        max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS,
        max_num_seqs=MAX_NUM_SEQS,
        chunked_prefill=True,
        source="fitted to measured vLLM CPU steps (accuracy/sim_vs_vllm_cpu.py)",
    )


@dataclass
class CpuProfile:
    bf16_tflops: float
    step_overhead_us: float
    per_seq_overhead_us: float
    prompt_step_us_per_op: float
    http_ms: float
    frontend_ms: float
    fit_error: float  # median relative error of the fitted steps
    attention_tflops: float | None = None  # None: a profile fitted before 2026-12-02 (see cpu_system)

    def system(self) -> SystemSpec:
        return cpu_system(self.bf16_tflops, self.attention_tflops)

    def parts(self):
        system = self.system()
        engine = cpu_engine(self.step_overhead_us, self.per_seq_overhead_us, self.prompt_step_us_per_op)
        return system, engine, PerfDB(system, use_tables=False)


def step_ms(model, system, engine, db, prefill: int = 0, decode: int = 0, kv: int = 0) -> float:
    shape = StepShape(prefill=((prefill, 0),) if prefill else (), decode_batch=decode, decode_kv_len=kv)
    ops = step_ops(model, Parallel(), shape)
    return step_time(ops, db, engine, (1 if prefill else 0) + decode, decode_only=not prefill).us / 1000.0


def fit_profile(model, costs: StepCosts) -> CpuProfile:
    """Fit (bf16 rate, step overhead, per-sequence overhead, prompt-step cost, attention rate) so servelab's
    step model reproduces the measured steps, in log space with the same Nelder-Mead as the engine
    calibration."""

    def params(x):
        lo = np.log([1e-4, 1.0, 0.1, 0.01, 1e-4])  # TFLOP/s, us, us, us, TFLOP/s
        hi = np.log([10.0, 1e5, 1e4, 1e4, 10.0])
        return [math.exp(v) for v in np.clip(x, lo, hi)]

    def steps(x):
        tf, so, ps, pe, at = params(x)
        system = cpu_system(tf, at)
        engine, db = cpu_engine(so, ps, pe), PerfDB(system, use_tables=False)
        got = [(step_ms(model, system, engine, db, prefill=n), ms) for n, ms in costs.prefill_ms.items()]
        got += [
            (step_ms(model, system, engine, db, decode=b, kv=64), ms) for b, ms in costs.decode_ms.items()
        ]
        return got

    def loss(x):
        return float(np.mean([math.log(p / m) ** 2 for p, m in steps(x)]))

    x, _ = nelder_mead(loss, np.log([0.05, 1000.0, 20.0, 20.0, 0.05]), step=1.0, iters=1000, tol=1e-9)
    errs = [abs(p - m) / m for p, m in steps(x)]
    tf, so, ps, pe, at = params(x)
    return CpuProfile(tf, so, ps, pe, costs.http_ms, costs.frontend_ms, float(np.median(errs)), at)


def predict_point(model, profile: CpuProfile, c: int, isl: int, osl: int, num_requests: int) -> dict:
    system, engine, db = profile.parts()
    # the measured run: c clients from an idle engine, num_requests in all, every one counted
    wl = Workload(
        isl=isl, osl=osl, concurrency=c, num_requests=num_requests, warmup=0, range_ratio=RANGE_RATIO
    )
    est = estimate_aggregated(model, system, Parallel(), engine, c, isl, osl, db=db, workload=wl)
    # the simulator's TTFT starts when the engine core receives the request; vLLM's own TTFT starts at its
    # front end (tokenize, hand over): that measured fixed path is added
    return {
        "ttft_ms": est.ttft_ms + profile.frontend_ms,
        "tpot_ms": est.tpot_ms,
        "engine_ttft_ms": est.ttft_ms,
    }


# ---------------------------------------------------------------------------------------------- measurement
def _session() -> aiohttp.ClientSession:
    """A client session that never reuses a connection idle over KEEPALIVE_S: vLLM's API server closes one
    after 5 s (VLLM_HTTP_TIMEOUT_KEEP_ALIVE), and a request written as it closes fails
    (ClientConnectionResetError)."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S))


async def _closed_loop(base_url: str, model: str, c: int, isl: int, osl: int, n: int, seed: int) -> dict:
    url = base_url + "/v1/completions"
    rng = random.Random(seed)
    lengths = [
        (rng.choice(prompt_lengths(isl)), round(osl * rng.uniform(1 - RANGE_RATIO, 1 + RANGE_RATIO)))
        for _ in range(n)
    ]
    prompts = [_prompt(rng, i) for i, _ in lengths]
    ttfts, tpots, nxt = [], [], iter(range(n))
    async with _session() as s:
        await _stream(s, url, _prompt(rng, isl), 4, model)  # ready check, not counted
        before, t_start = metric_sums(base_url), time.perf_counter()

        async def client():
            for i in nxt:
                out_len = lengths[i][1]
                t = await _stream(s, url, prompts[i], out_len, model)
                ttfts.append(t[0] * 1000)
                if out_len > 1:
                    tpots.append((t[-1] - t[0]) / (out_len - 1) * 1000)  # ignore_eos: exactly out_len tokens

        await asyncio.gather(*[client() for _ in range(c)])
        after, wall = metric_sums(base_url), time.perf_counter() - t_start

    def mean(name):
        count = after[name + "_count"] - before[name + "_count"]
        return (after[name + "_sum"] - before[name + "_sum"]) / count * 1000 if count else float("nan")

    return {
        "ttft_ms": mean("vllm:time_to_first_token_seconds"),
        # the part of TTFT the simulator models: from the engine core's queue to the first token
        "engine_ttft_ms": mean("vllm:request_queue_time_seconds") + mean("vllm:request_prefill_time_seconds"),
        "tpot_ms": mean("vllm:request_time_per_output_token_seconds"),
        "client_ttft_ms": st.mean(ttfts),
        "client_tpot_ms": st.mean(tpots) if tpots else 0.0,
        "completed": len(ttfts),
        # Little's law on the engine's own histogram: requests in the server (arrival to finish), on average
        "server_concurrency": (
            after["vllm:e2e_request_latency_seconds_sum"] - before["vllm:e2e_request_latency_seconds_sum"]
        )
        / wall,
    }


def prompt_lengths(isl: int) -> list[int]:
    return [round(isl * f) for f in PROMPT_LEVELS]


async def _warm_prompts(base_url: str, model: str, lengths: list[int]) -> None:
    rng = random.Random(2)
    async with _session() as s:
        for n in lengths:
            for _ in range(2):
                await _stream(s, base_url + "/v1/completions", _prompt(rng, n), 1, model)


def bench_point(base_url: str, model: str, c: int, isl: int, osl: int, num_prompts: int, seed: int) -> dict:
    """A closed-loop run as `vllm bench serve --max-concurrency c` makes it: c clients from an idle engine,
    each sending its next request when its last one ends, until num_prompts are done; every request counts.
    Prompts are random token ids (no tokenizer round trip), lengths vary (PROMPT_LEVELS, RANGE_RATIO), outputs
    exact (ignore_eos).

    ttft_ms / tpot_ms are the engine's own per-request means over the run (/metrics histograms
    vllm:time_to_first_token_seconds and vllm:request_time_per_output_token_seconds, stamped by the engine
    core when it produced the tokens, from the request's arrival at vLLM's front end). engine_ttft_ms is the
    part of TTFT inside the engine core (queue time + prefill time histograms): what the simulator models. The
    rest is vLLM's API process (tokenize, hand over), which under load on two cores waits for CPU: 1 ms for a
    lone request, up to 10 ms with 16 clients. On two cores the API process that streams tokens to the client
    is often starved while the engine steps, so the client sees tokens in bursts (client TTFT up to the whole
    request, TPOT near 0); client_ttft_ms / client_tpot_ms record what the client saw, for comparison, and are
    not what the check asserts.

    server_concurrency is the load the engine saw: the mean number of requests inside vLLM over the run
    (Little's law on its end-to-end histogram). On two cores shared by the engine, the API process and this
    client, a loop of c clients does not hold c requests in the engine: two passes of the same c=16 point saw
    15.0 and 1.0 (the engine finishes a tiny request faster than the starved processes around it hand over the
    next), so the simulator is given the concurrency seen, and the check compares what the engine did under
    the load it got.

    (A small aiohttp client: `servelab bench`'s worker received vLLM's stream in one burst at the end on this
    machine, TPOT 0, while a plain socket and aiohttp saw tokens every 1-2 ms; see the report. A later probe,
    the two clients interleaved on one server under a load average of 4-5, saw the same bursts in both: docs/
    accuracy.md, "The twin against the run-to-run spread".)"""
    return asyncio.run(_closed_loop(base_url, model, c, isl, osl, num_prompts, seed))


def num_prompts_for(c: int) -> int:
    return max(8, 6 * c)


def check_server(
    base_url: str, model_name: str, model_dir: Path, passes: int = 2, points: list = POINTS
) -> dict:
    """Measure step costs on a running server, fit, and compare predicted with measured points."""
    model = load_model(str(model_dir))
    VOCAB["size"] = model.vocab_size
    t0 = time.time()
    samples = StepSamples()
    samples.measure_round(
        base_url, model_name, seed=1000, keep=False
    )  # warm-up: every calibration shape once
    asyncio.run(
        _warm_prompts(base_url, model_name, sorted({n for _, isl, _ in points for n in prompt_lengths(isl)}))
    )
    for (
        c,
        isl,
        osl,
    ) in points:  # one unmeasured pass: mixed steps bring token counts the engine has not run yet
        bench_point(base_url, model_name, c, isl, osl, num_prompts_for(c), seed=passes)
    measured = {point: [] for point in points}
    for k in range(passes):
        for point in points:
            samples.measure_round(base_url, model_name, seed=1001 + len(samples.http))
            c, isl, osl = point
            measured[point].append(bench_point(base_url, model_name, c, isl, osl, num_prompts_for(c), seed=k))
    costs = samples.costs()
    profile = fit_profile(model, costs)
    predictions: dict = {}
    runs = []
    for (c, isl, osl), passes_measured in measured.items():
        n = num_prompts_for(c)
        for k, m in enumerate(passes_measured):
            # the simulator gets the load the engine saw (see bench_point): the clients' c or fewer
            seen = max(1, round(m["server_concurrency"]))
            if (seen, isl, osl) not in predictions:
                predictions[seen, isl, osl] = predict_point(model, profile, seen, isl, osl, n)
            pred = predictions[seen, isl, osl]
            run = {
                "concurrency": c,
                "seen_concurrency": seen,
                "pass": k,
                "isl": isl,
                "osl": osl,
                "num_prompts": n,
                "predicted": pred,
                "measured": m,
            }
            for metric in ("engine_ttft_ms", "ttft_ms", "tpot_ms"):
                run[metric] = {
                    "predicted": pred[metric],
                    "measured": m[metric],
                    "error": (pred[metric] - m[metric]) / m[metric],
                }
            runs.append(run)
    return {
        "wall_s": round(time.time() - t0, 1),
        "step_costs": {
            "prefill_ms": costs.prefill_ms,
            "decode_ms": costs.decode_ms,
            "http_ms": costs.http_ms,
            "frontend_ms": costs.frontend_ms,
        },
        "profile": profile.__dict__,
        "runs": runs,
        "setup": {
            "vllm": "vllm-cpu 0.32.0",
            "max_num_seqs": MAX_NUM_SEQS,
            "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS,
            "kv_space_gib": KV_SPACE_GIB,
            "model": "Llama h128 i256 L2 heads 2/1 (random weights)",
            "passes": passes,
            "calibration_rounds": len(samples.http) // len(PREFILL_LENS),
        },
    }


def run_check(python: Path, model_dir: Path | None = None, passes: int = 2, port: int = PORT) -> dict:
    """Build the e2e tests' tiny model (unless given; cached), start a server on it, run the check, stop
    it."""
    model_dir = model_dir or build_tiny_llama(python, REPO / ".cache" / "e2e")
    t0 = time.time()
    args = ["--max-num-batched-tokens", str(MAX_NUM_BATCHED_TOKENS)]
    with VllmCpuServer(python, model_dir, port=port, extra_args=args) as server:
        started = time.time() - t0
        result = check_server(server.url, server.model, model_dir, passes)
    result["server_start_s"] = round(started, 1)
    return result


def fit_lines(result: dict) -> list[str]:
    """The measured step costs and the profile fitted to them, as the markdown reports print them."""
    p, costs = result["profile"], result["step_costs"]
    attention = f"attention {p['attention_tflops'] * 1000:.1f} GFLOP/s, " if p.get("attention_tflops") else ""
    prefill = ", ".join(f"{k} tok {v:.1f} ms" for k, v in costs["prefill_ms"].items())
    decode = ", ".join(f"b{k} {v:.2f} ms" for k, v in costs["decode_ms"].items())
    return [
        f"Step costs measured: prefill {prefill}; decode {decode}; HTTP path {costs['http_ms']:.1f} ms.",
        (
            f"Fitted: bf16 rate {p['bf16_tflops'] * 1000:.1f} GFLOP/s, "
            f"{attention}step overhead {p['step_overhead_us']:.0f} us, "
            f"per sequence {p['per_seq_overhead_us']:.0f} us, "
            f"steps with a prompt {p['prompt_step_us_per_op']:.0f} us per op "
            f"(fitted steps within {p['fit_error']:.0%} median); vLLM front end {p['frontend_ms']:.1f} ms."
        ),
    ]


def markdown(result: dict) -> str:
    lines = [
        *fit_lines(result),
        "",
        (
            "| clients | engine saw | isl/osl | pass | engine TTFT measured ms | predicted ms | error | "
            "TTFT with API process, measured / predicted ms | TPOT measured ms | predicted ms | error |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        e, t, o = r["engine_ttft_ms"], r["ttft_ms"], r["tpot_ms"]
        lines.append(
            f"| {r['concurrency']} | {r['measured']['server_concurrency']:.1f} | {r['isl']}/{r['osl']} | "
            f"{r['pass']} | {e['measured']:.1f} | {e['predicted']:.1f} | {e['error']:+.0%} | "
            f"{t['measured']:.1f} / {t['predicted']:.1f} | "
            f"{o['measured']:.2f} | {o['predicted']:.2f} | {o['error']:+.0%} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", type=Path, help="an existing tiny model directory (else one is built)")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--port", type=int, default=PORT)
    ap.add_argument(
        "--base-url", help="check the vLLM server already running there (serving --model-dir) instead"
    )
    ap.add_argument("--served-model-name", default="tiny-llama", help="its model name, with --base-url")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    if args.base_url:
        if args.model_dir is None:
            ap.error("--base-url needs --model-dir (the model the server serves)")
        result = check_server(args.base_url, args.served_model_name, args.model_dir, args.passes)
    else:
        python = vllm_python(REPO / ".venv-vllm")
        if python is None:
            print(
                f"vLLM CPU venv not found (set {VENV_ENV} or run scripts/setup_vllm_cpu.sh)", file=sys.stderr
            )
            return 2
        result = run_check(python, args.model_dir, args.passes, port=args.port)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    print(markdown(result) if args.markdown else json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
