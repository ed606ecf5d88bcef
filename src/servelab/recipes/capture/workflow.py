"""What InferenceX's multinode workflow (.github/workflows/benchmark-multinode-tmpl.yml) gives a runner's
launcher for one fixed-seq-len disaggregated row: the captures of upstream's multinode scripts start from
it."""

from __future__ import annotations

from pathlib import Path

from servelab.recipes.matrix import arm_settings


def workflow_env(row: dict, workspace: Path, runner_name: str) -> dict[str, str]:
    """What benchmark-multinode-tmpl.yml gives the launcher for this row (its job env, the runner's name and
    type, and the arm's additional-settings), as servelab's srt-slurm capture gives it."""
    p, d = row["prefill"], row["decode"]
    concs = row["conc"] if isinstance(row["conc"], list) else [row["conc"]]
    return {
        "GITHUB_WORKSPACE": str(workspace),
        "RUNNER_NAME": runner_name,
        "RUNNER_TYPE": row["runner"],
        "EXP_NAME": row["exp-name"],
        "IMAGE": row["image"],
        "MODEL_PREFIX": row["model-prefix"],
        "MODEL": row["model"],
        "FRAMEWORK": row["framework"],
        "PRECISION": row["precision"],
        "ISL": str(row.get("isl") or ""),
        "OSL": str(row.get("osl") or ""),
        "MAX_MODEL_LEN": str(row.get("max-model-len") or ""),
        "CONC_LIST": " ".join(map(str, concs)),
        "CONC": str(concs[0]),
        "SPEC_DECODING": row["spec-decoding"],
        "DISAGG": str(row.get("disagg", False)).lower(),
        "RUN_EVAL": "false",
        "EVAL_ONLY": "false",
        "SCENARIO_TYPE": "fixed-seq-len",
        "IS_AGENTIC": "0",
        "IS_MULTINODE": "true",
        "RANDOM_RANGE_RATIO": "0.8",
        "RESULT_FILENAME": f"{row['exp-name']}_{row['precision']}_{row['framework']}",
        "PREFILL_NUM_WORKERS": str(p["num-worker"]),
        "PREFILL_TP": str(p["tp"]),
        "PREFILL_EP": str(p["ep"]),
        "PREFILL_DP_ATTN": str(p["dp-attn"]).lower(),
        "DECODE_NUM_WORKERS": str(d["num-worker"]),
        "DECODE_TP": str(d["tp"]),
        "DECODE_EP": str(d["ep"]),
        "DECODE_DP_ATTN": str(d["dp-attn"]).lower(),
        **arm_settings(row),
    }
