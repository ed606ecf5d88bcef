"""Regenerate src/servelab/calibrate/data/inferencex_recipes.json: the engine settings InferenceX's recipe
scripts set on each date, for the calibration rows InferenceX measured.

    python scripts/inferencex_recipes.py --git-dir PATH/TO/InferenceX/.git [--out FILE]

Every version of each recipe script (following it through its renames) is read with `git show`; the
settings that shape scheduling are parsed from its text; consecutive versions with equal settings merge into
one date range [from, until). A setting written in a form this script does not know stops it with the
version and line, rather than guessing. InferenceX is Apache-2.0; only settings (facts) are recorded.
"""

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

OUT = (
    Path(__file__).resolve().parent.parent
    / "src"
    / "servelab"
    / "calibrate"
    / "data"
    / "inferencex_recipes.json"
)
# (engine, servelab model names, servelab system, the recipe script's paths over time, oldest first)
RECIPES = [
    (
        "trtllm",
        ["deepseek-r1", "deepseek-v3"],  # a database dump names InferenceX's DeepSeek-R1 runs DeepSeek-V3
        "h200_sxm",
        [
            "benchmarks/dsr1_fp8_h200_trt_slurm.sh",
            "benchmarks/dsr1_fp8_h200_trt.sh",
            "benchmarks/single_node/dsr1_fp8_h200_trt.sh",
        ],
    ),
    (
        "trtllm",
        ["gpt-oss-120b"],
        "h200_sxm",
        [
            "benchmarks/gptoss_fp4_h200_trt_slurm.sh",
            "benchmarks/gptoss_fp4_h200_trt.sh",
            "benchmarks/single_node/gptoss_fp4_h200_trt.sh",
        ],
    ),
    ("trtllm", ["llama-3.1-70b"], "h200_sxm", ["benchmarks/70b_fp8_h200_trt_slurm.sh"]),
]


def git(git_dir: str, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", git_dir, *args], capture_output=True, text=True, check=True
    ).stdout


def versions(git_dir: str, path: str) -> list[tuple[str, str, str]]:
    """(commit, date, text) of every version of `path` on HEAD's history that has the file, oldest first."""
    out = []
    for line in git(git_dir, "log", "--format=%H %cs", "HEAD", "--", path).splitlines():
        commit, date = line.split()
        shown = subprocess.run(
            ["git", "--git-dir", git_dir, "show", f"{commit}:{path}"], capture_output=True, text=True
        )
        if shown.returncode == 0 and shown.stdout.strip():
            out.append((commit, date, shown.stdout))
    return sorted(out, key=lambda v: v[1])


def _block_value(text: str, block: str, key: str) -> str | None:
    """`key: value` inside a YAML block `block:` of the heredoc config the script writes."""
    m = re.search(rf"^\s*{block}:\s*\n((?:[ \t]+\S.*\n)+)", text, re.M)
    if not m:
        return None
    v = re.search(rf"^\s*{key}:\s*(\S+)", m.group(1), re.M)
    return v.group(1) if v else None


def _count(value: str | None, where: str) -> int | str | None:
    """An integer setting, or "conc" where the script writes the client concurrency."""
    if value is None:
        return None
    if value in ("$CONC", "${CONC}"):
        return "conc"
    if value.isdigit():
        return int(value)
    raise SystemExit(f"{where}: cannot read {value!r} as a count")


def max_num_tokens(text: str, where: str) -> dict | None:
    lines = [ln for ln in text.splitlines() if "EVAL" not in ln]  # eval-only runs override it
    body = "\n".join(lines)
    m = re.search(r"--max_num_tokens[ =](\S+)", body)
    if not m:
        return None
    value = m.group(1)
    if value.isdigit():
        return {"fixed": int(value)}
    if value == "$MAX_MODEL_LEN":  # the job's context length, which the rows do not record: not priced
        return {"variable": "MAX_MODEL_LEN"}
    if value != "$MAX_NUM_TOKENS":
        raise SystemExit(f"{where}: --max_num_tokens {value} is not a form this script reads")
    squeezed = body.replace(" ", "").replace("$", "")
    rule = re.search(r"MAX_NUM_TOKENS=\(\(\(CONC\+ISL\+(\d+)\+(\d+)\)/(\d+)\*\3\)\)", squeezed)
    fixed = re.search(r"MAX_NUM_TOKENS=(\d+)\n", squeezed + "\n")
    if rule and int(rule.group(2)) == int(rule.group(3)) - 1:
        floor = re.search(r"MAX_NUM_TOKENS=\(\(MAX_NUM_TOKENS>(\d+)\?MAX_NUM_TOKENS:\1\)\)", squeezed)
        return {
            "conc_plus_isl_plus": int(rule.group(1)),
            "round_up_to": int(rule.group(3)),
            "at_least": int(floor.group(1)) if floor else None,
        }
    if fixed:
        return {"fixed": int(fixed.group(1))}
    raise SystemExit(f"{where}: MAX_NUM_TOKENS is set in a form this script does not read")


def batch_wait(text: str, where: str) -> dict | None:
    timeout = re.search(r"batch_wait_timeout_iters:\s*(\d+)", text)
    ratio = re.search(r"batch_wait_max_tokens_ratio:\s*([\d.]+)", text)
    if not (timeout and ratio):
        return None
    when = re.search(r'if \[\[ "\$ISL" == "(\d+)" && "\$OSL" == "(\d+)" && \$\{TP\} -lt (\d+) \]\]', text)
    if not when:
        raise SystemExit(f"{where}: batch wait set under a condition this script does not read")
    return {
        "timeout_iters": int(timeout.group(1)),
        "max_tokens_ratio": float(ratio.group(1)),
        "when": {"isl": int(when.group(1)), "osl": int(when.group(2)), "tp_below": int(when.group(3))},
    }


def settings(text: str, where: str) -> dict:
    """The scheduling settings one version of a recipe script sets (None: the engine's default)."""
    text = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))  # comments
    fraction = re.search(r"free_gpu_memory_fraction:\s*([\d.]+)", text)
    balance = None
    if re.search(r"enable_balance:\s*true", text):
        timeout = re.search(r"timeout_iters:\s*(\d+)", text)
        wait = re.search(r"batching_wait_iters:\s*(\d+)", text)
        balance = {
            "timeout_iters": int(timeout.group(1)) if timeout else None,
            "batching_wait_iters": int(wait.group(1)) if wait else None,
        }
    engine_batch = re.search(r"--max_batch_size[ =](\S+)", text)
    moe = _block_value(text, "moe_config", "backend")
    if moe and moe.startswith("$"):
        named = re.search(rf'^{moe[1:]}="?(\w+)"?', text, re.M)
        moe = named.group(1) if named else moe
    stream = re.search(r"stream_interval:\s*(\d+)", text)
    return {
        "max_num_tokens": max_num_tokens(text, where),
        "kv_memory_fraction": float(fraction.group(1)) if fraction else None,
        "max_batch_size": _count(engine_batch.group(1) if engine_batch else None, where),
        "cuda_graph_max_batch": _count(_block_value(text, "cuda_graph_config", "max_batch_size"), where),
        "kv_cache_dtype": _block_value(text, "kv_cache_config", "dtype"),
        "attention_dp_balance": balance,
        "batch_wait": batch_wait(text, where),
        "stream_interval": int(stream.group(1)) if stream else None,
        "moe_backend": moe,
    }


def ranges(git_dir: str, paths: list[str]) -> list[dict]:
    """Date ranges of equal settings over every version of the script's paths."""
    out: list[dict] = []
    for path in paths:
        for commit, date, text in versions(git_dir, path):
            found = settings(text, f"{path}@{commit[:9]}")
            if out and out[-1]["settings"] == found:
                out[-1]["commits"].append(commit)
                if path not in out[-1]["files"]:
                    out[-1]["files"].append(path)
                continue
            if out:
                out[-1]["until"] = date
            out.append({"from": date, "until": None, "files": [path], "commits": [commit], "settings": found})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--git-dir", required=True, help="an InferenceX clone's .git (or a bare mirror)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    head = git(args.git_dir, "rev-parse", "HEAD").strip()
    table = []
    for engine, models, system, paths in RECIPES:
        for r in ranges(args.git_dir, paths):
            table.append({"engine": engine, "models": models, "system": system, **r})
    doc = {
        "_provenance": (
            "scripts/inferencex_recipes.py from SemiAnalysisAI/InferenceX (Apache-2.0) at "
            f"{head}: the settings each recipe script set, per date range [from, until) of its versions"
        ),
        "inferencex_head": head,
        "recipes": table,
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}: {len(table)} ranges", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
