"""The simulated twin of a real benchmark against the machine's own run-to-run spread: `servelab bench`
against vLLM (V1, CPU backend) serving the e2e tests' tiny random Llama, K times per point, and
`servelab.predict.twin` replaying the same request stream, priced with a CPU profile fitted to this engine's
own step costs.

1. Start the CPU vLLM once, with its prefix cache off: the warm pass before each measured run sends the very
   prompts of that run (same flags, same seed), and so does every repetition, so with vLLM V1's default
   prefix caching the measured runs would compute almost none of their prompts while the twin, which sees one
   benchmark alone, prices them all (the 512-token prompts of run 4 in docs/accuracy.md reached their first
   token in 22-26 ms, faster than one lone 256-token prefill). Measure its step costs and fit servelab's step
   model to them, as accuracy/sim_vs_vllm_cpu.py does (its StepSamples and fit_profile): one round of step
   measurements runs before every measured benchmark, so the costs span the same minutes as the runs.
2. Per point (clients x ISL/OSL, random dataset, range ratio 0.2, fixed --num-prompts and --seed), run the
   real client (the `servelab bench` CLI) K times, each after one unmeasured warm pass of the same flags,
   saving every result file; the engine's own /metrics histograms are read around each run as well (the
   diagnosis).
3. Replay each point's stream with the twin (the CLI's BenchStream from the same BenchConfig), the engine
   profile written as a calibration file (the `--calibration` route) and the fitted CPU system, and compare
   each metric with the measured [min, max].

    .venv/bin/python accuracy/twin_vs_vllm_cpu.py [--runs 5] [--out-dir DIR] [--json out.json]
    .venv/bin/python accuracy/twin_vs_vllm_cpu.py --reprice out.json --model-dir DIR [--refit]  # no server

--reprice replays a saved run's points with the current twin (after a simulator change, say) and compares them
with the same measurements; --refit first fits the CPU profile again to the run's saved step costs (after a
change to the fit).

Needs the vLLM CPU venv (scripts/setup_vllm_cpu.sh, default .venv-vllm or $SERVELAB_VLLM_VENV).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics as st
import subprocess
import sys
import time
from pathlib import Path

from sim_vs_vllm_cpu import (
    MAX_NUM_BATCHED_TOKENS,
    MAX_NUM_SEQS,
    RANGE_RATIO,
    VOCAB,
    CpuProfile,
    StepCosts,
    StepSamples,
    cpu_engine,
    fit_lines,
    fit_profile,
)

from servelab.bench import result as R
from servelab.bench.config import BenchConfig
from servelab.bench.simulated import simulated_result
from servelab.perfdb.db import PerfDB
from servelab.predict.engines import engine_profile
from servelab.predict.twin import BenchStream, EngineSettings, simulate_benchmark
from servelab.runner.server_metrics import metric_sums
from servelab.runner.tiny_llama import build_tiny_llama
from servelab.runner.vllm_cpu import VENV_ENV, VllmCpuServer, vllm_python
from servelab.specs import Parallel, load_model

REPO = Path(__file__).resolve().parents[1]
PORT = 19033  # this check's port (19000-19499 belongs to this work; sim_vs_vllm_cpu.py has 19031)
POINTS = [(c, isl, osl) for isl, osl in ((128, 64), (512, 32)) for c in (1, 4, 16)]
NUM_PROMPTS = 64
SEED = 0
METRICS = (
    "median_ttft_ms",
    "p90_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p90_tpot_ms",
    "median_itl_ms",
    "duration",
)
SETTINGS = EngineSettings(
    engine="vllm",
    max_num_seqs=MAX_NUM_SEQS,
    max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS,
    chunked_prefill=True,
    enable_prefix_caching=False,  # the server runs with --no-enable-prefix-caching (step 1 above)
)


def bench_config(model_name: str, c: int, isl: int, osl: int, num_prompts: int, seed: int) -> BenchConfig:
    """One point's flags, as the real client and the twin both read them."""
    return BenchConfig(
        model=model_name,
        dataset_name="random",
        random_input_len=isl,
        random_output_len=osl,
        random_range_ratio=RANGE_RATIO,
        num_prompts=num_prompts,
        max_concurrency=c,
        seed=seed,
        percentile_metrics=["ttft", "tpot", "itl", "e2el"],
        metric_percentiles=[50.0, 90.0, 99.0],
    )


def cli_flags(cfg: BenchConfig) -> list[str]:
    """The same point as `servelab bench` flags."""
    return [
        "--dataset-name",
        cfg.dataset_name,
        "--random-input-len",
        str(cfg.random_input_len),
        "--random-output-len",
        str(cfg.random_output_len),
        "--random-range-ratio",
        str(cfg.random_range_ratio),
        "--num-prompts",
        str(cfg.num_prompts),
        "--max-concurrency",
        str(cfg.max_concurrency),
        "--seed",
        str(cfg.seed),
        "--percentile-metrics",
        ",".join(cfg.percentile_metrics),
        "--metric-percentiles",
        ",".join(f"{p:g}" for p in cfg.metric_percentiles),
    ]


# ---------------------------------------------------------------------------------------------- real runs
def run_client(base_url: str, model_dir: Path, cfg: BenchConfig, out_dir: Path, name: str) -> dict:
    """One `servelab bench` run of the point against the server; its saved result, with the engine's own
    per-request means over the run (vLLM /metrics) and the load average around it."""
    cmd = [sys.executable, "-m", "servelab.cli.main", "bench", "--base-url", base_url]
    cmd += ["--model", str(cfg.model), "--tokenizer", str(model_dir), *cli_flags(cfg)]
    cmd += ["--save-result", "--save-detailed", "--result-dir", str(out_dir), "--result-filename", name]
    load_before, before = os.getloadavg()[0], metric_sums(base_url)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    after = metric_sums(base_url)
    if p.returncode != 0:
        raise RuntimeError(f"servelab bench failed ({p.returncode}): {p.stderr[-2000:]}")

    def mean_ms(metric: str) -> float:
        count = after[metric + "_count"] - before[metric + "_count"]
        return (after[metric + "_sum"] - before[metric + "_sum"]) / count * 1000 if count else float("nan")

    result = json.loads((out_dir / name).read_text())
    result["engine_side"] = {
        "ttft_ms": mean_ms("vllm:time_to_first_token_seconds"),
        "queue_plus_prefill_ms": mean_ms("vllm:request_queue_time_seconds")
        + mean_ms("vllm:request_prefill_time_seconds"),
        "tpot_ms": mean_ms("vllm:request_time_per_output_token_seconds"),
        # Little's law on the engine's end-to-end histogram: requests inside vLLM on average over the
        # benchmark's own duration (the warm-up request before it adds a little)
        "concurrency": (
            after["vllm:e2e_request_latency_seconds_sum"] - before["vllm:e2e_request_latency_seconds_sum"]
        )
        / result["duration"],
    }
    result["loadavg_1m"] = [load_before, os.getloadavg()[0]]
    return result


# ---------------------------------------------------------------------------------------------- the twin
def write_calibration(profile: CpuProfile, path: Path) -> Path:
    """The fitted engine overheads as a calibration file (the format `servelab calibrate engines` writes), so
    the twin prices vLLM with them through its own `calibration` argument: the same EngineProfile as
    sim_vs_vllm_cpu.cpu_engine (no kernel gap; decode steps stay graphed at these batches)."""
    params = {
        "step_overhead_us": profile.step_overhead_us,
        "per_seq_overhead_us": profile.per_seq_overhead_us,
        "kernel_gap_us": 0.0,
        "eager_launch_us": profile.prompt_step_us_per_op,
    }
    data = {
        "calibration_format": 2,
        "_provenance": "accuracy/twin_vs_vllm_cpu.py: fitted to measured vLLM CPU steps on this machine",
        "engines": {"vllm": {"params": params}},
    }
    path.write_text(json.dumps(data, indent=1))
    return path


def run_twin(model_dir: Path, cfg: BenchConfig, profile: CpuProfile, calibration: Path) -> dict:
    """The twin's result for the point, in the real result's layout."""
    model = load_model(str(model_dir))
    system = profile.system()
    stream = BenchStream(**{name: getattr(cfg, name) for name in BenchStream.__dataclass_fields__})
    twin = simulate_benchmark(
        model,
        system,
        Parallel(),
        SETTINGS,
        stream,
        cfg.percentile_metrics,
        cfg.metric_percentiles,
        cfg.goodput,
        db=PerfDB(system, use_tables=False),  # the fitted roofline only: no GPU tables for this "system"
        calibration=calibration,
    )
    result = simulated_result(
        cfg, str(cfg.model), R.now_stamp(), twin.summary, twin.client_latency_ms, twin.requests, {}
    )
    return {**result.dump(), **twin.extra_fields()}


# ---------------------------------------------------------------------------------------------- comparison
def verdict(value: float, lo: float, hi: float) -> str:
    """'inside' the measured [lo, hi], or by what factor outside it."""
    if lo <= value <= hi:
        return "inside"
    if value > hi:
        return f"x{value / hi:.2f} above" if hi > 0 else "above (measured 0)"
    return f"x{lo / value:.2f} below" if value > 0 else "below (twin 0)"


def compare(measured: list[dict], twin: dict, http_ms: float) -> dict:
    """Per metric: the measured runs' min, max and median, the twin's value and its verdict. TTFT metrics
    also carry the twin plus the measured HTTP path of a lone request (measured before each run: vLLM's API
    process and the client) less what the twin prices of it itself, with its own verdict."""
    out = {}
    for metric in METRICS:
        values = [m[metric] for m in measured]
        lo, hi = min(values), max(values)
        row = {"min": lo, "max": hi, "median": st.median(values), "twin": twin[metric]}
        row["verdict"] = verdict(twin[metric], lo, hi)
        if "ttft" in metric:
            row["twin_plus_http"] = twin[metric] + http_ms
            row["verdict_plus_http"] = verdict(row["twin_plus_http"], lo, hi)
        out[metric] = row
    return out


def engine_compare(engine_side: list[dict], twin: dict, frontend_ms: float) -> dict:
    """The twin's mean TTFT and TPOT against the engine's own per-run means (vLLM /metrics): the spread of
    what the engine did, without the client. vLLM's TTFT starts at its front end; `frontend_ms` is the part of
    the measured lone-request front-end path the twin does not price itself (see front_end_not_priced)."""
    out = {}
    for metric, add in (("ttft_ms", frontend_ms), ("tpot_ms", 0.0)):
        values = [e[metric] for e in engine_side]
        lo, hi = min(values), max(values)
        twin_value = twin[f"mean_{metric}"] + add
        out[metric] = {"min": lo, "max": hi, "twin": twin_value, "verdict": verdict(twin_value, lo, hi)}
    return out


def twin_api_ms(calibration: Path, isl: int) -> float:
    """What the twin itself prices for a lone request's way through vLLM's API server: the profile's
    per-request and per-prompt-token costs (servelab.predict.serving.engine.LaneLimits.frontend_cost_s with
    nothing streaming) and, where the API server is one serial queue (the policy's serial_output_stream),
    handling the step that carries its first token (Lane.stream_out: one token and one step)."""
    engine = twin_engine(calibration)
    serial = engine.policy.serial_output_stream
    first = engine.api_output_token_us + engine.api_chunk_us + engine.api_step_us if serial else 0.0
    return (engine.api_request_us + engine.api_prompt_token_us * isl + first) / 1000.0


def front_end_not_priced(measured_ms: float, calibration: Path, isl: int) -> float:
    """The measured lone-request path less what the twin already prices of it: adding the whole measured path
    to the twin's TTFT counted the API server twice (visible at one client, where nothing queues)."""
    return max(0.0, measured_ms - twin_api_ms(calibration, isl))


KEPT = (*METRICS, "engine_side", "one_read_requests", "loadavg_1m", "input_lens", "output_lens")


def measure(base_url: str, model_name: str, model_dir: Path, runs: int, out_dir: Path, points=POINTS) -> dict:
    """Measure the points K times each and fit the CPU profile; what the comparison needs from every run."""
    model = load_model(str(model_dir))
    VOCAB["size"] = model.vocab_size
    t0, load_start = time.time(), os.getloadavg()
    samples = StepSamples()
    samples.measure_round(base_url, model_name, seed=1000, keep=False)  # warm-up: every calibration shape
    rows = []
    for c, isl, osl in points:
        cfg = bench_config(model_name, c, isl, osl, NUM_PROMPTS, SEED)
        tag = f"c{c}-{isl}-{osl}"
        measured = []
        for k in range(runs):
            run_client(base_url, model_dir, cfg, out_dir, f"real-{tag}-warm{k}.json")  # unmeasured
            samples.measure_round(base_url, model_name, seed=1001 + len(samples.http))
            result = run_client(base_url, model_dir, cfg, out_dir, f"real-{tag}-{k}.json")
            measured.append({key: result[key] for key in KEPT})
        rows.append({"clients": c, "isl": isl, "osl": osl, "num_prompts": NUM_PROMPTS, "seed": SEED})
        rows[-1]["runs"] = measured
    costs = samples.costs()
    return {
        "model_name": model_name,
        "wall_s": round(time.time() - t0, 1),
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
        "cpus": os.cpu_count(),
        "runs_per_point": runs,
        "step_costs": {
            "prefill_ms": costs.prefill_ms,
            "decode_ms": costs.decode_ms,
            "http_ms": costs.http_ms,
            "frontend_ms": costs.frontend_ms,
        },
        "profile": fit_profile(model, costs).__dict__,
        "points": rows,
        "result_dir": str(out_dir),
    }


def twin_engine(calibration: Path):
    """The vLLM profile the twin prices with: the calibration file's, under the twin's settings."""
    return engine_profile(
        "vllm",
        calibration=calibration,
        max_num_seqs=SETTINGS.max_num_seqs,
        max_num_batched_tokens=SETTINGS.max_num_batched_tokens,
        chunked_prefill=SETTINGS.chunked_prefill,
    )


def check_calibration(calibration: Path, profile: CpuProfile) -> None:
    """The twin must price the engine sim_vs_vllm_cpu.py fitted: the calibration file's vLLM profile under the
    twin's settings has every field cpu_engine sets, and graphs every decode step as cpu_engine does. Fields
    cpu_engine leaves at their defaults keep vLLM's documented values."""
    got = twin_engine(calibration)
    want = cpu_engine(profile.step_overhead_us, profile.per_seq_overhead_us, profile.prompt_step_us_per_op)
    fitted = want.model_fields_set - {"name", "source", "cuda_graph_max_batch"}
    differ = sorted(k for k in fitted if getattr(got, k) != getattr(want, k))
    if differ or got.cuda_graph_max_batch < MAX_NUM_SEQS:
        raise RuntimeError(f"the calibration file prices another engine than the fitted one: {differ}")


def refit(measured: dict, model_dir: Path) -> dict:
    """The CPU profile fitted anew to a saved run's step costs (JSON keys are strings; the fit wants ints)."""
    saved = measured["step_costs"]
    costs = StepCosts(
        prefill_ms={int(n): ms for n, ms in saved["prefill_ms"].items()},
        decode_ms={int(b): ms for b, ms in saved["decode_ms"].items()},
        http_ms=saved["http_ms"],
        frontend_ms=saved["frontend_ms"],
    )
    return fit_profile(load_model(str(model_dir)), costs).__dict__


def price(measured: dict, model_dir: Path, out_dir: Path) -> dict:
    """Replay every measured point with the twin priced by the fitted profile, and compare."""
    profile = CpuProfile(**measured["profile"])
    costs = measured["step_costs"]
    calibration = write_calibration(profile, out_dir / "cpu-calibration.json")
    check_calibration(calibration, profile)
    rows = []
    for point in measured["points"]:
        c, isl, osl, runs = point["clients"], point["isl"], point["osl"], point["runs"]
        cfg = bench_config(measured["model_name"], c, isl, osl, point["num_prompts"], point["seed"])
        twin = run_twin(model_dir, cfg, profile, calibration)
        (out_dir / f"twin-c{c}-{isl}-{osl}.json").write_text(json.dumps(twin, indent=1))
        engine_side = [r["engine_side"] for r in runs]
        rows.append(
            {
                **point,
                # the twin replays the lengths the real client sent (the server's own usage counts)
                "same_lengths": all(
                    r["input_lens"] == twin["input_lens"] and r["output_lens"] == twin["output_lens"]
                    for r in runs
                ),
                "metrics": compare(runs, twin, front_end_not_priced(costs["http_ms"], calibration, isl)),
                "engine_vs_twin": engine_compare(
                    engine_side, twin, front_end_not_priced(costs["frontend_ms"], calibration, isl)
                ),
            }
        )
    return {**measured, "points": rows, "twin_dir": str(out_dir)}


def markdown(result: dict) -> str:
    lines = [
        *fit_lines(result),
        (
            f"{result['runs_per_point']} measured runs per point; load average (1 min) "
            f"{result['loadavg_start'][0]:.2f} at the start, {result['loadavg_end'][0]:.2f} at the end, on "
            f"{result['cpus']} CPUs; vLLM's compute threads on CPUs "
            f"{result.get('engine_cpus', 'vLLM default (all)')}; "
            f"{result['wall_s']:.0f} s."
        ),
        "",
        "| clients | isl/osl | metric | measured min - max | median | twin | twin vs spread | "
        "twin + HTTP path | vs spread |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["points"]:
        for metric, m in r["metrics"].items():
            unit = "s" if metric == "duration" else "ms"
            plus = (f"{m['twin_plus_http']:.2f} | {m['verdict_plus_http']}") if "twin_plus_http" in m else "|"
            lines.append(
                f"| {r['clients']} | {r['isl']}/{r['osl']} | {metric.removesuffix('_ms')} ({unit}) | "
                f"{m['min']:.2f} - {m['max']:.2f} | {m['median']:.2f} | {m['twin']:.2f} | {m['verdict']} | "
                f"{plus} |"
            )
    lines += [
        "",
        "| clients | isl/osl | same lengths | engine saw (clients) | one-read requests | "
        "engine's mean TTFT ms, min - max | twin + front end | vs spread | "
        "engine's mean TPOT ms, min - max | twin | vs spread |",
    ]
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in result["points"]:
        seen = ", ".join(f"{run['engine_side']['concurrency']:.1f}" for run in r["runs"])
        one_read = ", ".join(str(run["one_read_requests"]) for run in r["runs"])
        ttft, tpot = r["engine_vs_twin"]["ttft_ms"], r["engine_vs_twin"]["tpot_ms"]
        lines.append(
            f"| {r['clients']} | {r['isl']}/{r['osl']} | {r['same_lengths']} | {seen} | {one_read} | "
            f"{ttft['min']:.1f} - {ttft['max']:.1f} | {ttft['twin']:.1f} | {ttft['verdict']} | "
            f"{tpot['min']:.2f} - {tpot['max']:.2f} | {tpot['twin']:.2f} | {tpot['verdict']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", type=Path, help="an existing tiny model directory (else one is built)")
    ap.add_argument("--runs", type=int, default=3, help="measured runs per point (K >= 3)")
    ap.add_argument("--port", type=int, default=PORT)
    ap.add_argument(
        "--out-dir",
        type=Path,
        default=REPO / ".cache" / "twin-vs-vllm-cpu",
        help="where every result file goes",
    )
    ap.add_argument(
        "--engine-cpus",
        help="pin vLLM's compute threads to these CPUs (VLLM_CPU_OMP_THREADS_BIND, e.g. 0), leaving the "
        "others to its API process and the client; default: vLLM's own binding (all CPUs, as the e2e server)",
    )
    ap.add_argument(
        "--reprice",
        type=Path,
        help="a --json file of an earlier run: replay its points with the current twin and compare again, "
        "without a server (needs --model-dir)",
    )
    ap.add_argument(
        "--refit",
        action="store_true",
        help="with --reprice: fit the CPU profile again to the run's saved step costs (after a change to the "
        "fit), instead of pricing with the profile the run saved",
    )
    ap.add_argument("--json", type=Path, help="write the comparison as JSON here")
    args = ap.parse_args(argv)
    if args.runs < 3:
        ap.error("--runs: at least 3 (a spread needs them)")
    if args.engine_cpus is not None and not re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", args.engine_cpus):
        ap.error("--engine-cpus: a CPU list such as 0 or 0-3 or 0,2")
    out_dir = args.out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.reprice:
        if args.model_dir is None:
            ap.error("--reprice needs --model-dir (the served model's directory; its config.json is enough)")
        measured = json.loads(args.reprice.read_text())
        if args.refit:
            measured["profile"] = refit(measured, args.model_dir)
    elif args.refit:
        ap.error("--refit refits a saved run: it needs --reprice")
    else:
        python = vllm_python(REPO / ".venv-vllm")
        if python is None:
            print(
                f"vLLM CPU venv not found (set {VENV_ENV} or run scripts/setup_vllm_cpu.sh)", file=sys.stderr
            )
            return 2
        model_dir = args.model_dir or build_tiny_llama(python, REPO / ".cache" / "e2e")
        args.model_dir = model_dir
        extra = ["--max-num-batched-tokens", str(MAX_NUM_BATCHED_TOKENS), "--no-enable-prefix-caching"]
        env = {"VLLM_CPU_OMP_THREADS_BIND": args.engine_cpus} if args.engine_cpus else {}
        log = out_dir / "vllm.log"
        with VllmCpuServer(
            python, model_dir, port=args.port, extra_args=extra, env=env, log_path=log
        ) as server:
            measured = measure(server.url, server.model, model_dir, args.runs, out_dir)
        measured["engine_cpus"] = args.engine_cpus or "vLLM default (all)"
    result = price(measured, args.model_dir, out_dir)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
