"""In front of the engine (issue 30, evidence only): what a long text prompt costs vLLM's API server before
its engine sees it, what InferenceX's token-position client costs per request, and how many tokens its
prompts carry. One command each:

  bpe        a Hugging Face fast tokenizer folder (--out DIR) from a tiktoken rank file (--tiktoken FILE),
             made by transformers' TikTokenConverter in the vLLM venv: the large BPE the others take.
  tokenizer  CPU per prompt token of a Hugging Face fast tokenizer's encode (what vLLM's API server runs on
             each text prompt) on prompts built as the client builds them (decode of consecutive token ids,
             re-encoded and trimmed to the nominal length), one prompt at a time and in batches of 32 (vLLM
             0.16's micro-batching tokenizer batches up to 32). Any tokenizer.json: the tiny Llama's
             458-entry BPE, or a large one (--tokenizer DIR).
  server     CPU time of the CPU vLLM's API-server process (/proc utime+stime, all threads) per request with
             prompts of 1K-16K such tokens and one output token, one request at a time; fitted as a
             per-request plus a per-prompt-token cost; the engine core's CPU beside it, for scale.
  client     InferenceX's benchmark_serving_random.py (a copy outside the repo: --client FILE) against
             servelab's mock server: the client's CPU from its "Starting main benchmark run" line to its
             result line (/proc), per request, and its TTFTs against the mock's set first-token delay.
  lengths    the development token-position results' total_input_tokens against nominal length x requests.
  hashing    what the engine core does per prompt token before scheduling it, in the vLLM venv: the prefix
             cache's block hashes (sha256 and sha256_cbor over 16-token blocks, chained) and the msgpack
             encode / decode of the prompt ids between the API server and the engine core.
  tails      the development token-position points' p99 TPOT x (OSL - 1) against their p99 TTFT: whether the
             requests that wait longest for a first token are matched by decodes that stall as long (the
             prompts' time spent in engine steps that decoding requests wait for) or not (a queue in front of
             the engine, which decodes never see).

    .venv/bin/python accuracy/prompt_intake_cost.py bpe --tiktoken qwen.tiktoken --out DIR
    .venv/bin/python accuracy/prompt_intake_cost.py tokenizer --tokenizer DIR [--json OUT]
    .venv/bin/python accuracy/prompt_intake_cost.py server [--tokenizer DIR] [--json OUT]
    .venv/bin/python accuracy/prompt_intake_cost.py client --client COPY.py --tokenizer DIR [--json OUT]
    .venv/bin/python accuracy/prompt_intake_cost.py lengths
    .venv/bin/python accuracy/prompt_intake_cost.py hashing
    .venv/bin/python accuracy/prompt_intake_cost.py tails

bpe, server, client and hashing need the vLLM CPU venv ($SERVELAB_VLLM_VENV or .venv-vllm: vLLM itself, and
transformers). Linux only (/proc). CPU time, not wall time: the box is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np
from api_server_cost import children_of, idle_rate, listener_pid, machine, pids_in_group, process_cpu_s
from tokenizers import Tokenizer

from servelab.calibrate.closed_loop import read_points
from servelab.runner.tiny_llama import build_tiny_llama
from servelab.runner.vllm_cpu import VENV_ENV, VllmCpuServer, vllm_python

REPO = Path(__file__).resolve().parents[1]
PORT = 19037  # this check's port (19000-19499 belongs to accuracy checks; api_server_cost.py has 19035)
MOCK_PORT = 19038
LENGTHS = (1024, 2048, 4096, 8192, 16384)
SHORT_PROMPT = 16  # the per-request lever of the server fit
MAX_REQUESTS = 48  # per server run (the short prompts')
BATCH = 32  # vLLM 0.16's AsyncMicrobatchTokenizer: up to 32 prompts in one tokenizer call
CLIENT_CONCURRENCIES = (4, 16, 64)
RESULTS = REPO / "tests" / "data" / "closed_loop" / "inferencex" / "results"
RESULT_NAME = re.compile(r"_(?P<par>[a-z]+\d+)_isl(?P<isl>\d+)_osl(?P<osl>\d+)_conc(?P<conc>\d+)\.json$")


# ---- prompts as the client builds them ----


def client_prompt(tok: Tokenizer, length: int, offset: int, vocab: int, rng: np.random.Generator) -> str:
    """A text of `length` tokens of `tok` made the client's way: the text of consecutive ids from `offset`,
    re-encoded, cut or padded with random ids to `length`, decoded again (up to 10 rounds)."""
    ids = [(offset + j) % vocab for j in range(length)]
    text = tok.decode(ids, skip_special_tokens=False)
    for _ in range(10):
        ids = tok.encode(text, add_special_tokens=False).ids
        if len(ids) == length:
            break
        ids = ids[:length] + rng.integers(0, vocab, size=max(0, length - len(ids))).tolist()
        text = tok.decode(ids, skip_special_tokens=False)
    return text


def prompts(tok: Tokenizer, length: int, count: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    vocab = tok.get_vocab_size(with_added_tokens=False)
    return [client_prompt(tok, length, int(rng.integers(0, vocab)), vocab, rng) for _ in range(count)]


def load_tokenizer(path: Path) -> Tokenizer:
    return Tokenizer.from_file(str(path / "tokenizer.json" if path.is_dir() else path))


# ---- fits and summaries (pure: the tests ask these) ----


def fit_intake(requests: list[dict]) -> dict:
    """Least squares of CPU seconds per request on (1, prompt tokens): the per-request and per-prompt-token
    costs in us, and the median relative residual. `requests` rows hold prompt_tokens and cpu_s (one
    measured run's mean per request)."""
    x = np.array([[1.0, r["prompt_tokens"]] for r in requests])
    y = np.array([r["cpu_s"] for r in requests])
    (per_request, per_token), *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = np.abs(x @ np.array([per_request, per_token]) - y) / np.maximum(y, 1e-9)
    return {
        "us_per_request": round(float(per_request) * 1e6, 1),
        "us_per_prompt_token": round(float(per_token) * 1e6, 3),
        "median_rel_residual": round(float(np.median(resid)), 3),
        "runs": len(requests),
    }


def length_check(files: dict[str, dict]) -> list[dict]:
    """Per result file (name -> its JSON): nominal length x completed requests against total_input_tokens."""
    rows = []
    for name, res in sorted(files.items()):
        m = RESULT_NAME.search(name)
        if m is None:
            raise ValueError(f"{name}: expected a name like ..._tep8_isl8192_osl128_conc16.json")
        nominal = int(m["isl"]) * int(res["completed"])
        rows.append(
            {
                "file": name,
                "parallel": m["par"],
                "isl": int(m["isl"]),
                "concurrency": int(m["conc"]),
                "nominal_tokens": nominal,
                "total_input_tokens": int(res["total_input_tokens"]),
                "ratio": round(int(res["total_input_tokens"]) / nominal, 6),
            }
        )
    return rows


def decode_stall(res: dict, osl: int) -> dict:
    """From one result file's JSON: the slowest decodes' stall (p99 TPOT x (OSL - 1), seconds) against the
    longest first-token wait (p99 TTFT), and the p99 / p50 TTFT."""
    stall = res["p99_tpot"] * (osl - 1)
    return {
        "p99_ttft_s": round(res["p99_ttft"], 3),
        "p99_tpot_ms": round(res["p99_tpot"] * 1e3, 1),
        "median_tpot_ms": round(res["median_tpot"] * 1e3, 1),
        "decode_stall_s": round(stall, 3),
        "stall_over_p99_ttft": round(stall / res["p99_ttft"], 3),
        "p99_over_p50_ttft": round(res["p99_ttft"] / res["median_ttft"], 3),
    }


def client_window(lines: list[str]) -> tuple[int, int]:
    """Indices of the client's 'Starting main benchmark run' line and of its result banner (the timed run
    lies between them)."""
    start = next(i for i, ln in enumerate(lines) if "Starting main benchmark run" in ln)
    end = next(i for i, ln in enumerate(lines) if "Serving Benchmark Result" in ln and i > start)
    return start, end


# ---- a large BPE from a tiktoken rank file (run by the vLLM venv's python: transformers) ----

_BPE = r"""
import sys
from transformers import PreTrainedTokenizerFast
from transformers.convert_slow_tokenizer import TikTokenConverter
tok = TikTokenConverter(vocab_file=sys.argv[1]).converted()
end = "<|endoftext|>"  # one special token, for the model's BOS / EOS ids
PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=end, eos_token=end).save_pretrained(sys.argv[2])
print(tok.get_vocab_size())
"""


def build_bpe(python: Path, tiktoken: Path, out: Path) -> int:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    cmd = [str(python), "-c", _BPE, str(tiktoken), str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env, timeout=900)
    return int(done.stdout.strip().splitlines()[-1])


# ---- the engine core's per-prompt-token intake (run by the vLLM venv's python) ----

_HASHING = r"""
import json, random, time
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import hash_block_tokens, init_none_hash
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder
n, block, reps = 8192, 16, 20
ids = [random.Random(0).randrange(200000) for _ in range(n)]
out = {"prompt_tokens": n, "block_size": block}
for algo in ("sha256", "sha256_cbor"):
    fn = get_hash_fn_by_name(algo)
    init_none_hash(fn)
    t0 = time.process_time()
    for _ in range(reps):
        parent = None
        for i in range(0, n, block):
            parent = hash_block_tokens(fn, parent, ids[i : i + block], None)
    out[f"hash_{algo}_us_per_token"] = (time.process_time() - t0) / reps / n * 1e6
enc, dec = MsgpackEncoder(), MsgpackDecoder(list)
t0 = time.process_time()
for _ in range(10 * reps):
    bufs = enc.encode(ids)
out["msgpack_encode_us_per_token"] = (time.process_time() - t0) / (10 * reps) / n * 1e6
t0 = time.process_time()
for _ in range(10 * reps):
    dec.decode(bufs)
out["msgpack_decode_us_per_token"] = (time.process_time() - t0) / (10 * reps) / n * 1e6
print(json.dumps(out))
"""


def measure_hashing(python: Path) -> dict:
    done = subprocess.run(
        [str(python), "-c", _HASHING], capture_output=True, text=True, check=True, timeout=600
    )
    return {k: round(v, 4) for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}


# ---- tails (development points only) ----


def development_points() -> list:
    """The token-position points of the development part (the held-out part is never read here)."""
    points, _ = read_points(RESULTS.parents[1], ("h200_sxm",))
    mine = [p for p in points if p.source == "inferencex-token-position" and not p.heldout]
    return sorted(mine, key=lambda p: p.key)


def development_keys() -> list[str]:
    return [p.key for p in development_points()]


def development_tails(log) -> list[dict]:
    rows = []
    for p in development_points():
        res = json.loads((RESULTS / p.key).read_text())
        row = {"file": p.key, "isl": p.case.isl, "concurrency": p.case.concurrency}
        rows.append(row | decode_stall(res, p.case.osl))
        log(f"  {p.key}: {rows[-1]}")
    return rows


# ---- tokenizer ----


def time_encode(tok: Tokenizer, texts: list[str], batch: int) -> float:
    """CPU seconds (this process, every thread) per prompt to encode `texts`, `batch` at a time."""
    t0 = time.process_time()
    for i in range(0, len(texts), batch):
        chunk = texts[i : i + batch]
        if batch == 1:
            tok.encode(chunk[0], add_special_tokens=True)
        else:
            tok.encode_batch(chunk, add_special_tokens=True)
    return (time.process_time() - t0) / len(texts)


def measure_tokenizer(path: Path, lengths: tuple[int, ...], count: int, log) -> dict:
    tok = load_tokenizer(path)
    rows = []
    for length in lengths:
        texts = prompts(tok, length, count, seed=length)
        served = [len(tok.encode(t, add_special_tokens=True).ids) for t in texts]
        time_encode(tok, texts[:2], 1)  # warm
        single = min(time_encode(tok, texts, 1) for _ in range(3))
        batched = min(time_encode(tok, texts, BATCH) for _ in range(3))
        rows.append(
            {
                "nominal_tokens": length,
                "chars_per_token": round(sum(map(len, texts)) / (count * length), 2),
                "served_tokens_mean": round(float(np.mean(served)), 1),
                "us_per_token_single": round(single / length * 1e6, 3),
                "us_per_token_batched": round(batched / length * 1e6, 3),
            }
        )
        log(f"  {length:6d} tokens: {rows[-1]}")
    return {
        "tokenizer": str(path),
        "vocab": tok.get_vocab_size(with_added_tokens=False),
        "prompts_per_length": count,
        "rayon_threads": os.environ.get("RAYON_NUM_THREADS", "default (all cores)"),
        "points": rows,
    }


# ---- server ----

# the tiny Llama's shape with another tokenizer's vocabulary (random weights; run by the vLLM venv's python)
_BUILD_WITH_TOKENIZER = r"""
import json, sys
from pathlib import Path
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
tiny, tok_dir, out = (Path(a) for a in sys.argv[1:4])
torch.manual_seed(0)
tok = AutoTokenizer.from_pretrained(tok_dir)
conf = json.loads((tiny / "config.json").read_text())
conf.update(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
for key in ("architectures", "transformers_version", "dtype", "model_type"):
    conf.pop(key, None)
tok.save_pretrained(out)
LlamaForCausalLM(LlamaConfig(**conf)).save_pretrained(out, safe_serialization=True)
"""


def model_with_tokenizer(python: Path, tiny: Path, tokenizer: Path, cache_dir: Path) -> Path:
    """The tiny Llama rebuilt with `tokenizer`'s vocabulary (cached by the tokenizer folder's name)."""
    out = cache_dir / f"tiny-llama-tok-{tokenizer.resolve().name}"
    if not (out / "model.safetensors").exists():
        env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        cmd = [str(python), "-c", _BUILD_WITH_TOKENIZER, str(tiny), str(tokenizer), str(out)]
        subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=900)
    return out


async def send(url: str, model: str, text: str) -> int:
    """One streamed completion of one token; the prompt tokens from usage."""
    body = {
        "model": model,
        "prompt": text,
        "max_tokens": 1,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    prompt_tokens = 0
    # a new session per request, as the token-position client opens one
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as session:
        async with session.post(f"{url}/v1/completions", json=body) as resp:
            resp.raise_for_status()
            async for raw in resp.content:
                line = raw.decode().strip()
                if line.startswith("data: {"):
                    usage = json.loads(line[6:]).get("usage")
                    prompt_tokens = usage["prompt_tokens"] if usage else prompt_tokens
    return prompt_tokens


def server_run(server, api_pid: int, kids: dict[int, str], texts: list[str], idle: float = 0.0) -> dict:
    """Send `texts` one after another; the API server's and its children's CPU per request. `cpu_s` leaves
    out the idle server's CPU over the run's wall time (`idle` CPU seconds a second: its timers and loops,
    which a long prefill on this CPU engine would otherwise charge to the prompt)."""
    api0, kid0, t0 = process_cpu_s(api_pid), {p: process_cpu_s(p) for p in kids}, time.time()

    async def all_of() -> list[int]:
        return [await send(server.url, server.model, t) for t in texts]

    served = asyncio.run(all_of())
    api1, kid1, wall = process_cpu_s(api_pid), {p: process_cpu_s(p) for p in kids}, time.time() - t0
    return {
        "requests": len(texts),
        "prompt_tokens": float(np.mean(served)),
        "wall_s": wall / len(texts),
        "raw_cpu_s": (api1 - api0) / len(texts),
        "cpu_s": (api1 - api0 - idle * wall) / len(texts),
        "engine_cpu_s": sum(kid1[p] - kid0[p] for p in kids) / len(texts),
    }


def measure_server(python: Path, model_dir: Path, args, log) -> dict:
    tok = load_tokenizer(model_dir)
    top = max(args.lengths)
    extra = [
        "--max-model-len",
        str(top + 64),
        "--hf-overrides",
        json.dumps({"max_position_embeddings": 2 * top}),
        "--max-num-seqs",
        "64",
    ]
    with VllmCpuServer(python, model_dir, port=args.port, extra_args=extra) as server:
        group = pids_in_group(server.pid)
        api_pid = listener_pid(args.port, group)
        kids = children_of(api_pid, group)
        log(f"API server pid {api_pid}, children {kids}")
        server_run(server, api_pid, kids, prompts(tok, 512, 2, seed=1))  # the engine's first steps
        idle = idle_rate(api_pid, 10.0)
        log(f"idle API server: {idle * 100:.2f} % of a core")
        runs = []
        for length in (SHORT_PROMPT, *args.lengths):
            count = min(MAX_REQUESTS, max(2, args.tokens // length))
            for k in range(args.runs):
                texts = prompts(tok, length, count, seed=1000 * length + k)  # distinct: no prefix hits
                run = server_run(server, api_pid, kids, texts, idle) | {"nominal_tokens": length}
                runs.append(run)
                log(
                    f"  {length:6d} tokens x {count:3d}: API {run['cpu_s'] * 1e3:7.2f} ms/request "
                    f"({run['raw_cpu_s'] * 1e3:.2f} with idle), wall {run['wall_s']:.2f} s, "
                    f"engine {run['engine_cpu_s'] * 1e3:8.1f} ms/request, served {run['prompt_tokens']:.0f}"
                )
        return {
            "model": model_dir.name,
            "idle_api_cpu_fraction": round(idle, 5),
            "fit": fit_intake(runs),
            "runs": runs,
            "tokenizer_same_prompts": measure_tokenizer(model_dir, args.lengths, 8, log),
        }


# ---- client ----


def run_client(python: Path, client: Path, tokenizer: Path, concurrency: int, isl: int, log) -> dict:
    cmd = [
        str(python),
        str(client),
        "--model",
        "mock-model",
        "--tokenizer",
        str(tokenizer),
        "--base-url",
        f"http://127.0.0.1:{MOCK_PORT}",
        "--random-input-len",
        str(isl),
        "--random-output-len",
        "128",
        "--num-warmups",
        str(2 * concurrency),
        "--num-prompts",
        str(10 * concurrency),
        "--max-concurrency",
        str(concurrency),
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--disable-tqdm",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        out_file = Path(tmp) / "result.json"
        env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        proc = subprocess.Popen(
            [*cmd, "--result-filepath", str(out_file)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=tmp,
        )
        assert proc.stdout is not None
        lines: list[str] = []
        cpu: list[float] = []
        for line in proc.stdout:
            lines.append(line)
            if "Starting main benchmark run" in line or "Serving Benchmark Result" in line:
                cpu.append(process_cpu_s(proc.pid))
        if proc.wait() != 0 or len(cpu) != 2:
            raise RuntimeError("the client failed:\n" + "".join(lines[-20:]))
        client_window(lines)  # both lines were seen, in order
        res = json.loads(out_file.read_text())
    per_request = (cpu[1] - cpu[0]) / res["completed"]
    row = {
        "concurrency": concurrency,
        "isl": isl,
        "requests": res["completed"],
        "client_cpu_ms_per_request": round(per_request * 1e3, 2),
        "client_cpu_share_of_a_core": round((cpu[1] - cpu[0]) / res["duration"], 3),
        "median_ttft_ms": round(res["median_ttft"] * 1e3, 1),
        "p99_ttft_ms": round(res["p99_ttft"] * 1e3, 1),
        "median_tpot_ms": round(res["median_tpot"] * 1e3, 2),
        "total_input_tokens": res["total_input_tokens"],
    }
    log(f"  C={concurrency:3d}: {row}")
    return row


def measure_client(python: Path, args, log) -> dict:
    mock = [
        sys.executable,
        "-m",
        "servelab.bench.mock_server",
        "--port",
        str(MOCK_PORT),
        "--first-token-delay-ms",
        str(args.mock_ttft_ms),
        "--token-delay-ms",
        str(args.mock_itl_ms),
        "--output-tokens",
        "128",
        "--model",
        "mock-model",
    ]
    server = subprocess.Popen(mock, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(2)
        rows = [run_client(python, args.client, args.tokenizer, c, args.isl, log) for c in args.concurrency]
    finally:
        server.terminate()
        server.wait(timeout=30)
    return {
        "mock": {"first_token_delay_ms": args.mock_ttft_ms, "token_delay_ms": args.mock_itl_ms},
        "tokenizer": str(args.tokenizer),
        "points": rows,
    }


# ---- the command ----


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("bpe", "tokenizer", "server", "client", "lengths", "hashing", "tails"))
    ap.add_argument("--tiktoken", type=Path, help="bpe: a tiktoken rank file")
    ap.add_argument("--out", type=Path, help="bpe: the tokenizer folder to write")
    ap.add_argument(
        "--tokenizer",
        type=Path,
        help="a tokenizer folder (server: the tiny Llama rebuilt with its vocabulary; tokenizer: or a "
        "tokenizer.json)",
    )
    ap.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    ap.add_argument("--prompts", type=int, default=16, help="tokenizer: prompts per length")
    ap.add_argument("--runs", type=int, default=2, help="server: measured runs per length")
    ap.add_argument("--tokens", type=int, default=32768, help="server: prompt tokens per run, about")
    ap.add_argument("--port", type=int, default=PORT)
    ap.add_argument("--client", type=Path, help="client: a copy of benchmark_serving_random.py")
    ap.add_argument("--concurrency", type=int, nargs="+", default=list(CLIENT_CONCURRENCIES))
    ap.add_argument("--isl", type=int, default=8192, help="client: prompt tokens")
    ap.add_argument("--mock-ttft-ms", type=float, default=50.0)
    ap.add_argument("--mock-itl-ms", type=float, default=20.0)
    ap.add_argument("--cache-dir", type=Path, default=REPO / ".cache" / "e2e")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    def log(msg: str) -> None:
        print(msg, flush=True)

    if args.what == "lengths":
        files = {key: json.loads((RESULTS / key).read_text()) for key in development_keys()}
        out: dict = {"points": length_check(files)}
        ratios = [r["ratio"] for r in out["points"]]
        log(f"{len(ratios)} files: total_input_tokens / (nominal x completed): {min(ratios)}-{max(ratios)}")
    elif args.what == "tails":
        out = {"points": development_tails(log)}
    elif args.what == "tokenizer":
        if args.tokenizer is None or not args.tokenizer.exists():
            print("--tokenizer: expected a tokenizer.json or a folder holding one", file=sys.stderr)
            return 2
        out = measure_tokenizer(args.tokenizer, tuple(args.lengths), args.prompts, log)
    else:
        python = vllm_python(REPO / ".venv-vllm")
        if python is None:
            print(f"no vLLM CPU venv (set {VENV_ENV} or run scripts/setup_vllm_cpu.sh)", file=sys.stderr)
            return 2
        if args.what == "bpe":
            if args.tiktoken is None or not args.tiktoken.is_file() or args.out is None:
                print("--tiktoken: expected a tiktoken rank file (and --out DIR)", file=sys.stderr)
                return 2
            out = {"tiktoken": str(args.tiktoken), "vocab": build_bpe(python, args.tiktoken, args.out)}
            log(f"{args.out}: {out['vocab']} entries")
        elif args.what == "hashing":
            out = measure_hashing(python)
            log(json.dumps(out))
        elif args.what == "server":
            args.cache_dir.mkdir(parents=True, exist_ok=True)
            model_dir = build_tiny_llama(python, args.cache_dir)
            if args.tokenizer is not None:
                model_dir = model_with_tokenizer(python, model_dir, args.tokenizer, args.cache_dir)
            out = measure_server(python, model_dir, args, log)
            log(f"fit: {out['fit']}")
        else:
            if args.client is None or not args.client.is_file() or args.tokenizer is None:
                print(
                    "--client: expected a copy of benchmark_serving_random.py (and --tokenizer DIR)",
                    file=sys.stderr,
                )
                return 2
            out = measure_client(python, args, log)
    out = {"what": args.what, "machine": machine(), "load_average": os.getloadavg()} | out
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
