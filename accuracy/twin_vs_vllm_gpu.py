"""The twin against a real vLLM on a GPU: closed-loop `servelab bench` runs that no fit or design decision has
seen, each priced again by `servelab bench --simulate` with the run's own settings (lengths, their rule and
spread, clients, prompts, seed) and the server's batch limits, and compared statistic by statistic.

    PYTHONPATH=src python accuracy/twin_vs_vllm_gpu.py tests/data/vllm_gpu [--system h100_sxm]
        [--model HF_ID]        # the model the runs served the shape of (default Llama-3.1-8B)
        [--registered DIR]     # also compare with the predictions saved before the runs (same file names)
        [--server-args "--max-num-batched-tokens 2048 --max-num-seqs 48 --gpu-memory-utilization 0.83"]
                               # the scheduler limits the server ran with (start.sh's SERVER_ARGS)

The folder holds the measured result files (`servelab bench --save-result --save-detailed`, per-request
inter-token gaps dropped to keep them small) and, for each, vLLM's /metrics read before and after the run
(`metrics_<name>_before.txt` / `_after.txt`), and a README.md saying how they were made. vLLM's own histograms
split the measured first token into its queue and its prefill, which the twin's `--explain` splits too; its
preemption counter is set beside the twin's count of preempted requests. The last pair ("outside") is the
mean first token less both (measured: the API server, the hand-overs to and from the engine core and the
client; the twin: its API server's wait, intake and stream, the step in flight being in its queue). Where the
twin sent the run's own prompts (the same count, each length within LENGTH_SLACK tokens) to at most
FEW_CLIENTS clients, the first tokens are also set side by side request by request: request 0 apart (the ready
check left its prompt in the prefix cache, so it shows the cost of a request with next to no prefill), the
others' measured minus predicted TTFT.
"""

from __future__ import annotations

import argparse
import json
import statistics as st
import subprocess
import sys
import tempfile
from pathlib import Path

from servelab.metrics.percentiles import percentile
from servelab.runner.server_metrics import sums_of

SETTINGS = {  # result config field -> bench flag
    "random_input_len": "--random-input-len",
    "random_output_len": "--random-output-len",
    "random_range_ratio": "--random-range-ratio",
    "random_range_rule": "--random-range-rule",
    "max_concurrency": "--max-concurrency",
    "num_prompts": "--num-prompts",
    "seed": "--seed",
}
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
# the server flags a held-out set may set (scripts/device_vllm/server_args.sh takes the same ones), each with
# the kind of its value; `servelab bench --simulate` takes each under the same name
SERVER_FLAGS = {
    "--max-num-batched-tokens": int,
    "--max-num-seqs": int,
    "--gpu-memory-utilization": float,
    "--max-cudagraph-capture-size": int,
    "--stream-interval": int,
}
HISTOGRAMS = ("request_queue_time_seconds", "request_prefill_time_seconds", "time_to_first_token_seconds")
# the twin's token count of a random prompt may differ from the server's by a token or two (the text a prompt
# is decoded to and tokenized again); beyond that the two did not send the same prompts
LENGTH_SLACK = 2
# request by request only at a few clients: beyond them which request waits behind which is each side's own
# order, and pairs by index set different waits side by side
FEW_CLIENTS = 3


def parse_server_args(text: str) -> dict[str, int | float]:
    """A server's scheduler limits as `FLAG VALUE ...` (SERVER_ARGS of scripts/device_vllm/start.sh): only
    SERVER_FLAGS, integers above 0 and a memory share in (0, 1]."""
    words = text.split()
    limits: dict[str, int | float] = {}
    for i in range(0, len(words), 2):
        flag, value = words[i], words[i + 1] if i + 1 < len(words) else ""
        kind = SERVER_FLAGS.get(flag)
        if kind is None:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(SERVER_FLAGS)}, got {flag!r}")
        expected = "a share in (0, 1]" if kind is float else "a positive integer"
        try:
            number = kind(value)
        except ValueError:
            number = 0
        in_range = 0 < number <= 1 if kind is float else number > 0  # nan is in no range
        if not in_range:
            raise argparse.ArgumentTypeError(f"{flag} expects {expected}, got {value!r}")
        limits[flag] = number
    return limits


def histogram_means(before: Path, after: Path) -> dict[str, float]:
    """Mean of each histogram over the run, ms: (sum after - sum before) / (count after - count before)."""
    if not (before.exists() and after.exists()):
        return {}
    a, b = sums_of(before.read_text()), sums_of(after.read_text())
    means = {}
    for name in HISTOGRAMS:
        count = b.get(f"vllm:{name}_count", 0.0) - a.get(f"vllm:{name}_count", 0.0)
        if count > 0:
            means[name] = (b[f"vllm:{name}_sum"] - a[f"vllm:{name}_sum"]) / count * 1e3
    return means


def preemptions(before: Path, after: Path) -> float | None:
    """Requests vLLM preempted over the run (vllm:num_preemptions_total after less before); None without the
    pages."""
    if not (before.exists() and after.exists()):
        return None
    a, b = sums_of(before.read_text()), sums_of(after.read_text())
    return b.get("vllm:num_preemptions_total", 0.0) - a.get("vllm:num_preemptions_total", 0.0)


def client_flags(measured: dict) -> list[str]:
    """How the run's client sent: its worker processes (the result's `client`; each sends its own round-robin
    share of the requests) and whether it sent the ready check first (the first request's prompt, left in
    the prefix cache)."""
    workers = (measured.get("client") or {}).get("num_workers") or measured["config"].get("num_workers") or 0
    ready = "--ready-check" if measured["config"].get("ready_check", True) else "--no-ready-check"
    return ["--num-workers", str(workers), ready]


def simulate_argv(
    measured: dict,
    system: str,
    limits: dict[str, int | float],
    out: Path,
    model: str = LLAMA_8B,
    prefix_caching: bool = True,
) -> list[str]:
    """`servelab bench --simulate` of the measured run (its arguments after `servelab`), its result to out."""
    cfg = measured["config"]
    argv = ["bench", "--simulate", "--system", system, "--engine", "vllm"]
    argv += ["--model", model, "--dataset-name", "random", "--no-live", "--explain"]
    for field, flag in SETTINGS.items():
        argv += [flag, str(cfg[field])]
    for flag, value in limits.items():
        argv += [flag, str(value)]
    argv += client_flags(measured) + [
        "--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching"
    ]
    return argv + [
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(out.parent),
        "--result-filename",
        out.name,
    ]


def simulate(argv: list[str], out: Path) -> dict:
    """Run simulate_argv's `servelab bench --simulate` in a process of its own; its result."""
    subprocess.run(
        [sys.executable, "-m", "servelab.cli.main", *argv], check=True, capture_output=True, text=True
    )
    return json.loads(out.read_text())


def stats(result: dict) -> dict[str, float]:
    ttfts = sorted(t * 1e3 for t in result["ttfts"] if t)
    return {
        "ttft_p50": percentile(ttfts, 50),
        "ttft_p90": percentile(ttfts, 90),
        "ttft_p99": percentile(ttfts, 99),
        "tpot_p50": result["median_tpot_ms"],
        "tok_s": result["output_throughput"],
    }


def request_gaps(measured: dict, predicted: dict) -> dict[str, float] | None:
    """Measured minus predicted TTFT, ms, request by request: request 0's pair, and the others' median, least
    and most; None where the two runs did not send the same prompts (count or lengths)."""
    lens_m, lens_p = measured.get("input_lens") or [], predicted.get("input_lens") or []
    ttft_m, ttft_p = measured.get("ttfts") or [], predicted.get("ttfts") or []
    if not (len(lens_m) == len(lens_p) == len(ttft_m) == len(ttft_p) >= 2):
        return None
    if any(abs(a - b) > LENGTH_SLACK for a, b in zip(lens_m, lens_p, strict=True)):
        return None
    gaps = [(m - p) * 1e3 for m, p in zip(ttft_m[1:], ttft_p[1:], strict=True)]
    return {
        "first_measured": ttft_m[0] * 1e3,
        "first_predicted": ttft_p[0] * 1e3,
        "median": st.median(gaps),
        "least": min(gaps),
        "most": max(gaps),
    }


def explain_split(predicted: dict) -> tuple[float, float]:
    """The twin's mean queue and mean prefill of a first token, ms (its --explain)."""
    queue = prefill = 0.0
    for row in (predicted.get("explain") or {}).get("rows", []):
        if row.get("part") == "queue":
            queue += row["mean_ms"]
        elif row.get("part") == "prefill steps":
            prefill += row["mean_ms"]
    return queue, prefill


def outside(measured: dict, hist: dict[str, float]) -> float:
    """The measured mean first token outside vLLM's queue and prefill histograms, ms: the API server's intake,
    the hand-overs to and from the engine core (a request waits there for the step in flight, which the twin
    counts in its queue), the output's streaming and the client. The twin's counterpart is its API server's
    wait, intake and first-token stream."""
    inside = hist.get("request_queue_time_seconds", float("nan"))
    return measured["mean_ttft_ms"] - inside - hist.get("request_prefill_time_seconds", float("nan"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--system", default="h100_sxm")
    ap.add_argument("--model", default=LLAMA_8B, help="the model whose shape the runs served")
    ap.add_argument("--max-num-seqs", type=int, default=1024, help="the server's (its log says)")
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192, help="the server's (its log says)")
    ap.add_argument(
        "--server-args",
        type=parse_server_args,
        default={},
        help="the scheduler limits the server ran with, as start.sh's SERVER_ARGS (over the two flags above)",
    )
    ap.add_argument(
        "--no-prefix-caching",
        dest="prefix_caching",
        action="store_false",
        help="the server ran without prefix caching (vLLM's default is on; its log says)",
    )
    ap.add_argument("--registered", type=Path, help="predictions saved before the runs, same file names")
    ap.add_argument(
        "--warm-up",
        action="append",
        default=[],
        metavar="TAG",
        help="the tag of runs that warmed a fresh server up (TAG_cC.json): printed, not in the medians",
    )
    args = ap.parse_args(argv)
    runs = sorted(p for p in args.folder.glob("*_c*.json") if not p.name.startswith("metrics"))
    if not runs:
        print(f"error: {args.folder}: no result files (*_cN.json)", file=sys.stderr)
        return 2
    limits = {"--max-num-seqs": args.max_num_seqs, "--max-num-batched-tokens": args.max_num_batched_tokens}
    limits.update(args.server_args)
    if args.server_args:
        print(
            "the server's limits, as the twin prices them: " + " ".join(f"{k} {v}" for k, v in limits.items())
        )
    # the device host's CPU (scripts/device_vllm/host_speed.py), where the run recorded it
    host = args.folder / "host.txt"
    if host.exists():
        print("the device host: " + "; ".join(host.read_text().splitlines()))
    print(
        "run        C  ISL   TTFT p50 meas/pred  ratio   TTFT p90 ratio  TPOT meas/pred  ratio  tok/s ratio"
        "  queue meas/pred  prefill meas/pred  outside meas/pred"
    )
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in runs:
            try:
                measured = json.loads(path.read_text())
                missing = [f for f in SETTINGS if f not in measured["config"]]
                missing += [
                    f for f in ("ttfts", "median_tpot_ms", "output_throughput") if not measured.get(f)
                ]
                if missing:
                    raise ValueError(f"no {', '.join(missing)}")
            except (OSError, ValueError, KeyError, TypeError) as e:
                what = "a `servelab bench --save-result --save-detailed` result file"
                print(f"error: {path}: expected {what} ({type(e).__name__}: {e})", file=sys.stderr)
                return 2
            out = Path(tmp) / path.name
            argv = simulate_argv(measured, args.system, limits, out, args.model, args.prefix_caching)
            predicted = simulate(argv, out)
            m, p = stats(measured), stats(predicted)
            name = path.stem
            hist = histogram_means(
                args.folder / f"metrics_{name}_before.txt", args.folder / f"metrics_{name}_after.txt"
            )
            q_pred, pre_pred = explain_split(predicted)
            cfg = measured["config"]
            r = {k: p[k] / m[k] for k in m}
            warm_up = name.rsplit("_c", 1)[0] in args.warm_up
            if not warm_up:
                errors.append((abs(r["ttft_p50"] - 1), abs(r["tpot_p50"] - 1), r["ttft_p50"]))
            print(
                f"{name:9s} {cfg['max_concurrency']:4d} {cfg['random_input_len']:5d}"
                f"  {m['ttft_p50']:8.1f} / {p['ttft_p50']:8.1f}  {r['ttft_p50']:5.2f}   {r['ttft_p90']:5.2f}"
                f"  {m['tpot_p50']:6.2f} / {p['tpot_p50']:6.2f}  {r['tpot_p50']:5.2f}  {r['tok_s']:5.2f}"
                f"  {hist.get('request_queue_time_seconds', float('nan')):7.1f} / {q_pred:7.1f}"
                f"  {hist.get('request_prefill_time_seconds', float('nan')):7.1f} / {pre_pred:7.1f}"
                f"  {outside(measured, hist):7.1f} / {predicted['mean_ttft_ms'] - q_pred - pre_pred:7.1f}"
                + ("  (warm-up: not counted)" if warm_up else "")
            )
            gaps = request_gaps(measured, predicted) if cfg["max_concurrency"] <= FEW_CLIENTS else None
            if gaps:
                print(
                    f"{'':15s}request by request, measured - twin TTFT:"
                    " request 0 (its prompt cached by the ready check)"
                    f" {gaps['first_measured']:.1f} / {gaps['first_predicted']:.1f} ms,"
                    f" the others median {gaps['median']:+.1f} ms"
                    f" ({gaps['least']:+.1f} to {gaps['most']:+.1f})"
                )
            preempted = preemptions(
                args.folder / f"metrics_{name}_before.txt", args.folder / f"metrics_{name}_after.txt"
            )
            twin_count = predicted.get("prediction", {}).get("preemptions", 0)
            if preempted or twin_count:
                vllm_count = "?" if preempted is None else f"{preempted:.0f}"
                print(
                    f"{'':15s}preempted requests, vLLM's /metrics / the twin's: {vllm_count} / {twin_count}"
                )
            if args.registered and (args.registered / path.name).exists():
                registered = json.loads((args.registered / path.name).read_text())
                reg = stats(registered)
                ratios = ", ".join(f"{k} {reg[k] / m[k]:.2f}" for k in ("ttft_p50", "tpot_p50", "tok_s"))
                if "preemptions" in registered.get("prediction", {}):
                    ratios += f"; it preempted {registered['prediction']['preemptions']}"
                print(f"{'':15s}registered before the run, predicted / measured: {ratios}")
    if not errors:
        print("\nno run counted: every run is a warm-up")
        return 0
    both = [e for row in errors for e in row[:2]]
    ttft, tpot = (100 * st.median(e[k] for e in errors) for k in (0, 1))
    within = sum(1 / 1.5 <= e[2] <= 1.5 for e in errors)
    print(
        f"\nmedian |error|: TTFT {ttft:.1f} %, TPOT {tpot:.1f} %, both {100 * st.median(both):.1f} %;",
        end=" ",
    )
    print(f"TTFT within 1.5x: {within} of {len(errors)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
