"""Turn scripts/time_vllm_fused_moe.py's CSV (or, with --kernel deepgemm, scripts/time_vllm_deepgemm_moe.py's;
with --kernel marlin, scripts/time_vllm_marlin_moe.py's) into a collector campaign directory for one vLLM
version, ready for `servelab db merge CAMPAIGN --into <root>/<system>/vllm/<version>` (DeepGEMM's:
`<root>/<system>/vllm-deepgemm/<version>`; Marlin's: `<root>/<system>/vllm-marlin/<version>`).

Each table row is one `moe` op (perfdb.keys.Moe: expert compute of one rank, no routing or communication):
latency_us is the gate-up GEMM's median plus the down GEMM's, p10/p90 likewise summed; the two GEMMs, the
kernel config and the launch path ride along in the row's extra. Routing in the timing is uniform, so the rows
are `distribution=uniform`; the shapes are rank-local (inter already split by TP / EP). Rows timed under
expert parallelism (the CSV's `ep` column > 1; a CSV without the column is ep=1) are keyed as perfdb.keys.Moe
reads them: tokens = the EP group's tokens (at TEP every token of the batch), experts = all experts (the rank
holds experts / ep), inter = the rank's width; the local expert count rides along.

With --kernel deepgemm, latency_us is the whole DeepGEMM path (permute, both grouped GEMMs, SiLU-and-mul with
its quantisation, unpermute) replayed from a CUDA graph, as vLLM's decode steps run it; each stage's own
median rides along in the row's extra.

With --kernel marlin, latency_us is the expert compute of vLLM's Marlin MXFP4 path (gpt-oss on Hopper): the
gate-up Marlin GEMM, the SwiGLU and the down Marlin GEMM, each replayed from a CUDA graph, summed (p10/p90
likewise). The path's routing (top-k softmax, block alignment), the activations' padding and the top-k sum
are left out: the step's graph prices them as moe_route, moe_permute and moe_combine. Each stage's median,
the whole layer from one CUDA graph (moe_graph_us) and its host time ride along in the row's extra.

    python scripts/vllm_moe_campaign.py --csv moe_vllm.csv [more.csv ...] --env env.txt \
        --vllm-version 0.12.0 --date 2026-12-01 --command "..." --out campaigns/h200_sxm_vllm_moe_0.12.0 \
        [--kernel deepgemm|marlin]
"""

import argparse
import csv
import json
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

DEEPGEMM_STAGES = ("permute", "gate_up", "act_quant", "down", "unpermute", "moe", "moe_graph")
# the Marlin path's stages from a CUDA graph: the expert compute (summed into latency_us), then the rest
MARLIN_EXPERT_STAGES = ("gate_up_graph", "act_graph", "down_graph")
MARLIN_OTHER_STAGES = ("pad_graph", "routing_graph", "align_graph", "sum_graph", "moe_graph", "moe_host")
# per collector: the quantisation of the experts its shapes stand for (servelab's dtype names), and what it
# timed for the campaign's provenance
KERNELS = {
    "triton": {
        "dtype": "fp8_block",
        "kernel": "fused_moe_kernel from vllm/model_executor/layers/fused_moe/fused_moe.py of the vLLM {v} "
        "wheel (PyPI), with that wheel's tuned {gpu} configs and default-config rule; moe_align_block_size "
        "and the activation quantisation done in torch outside the timed region",
        "not_timed": "SiLU-and-mul, its FP8 quantisation and the top-k sum (vLLM C++ kernels)",
    },
    "deepgemm": {
        "dtype": "fp8_block",
        "kernel": "DeepGemmExperts of vllm/model_executor/layers/fused_moe/deep_gemm_moe.py (vLLM {v}): "
        "DeepGEMM's m_grouped_fp8_gemm_nt_contiguous for both GEMMs on vLLM's M_sum = round_up(tokens x "
        "top-k + experts x 127, 128) rows, vLLM's Triton ep_scatter / ep_gather from deep_gemm_utils.py, "
        "SiLU-and-mul with per-token-group FP8 quantisation in one Triton kernel written for the timing "
        "(vLLM runs two CUDA kernels there); the whole path replayed from a CUDA graph",
        "not_timed": "the second pass over the bf16 activation that vLLM's separate silu_and_mul and "
        "per_token_group_fp8_quant kernels make (M_sum x inter x 2 bytes written and read)",
    },
    "marlin": {
        "dtype": "mxfp4",
        "kernel": "vLLM's Marlin MXFP4 MoE path (fused_marlin_moe, VLLM_MXFP4_USE_MARLIN=1 on Hopper): "
        "moe_wna16_marlin_gemm, moe_align_block_size, topk_softmax and moe_sum from the _moe_C library of "
        "the vLLM {v} wheel (PyPI, vllm/_moe_C_stable_libtorch.abi3.so), called as fused_marlin_moe calls "
        "them on gpt-oss-120b's experts (hidden padded to 3072, intermediate per rank to a multiple of 128); "
        "latency: gate-up GEMM + SwiGLU + down GEMM, each from a CUDA graph",
        "not_timed": "vLLM's swigluoai_and_mul CUDA kernel (in its _C library, not carried): the SwiGLU is "
        "one Triton kernel with the same math",
    },
}

# how the Triton rows at ep > 1 were timed (scripts/time_vllm_fused_moe.py --ep): vLLM's TEP, rank 0
TRITON_EP = (
    "rank 0 of vLLM's --enable-expert-parallel without DP attention: experts / ep local experts split "
    "tp / ep ways, every token of the batch, uniform top-k over all experts; moe_align_block_size over the "
    "global experts with the linear expert map (other ranks' blocks: expert id -1, fused_moe_kernel writes "
    "their rows zero); tuned config file and default config by the local E and N"
)


def read_env(path: Path) -> dict:
    """GPU, driver, clocks and library versions from the device run's env.txt (nvidia-smi CSV and a line of
    `name version` pairs)."""
    lines = [ln.strip() for ln in path.read_text().splitlines() if ln.strip()]
    header = [h.strip() for h in lines[0].split(",")]
    values = [v.strip() for v in lines[1].split(",")]
    smi = dict(zip(header, values, strict=True))
    words = lines[2].split()
    libs = dict(zip(words[::2], words[1::2], strict=True))
    idle = smi.get("clocks.current.sm [MHz]")
    clocks = f"max SM clock {smi['clocks.max.sm [MHz]']}"
    clocks += f", SM clock idle before the run {idle}" if idle else ""
    return {
        "gpu_name": smi["name"],
        "driver": smi["driver_version"],
        "clocks": f"{clocks} (clocks left to the driver)",
        **{k: v for k, v in libs.items() if k in ("torch", "triton", "cuda", "deep_gemm")},
    }


def moe_row(tokens: int, hidden: int, inter: int, experts: int, topk: int, ep: int, dtype: str) -> dict:
    """The key columns of one timed `moe` op (uniform routing, one repetition per row)."""
    return {
        "op": "moe",
        "tokens": tokens,
        "hidden": hidden,
        "inter": inter,
        "experts": experts,
        "topk": topk,
        "ep": ep,
        "dtype": dtype,
        "distribution": "uniform",
        "reps": 1,
    }


def grouped(
    csv_paths: list[Path], version: str, key: Callable[[dict], tuple], part: str
) -> dict[tuple, dict]:
    """The CSVs' rows of one vLLM version, grouped by key(row), each group's rows by their `part` column."""
    groups: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for csv_path in csv_paths:
        with csv_path.open() as fh:
            for r in csv.DictReader(fh):
                if r["vllm"] == version:
                    groups[key(r)][r[part]] = r
    return groups


def _names(paths: list[Path]) -> str:
    return ", ".join(str(p) for p in paths)


def _ep(r: dict) -> int:
    return int(r.get("ep") or 1)


def _shape(r: dict) -> tuple[int, ...]:
    return tuple(int(r[c]) for c in ("experts", "topk", "hidden", "inter", "tokens"))


def campaign_rows(csv_paths: list[Path], version: str) -> list[dict]:
    gemms = grouped(csv_paths, version, lambda r: (r["model"], int(r["tp"]), _ep(r), *_shape(r)), "gemm")
    rows = []
    for (model, tp, ep, experts, topk, hidden, inter, tokens), g in sorted(gemms.items()):
        if set(g) != {"gate_up", "down"}:
            sys.exit(f"{_names(csv_paths)}: {model} tp{tp} ep{ep} tokens={tokens} lacks one of the two GEMMs")
        up, down = g["gate_up"], g["down"]
        total = {c: round(float(up[c]) + float(down[c]), 3) for c in ("latency_us", "p10_us", "p90_us")}

        rows.append(
            {
                **moe_row(tokens, hidden, inter, experts, topk, ep, KERNELS["triton"]["dtype"]),
                **total,
                "backend": "vllm fused_moe_kernel (Triton, block-FP8 w8a8)",
                "model": model,
                "tp": tp,
                "gate_up_us": float(up["latency_us"]),
                "down_us": float(down["latency_us"]),
                "config_file": up["config_file"],
                "config": json.loads(up["config"]),
                "path": up["path"],
                "routing": "uniform",
                "timing": "triton.testing.do_bench, L2 flushed",
                **({"local_experts": int(up["local_experts"])} if ep > 1 else {}),
            }
        )
    if not rows:
        sys.exit(f"{_names(csv_paths)}: no rows for vLLM {version}")
    return rows


def staged_rows(
    csv_paths: list[Path], version: str, kernel: str, stages: tuple[str, ...], summed: tuple[str, ...], extra
) -> list[dict]:
    """The table rows of a collector that times a path stage by stage (one CSV row per TP x EP x tokens x
    stage): a row's latency_us is the sum of the `summed` stages' medians (p10 / p90 likewise), every stage's
    median rides along (but a lone summed stage, which is latency_us itself), and extra(the whole path's CSV
    row) adds the collector's own columns."""
    groups = grouped(csv_paths, version, lambda r: (int(r["tp"]), _ep(r), *_shape(r)), "stage")
    rows = []
    for (tp, ep, experts, topk, hidden, inter, tokens), st in sorted(groups.items()):
        missing = set(stages) - set(st)
        if missing:
            lacking = ", ".join(sorted(missing))
            sys.exit(f"{_names(csv_paths)}: tp{tp} ep{ep} tokens={tokens} lacks stage(s) {lacking}")
        rows.append(
            {
                **moe_row(tokens, hidden, inter, experts, topk, ep, KERNELS[kernel]["dtype"]),
                **{
                    c: round(sum(float(st[s][c]) for s in summed), 3)
                    for c in ("latency_us", "p10_us", "p90_us")
                },
                "tp": tp,
                **extra(st["moe_graph"]),
                **{f"{s}_us": float(st[s]["latency_us"]) for s in stages if (s,) != summed},
                "check_rel_err": next((st[s]["check_rel_err"] for s in st if st[s]["check_rel_err"]), ""),
                "routing": "uniform",
            }
        )
    if not rows:
        sys.exit(f"{_names(csv_paths)}: no rows for vLLM {version}")
    return rows


def deepgemm_rows(csv_paths: list[Path], version: str) -> list[dict]:
    return staged_rows(
        csv_paths,
        version,
        "deepgemm",
        DEEPGEMM_STAGES,
        ("moe_graph",),
        lambda whole: {
            "backend": "vllm DeepGemmExperts (DeepGEMM grouped GEMM, block-FP8 w8a8)",
            "m_sum": int(whole["m_sum"]),
            "timing": "triton.testing.do_bench, L2 flushed; latency: the whole path from a CUDA graph",
        },
    )


def marlin_rows(csv_paths: list[Path], version: str) -> list[dict]:
    return staged_rows(
        csv_paths,
        version,
        "marlin",
        MARLIN_EXPERT_STAGES + MARLIN_OTHER_STAGES,
        MARLIN_EXPERT_STAGES,
        lambda whole: {
            "backend": "vllm MarlinExperts (Marlin W4A16 grouped GEMM, MXFP4 weights, bf16 activations)",
            **{c: int(whole[c]) for c in ("hidden_padded", "inter_padded", "block_size_m")},
            "timing": "triton.testing.do_bench, L2 flushed; latency: gate_up + act + down, each graphed",
        },
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", required=True, type=Path, nargs="+", help="one or more CSVs of one collector")
    ap.add_argument("--env", required=True, type=Path)
    ap.add_argument("--vllm-version", required=True)
    ap.add_argument("--date", required=True, help="the day the device run was made (ISO)")
    ap.add_argument("--command", required=True, help="the command the device ran")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--kernel", choices=list(KERNELS), default="triton", help="which collector wrote --csv")
    ap.add_argument("--deepgemm-commit", help="the DeepGEMM commit that was built (--kernel deepgemm)")
    args = ap.parse_args()
    if args.kernel == "deepgemm":
        if not args.deepgemm_commit:
            sys.exit("--deepgemm-commit: required with --kernel deepgemm")
        rows = deepgemm_rows(args.csv, args.vllm_version)
    elif args.kernel == "marlin":
        rows = marlin_rows(args.csv, args.vllm_version)
    else:
        rows = campaign_rows(args.csv, args.vllm_version)
    env = read_env(args.env)
    # the tuned config files are the GPU's own (vLLM picks them by device name; H200 variants share one)
    gpu = "H200" if "H200" in env["gpu_name"] else env["gpu_name"]
    prov = {
        **env,
        "date": args.date,
        "command": args.command,
        "gpu_count": 1,
        "vllm": args.vllm_version,
        **{
            k: v.format(v=args.vllm_version, gpu=gpu) for k, v in KERNELS[args.kernel].items() if k != "dtype"
        },
    }
    if args.deepgemm_commit:
        prov["deepgemm_commit"] = args.deepgemm_commit
    if args.kernel == "triton" and any(r["ep"] > 1 for r in rows):
        prov["expert_parallel"] = TRITON_EP
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "provenance.json").write_text(json.dumps(prov, indent=1, sort_keys=True) + "\n")
    (args.out / "rows").mkdir(exist_ok=True)
    with (args.out / "rows" / "moe.jsonl").open("w") as fh:
        for r in rows:
            fh.write(json.dumps(r, sort_keys=True) + "\n")
    print(f"{args.out}: {len(rows)} moe rows of vLLM {args.vllm_version}")


if __name__ == "__main__":
    main()
