"""Pin public closed-loop benchmark results that no fit and no design decision of servelab has seen
(tests/data/closed_loop_fresh), and split them into development / held-out parts before anyone prices them.

    python scripts/refresh_closed_loop_fresh.py --inferencex PATH

PATH is a git checkout or bare git directory of github.com/SemiAnalysisAI/InferenceX (Apache-2.0)
holding the commits named below (pull-request heads included:
`git fetch origin '+refs/pull/*/head:refs/pull/*/head'`). The result files are copied unchanged, each under
`inferencex/<commit>/<its upstream path>`; `points.csv` gives one row per result with the settings needed to
replay it; `heldout.txt` lists the held-out rows' ids.

Searched (2026-12-06, read only; nothing was priced or compared):
- github.com/ai-dynamo/aiconfigurator, every ref (1,987): silicon_sample.csv has three versions in all history
  (blobs 8913ebd, d817aae, 92100a0, at src/aiconfigurator/systems/ and aic-core/...), and the 35-row
  tools/accuracy_tracking/silicon_refs.csv: every row of each is, by id and by value, a row of the version
  tests/data/closed_loop pins (92100a0). Its other measured files (fpm_golden_runs/, runs/ of the
  layerwise-collector branches) are forward-pass timings of hand-made request mixes, not closed-loop results.
- github.com/SemiAnalysisAI/InferenceX, every ref (3,310), every JSON/CSV/log blob that mentions TTFT:
  kept are the two sets below. Not kept: experimental/token_position_decode_slo/ MiniMax-M2.5 (pinned already
  in tests/data/closed_loop), its GLM-5 and Qwen3.5 files and the GLM-5.2 MXFP4 files of a MI355X branch
  (architectures servelab cannot price: DeepSeek sparse attention, Gated DeltaNet); every speculative-decoding
  run (MTP, EAGLE3: local-results/, kimik2.5 *spec-mtp*, sglang_*mtp*); ATOM-engine runs; the agentic and
  multi-turn trace replays (experimental/multiturn, agentic sweeps: no fixed lengths to replay); runners/
  mock_results (mock); TRT_BENCH_NOTES (offline LLM.generate, not a server).
- github.com/vllm-project/perf-eval, every ref: workload definitions only; results go to a dashboard.
- github.com/ROCm/ATOM: its results are ATOM-engine runs (servelab launches ATOM but does not price it).
  NVIDIA/srt-slurm and ai-dynamo/aiperf: no serving results with TTFT. github.com/sgl-project/sglang is too
  large to fetch here.

Kept (closed loop: a fixed number of clients, each sending its next request when its last one finished):
- together_runner/baselines (InferenceX pull request 1713): one B200 node, aggregated; SGLang
  DeepSeek-R1-0528 NVFP4 TP8 EP8 and vLLM 0.22.0 gpt-oss-120b TP4, ISL / OSL 1024 nominal with
  `--random-range-ratio 0` (InferenceX's benchmark_serving draws each length in [0, nominal]) and no
  `--ignore-eos`, 10 x C prompts after 2 x C warm-ups (together_runner/run_3_test_client.sh); the engine
  flags are run_2_launch_server.sh's. The JSON holds the median and p99 of TTFT and TPOT and the throughputs,
  from which points.csv derives the mean prompt and output length per request. The SGLang DeepSeek conc16 /
  conc64 results of the harness's first commit (9e97721bf, later moved and re-measured) are kept as separate
  points of the same deployment.
- benchmarks/multi_node/results (InferenceX pull request 1208, deleted before it merged): two MI355X nodes,
  disaggregated vLLM (nightly image at vLLM commit 100c7b65e, MoRIIO KV connector over RDMA), one prefill
  worker TP8 and one decode worker TP8 (MiniMax-M2.5 FP8 with expert parallelism on both, gpt-oss-120b
  MXFP4 without), ISL / OSL 1024 exact (range ratio 1, `--ignore-eos`), 10 x C prompts after 2 x C warm-ups
  (vllm_disagg_utils/run_P.sh, run_D.sh, models.yaml; amd_utils/server_vllm.sh, bench.sh;
  benchmarks/benchmark_lib.sh). The run used InferenceX's patched MiniMax-M2 model file
  (vllm_disagg_utils/patches/minimax_m2.py); the results carry mean, median and p99 of TTFT and TPOT.

The split is made here, from the deployments alone, before any prediction is compared with them. A
deployment group is the row's source, mode, system, engine, engine version, model, precision, parallel layout
(tp, ep, DP attention, pp; for disaggregated rows both pools and their worker counts) and ISL / OSL; every
concurrency of a sweep falls in one group. A group is held out when the first 8 hex digits of the SHA-256 of
a salt followed by its key (servelab.calibrate.closed_loop_split: FRESH_SALT, FRESH_GROUP_FIELDS joined
by "|"), read as an integer, are below 50 % of 2**32. The salt makes the split independent of
scripts/refresh_closed_loop.py's. Nothing is fitted or decided on the
held-out rows.
"""

import argparse
import csv
import io
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from servelab.calibrate.closed_loop_split import FRESH_GROUP_FIELDS, FRESH_HELD_OUT_SHARE, fresh_held_out
from servelab.engines import Engine, engine_of

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "closed_loop_fresh"
REPO = "https://github.com/SemiAnalysisAI/InferenceX"
GROUP_FIELDS = FRESH_GROUP_FIELDS
COLUMNS = (
    "id",
    *GROUP_FIELDS,
    "image",
    "model_revision",
    "kv_cache_dtype",
    "concurrency",
    "random_range_ratio",
    "ignore_eos",
    "num_prompts",
    "num_warmups",
    "completed",
    "mean_input_tokens",
    "mean_output_tokens",
    "ttft_median_ms",
    "tpot_median_ms",
    "ttft_mean_ms",
    "tpot_mean_ms",
    "ttft_p99_ms",
    "tpot_p99_ms",
    "upstream_commit",
    "upstream_path",
    "file",
    "settings_from",
)


@dataclass(frozen=True)
class ResultSet:
    """Result files of one commit and what the files themselves do not say about how they ran."""

    source: str
    commit: str
    paths: tuple[str, ...]
    settings: dict[str, str] = field(default_factory=dict)


TOGETHER_SCRIPTS = (
    "together_runner/config.env, run_2_launch_server.sh, run_3_test_client.sh at 2a6a04c04 "
    "(InferenceX pull request 1713)"
)
TOGETHER_CLIENT = {"random_range_ratio": "0", "ignore_eos": "false", "settings_from": TOGETHER_SCRIPTS}
# per together_runner profile (config.env, run_2_launch_server.sh): weights, KV cache and the expert split
TOGETHER_PROFILES = {
    "dsr1-fp4": {"precision": "nvfp4", "kv_cache_dtype": "fp8_e4m3", "dp_attention": "false"},
    "gptoss-fp4": {"precision": "mxfp4", "kv_cache_dtype": "fp8", "dp_attention": "false"},
}
MULTI_NODE_COMMON = {
    "source": "inferencex-pr1208-mi355x-disagg",
    "mode": "disagg",
    "system": "mi355x",
    "engine": str(Engine.VLLM),
    "engine_version": "nightly-100c7b65e7579c8caf4ee0b04a6410b2796b905c",
    "image": "vllm/vllm-openai-rocm:nightly-100c7b65e7579c8caf4ee0b04a6410b2796b905c-bnxt",
    "kv_cache_dtype": "auto",
    "dp_attention": "false",
    "pp": "1",
    "prefill_workers": "1",
    "prefill_tp": "8",
    "decode_workers": "1",
    "decode_tp": "8",
    "isl": "1024",
    "osl": "1024",
    "random_range_ratio": "1",
    "ignore_eos": "true",
}
CONCURRENCIES = (4, 8, 16, 32, 64, 128, 256, 512)
RESULT_SETS = (
    ResultSet(
        "inferencex-pr1713-together-b200",
        "2a6a04c041af9fd8bac36de567b45ca50cf005b6",
        tuple(
            f"together_runner/baselines/b200/sglang/dsr1-fp4/1k1k/tuned/conc{c}.json"
            for c in (16, 64, 128, 256)
        )
        + tuple(
            f"together_runner/baselines/b200/vllm/gptoss-fp4/1k1k/untuned/conc{c}.json"
            for c in (16, 64, 128, 256, 512)
        ),
        TOGETHER_CLIENT,
    ),
    ResultSet(
        "inferencex-pr1713-together-b200",
        "9e97721bf4e3f8f978c9f166dcd9123b2257c6e6",
        tuple(f"together_runner/baselines/b200/dsr1-fp4/1k1k/tuned/conc{c}.json" for c in (16, 64)),
        {**TOGETHER_CLIENT, "settings_from": TOGETHER_SCRIPTS.replace("2a6a04c04", "9e97721bf")},
    ),
    ResultSet(
        MULTI_NODE_COMMON["source"],
        "a88fcacf72f3afc22e7eea0e05211cfdf43e91a7",
        tuple(
            f"benchmarks/multi_node/results/concurrency_{c}_req_rate_inf_gpus_16_ctx_8_gen_8.json"
            for c in CONCURRENCIES
        ),
        {
            **MULTI_NODE_COMMON,
            "model": "openai/gpt-oss-120b",
            "model_revision": "b5c939de8f754692c1647ca79fbf85e8c1e70f8a",
            "precision": "mxfp4",
            "tp": "8",
            "ep": "1",
            "prefill_ep": "1",
            "decode_ep": "1",
            "settings_from": "benchmarks/multi_node/vllm_disagg_utils/{run_P.sh,run_D.sh,models.yaml}, "
            "amd_utils/{server_vllm.sh,bench.sh}, benchmark_lib.sh at a88fcacf7 "
            "(InferenceX pull request 1208)",
        },
    ),
    ResultSet(
        MULTI_NODE_COMMON["source"],
        "006dbc6f27e9973bc20fa956b83d8f876fd3074b",
        tuple(
            f"benchmarks/multi_node/results/minimax-m2.5/concurrency_{c}_req_rate_inf_gpus_16_ctx_8_gen_8.json"
            for c in CONCURRENCIES
        ),
        {
            **MULTI_NODE_COMMON,
            "model": "MiniMaxAI/MiniMax-M2.5",
            "model_revision": "f710177d938eff80b684d42c5aa84b382612f21f",
            "precision": "fp8",
            "tp": "8",
            "ep": "8",
            "prefill_ep": "8",
            "decode_ep": "8",
            "settings_from": "benchmarks/multi_node/vllm_disagg_utils/{run_P.sh,run_D.sh,models.yaml}, "
            "amd_utils/{server_vllm.sh,bench.sh}, benchmark_lib.sh at 006dbc6f2 "
            "(InferenceX pull request 1208); "
            "model file patched by vllm_disagg_utils/patches/minimax_m2.py",
        },
    ),
)


def git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True).stdout


def fmt(value: float | int | None) -> str:
    return "" if value is None else repr(value)


def tokens(value: float) -> str:
    """A mean length derived from throughputs, to a hundredth of a token (no float noise)."""
    return f"{value:.2f}"


def together_row(data: dict) -> dict[str, str]:
    """A together_runner result: the JSON names its deployment; lengths follow from the throughputs."""
    m = data["metrics"]
    requests = m["request_throughput"]
    conc = int(data["conc"])
    return {
        "source": "",
        "mode": "agg",
        "system": {"b200": "b200_sxm"}[data["hw"]],
        "engine": str(engine_of(data["framework"], field="framework")),
        "engine_version": data["image"].rsplit(":", 1)[1].removeprefix("v"),
        "image": data["image"],
        "model": data["model"],
        "model_revision": "main",
        "tp": str(data["tp"]),
        "ep": str(max(int(data["ep"]), 1)),
        "pp": "1",
        **dict.fromkeys(
            ("prefill_workers", "prefill_tp", "prefill_ep", "decode_workers", "decode_tp", "decode_ep"), ""
        ),
        "isl": str(data["isl"]),
        "osl": str(data["osl"]),
        **TOGETHER_PROFILES[data["profile"]],
        "concurrency": str(conc),
        "num_prompts": str(10 * conc),
        "num_warmups": str(2 * conc),
        "completed": str(m["successful_requests"]),
        "mean_input_tokens": tokens((m["total_token_throughput"] - m["output_token_throughput"]) / requests),
        "mean_output_tokens": tokens(m["output_token_throughput"] / requests),
        "ttft_median_ms": fmt(m["median_ttft_ms"]),
        "tpot_median_ms": fmt(m["median_tpot_ms"]),
        "ttft_mean_ms": "",
        "tpot_mean_ms": "",
        "ttft_p99_ms": fmt(m["p99_ttft_ms"]),
        "tpot_p99_ms": fmt(m["p99_tpot_ms"]),
    }


def bench_serving_row(data: dict) -> dict[str, str]:
    """A benchmark_serving result of the multi-node runs: the deployment comes from the launch scripts."""
    done = data["completed"]
    conc = int(data["max_concurrency"])
    return {
        "concurrency": str(conc),
        "num_prompts": str(data["num_prompts"]),
        "num_warmups": str(2 * conc),
        "completed": str(done),
        "mean_input_tokens": tokens(data["total_input_tokens"] / done),
        "mean_output_tokens": tokens(data["total_output_tokens"] / done),
        "ttft_median_ms": fmt(data["median_ttft_ms"]),
        "tpot_median_ms": fmt(data["median_tpot_ms"]),
        "ttft_mean_ms": fmt(data["mean_ttft_ms"]),
        "tpot_mean_ms": fmt(data["mean_tpot_ms"]),
        "ttft_p99_ms": fmt(data["p99_ttft_ms"]),
        "tpot_p99_ms": fmt(data["p99_tpot_ms"]),
    }


def point(result_set: ResultSet, path: str, data: dict) -> dict[str, str]:
    read = together_row if path.startswith("together_runner/") else bench_serving_row
    row = read(data)
    row.update({k: v for k, v in result_set.settings.items() if k in COLUMNS})
    if row["model_revision"] != "main" and row["model_revision"] not in data.get("model_id", ""):
        raise SystemExit(f"{path}: served {data.get('model_id')}, not revision {row['model_revision']}")
    row["source"] = result_set.source
    row["id"] = f"inferencex@{result_set.commit[:9]}:{path}"
    row["upstream_commit"] = result_set.commit
    row["upstream_path"] = path
    row["file"] = f"inferencex/{result_set.commit[:9]}/{path}"
    missing = [c for c in COLUMNS if c not in row]
    if missing:
        raise SystemExit(f"{row['id']}: no {', '.join(missing)}")
    return {c: row[c] for c in COLUMNS}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inferencex", type=Path, required=True, help="an InferenceX checkout or git directory")
    args = ap.parse_args(argv)
    rows: list[dict[str, str]] = []
    for result_set in RESULT_SETS:
        for path in result_set.paths:
            raw = git(args.inferencex, "show", f"{result_set.commit}:{path}")
            target = OUT / "inferencex" / result_set.commit[:9] / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(raw)
            rows.append(point(result_set, path, json.loads(raw)))
    head = RESULT_SETS[0].commit
    (OUT / "inferencex" / "LICENSE").write_bytes(git(args.inferencex, "show", f"{head}:LICENSE"))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    (OUT / "points.csv").write_text(text.getvalue())
    heldout = sorted(row["id"] for row in rows if fresh_held_out(row))
    (OUT / "heldout.txt").write_text(
        "# Held-out rows of closed_loop_fresh/points.csv (scripts/refresh_closed_loop_fresh.py): their ids.\n"
        f"# Rule: deployment groups whose salted key's SHA-256 starts below "
        f"{FRESH_HELD_OUT_SHARE:.0%} of 2**32.\n" + "".join(f"{i}\n" for i in heldout)
    )
    commits = "\n".join(
        f"- {r.commit} ({r.source}): {len(r.paths)} files, {REPO}/tree/{r.commit}" for r in RESULT_SETS
    )
    (OUT / "UPSTREAM.md").write_text(
        "# Fresh public closed-loop benchmark results (pinned, not yet compared)\n\n"
        "Copied unchanged, each under inferencex/<commit>/<upstream path>, by\n\n"
        "    python scripts/refresh_closed_loop_fresh.py --inferencex PATH\n\n"
        "(its docstring says what was searched, what is kept and why, and the split rule) from\n"
        f"{REPO} (Apache-2.0, inferencex/LICENSE) at:\n\n{commits}\n\n"
        "points.csv: one row per result with the settings needed to replay it (settings_from names the\n"
        "upstream files that say what the result file does not). heldout.txt: the ids of the held-out rows,\n"
        "chosen by the rule before any prediction was compared with them. None has been compared yet.\n"
    )
    print(f"pinned {len(rows)} results; {len(heldout)} held out, into {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
