"""Regenerate src/servelab/calibrate/data/inferencex_recipes.json: the engine settings InferenceX's recipe
scripts set on each date, for the calibration rows InferenceX measured.

    python scripts/inferencex_recipes.py --git-dir PATH/TO/InferenceX/.git [--out FILE]

Every version of each recipe script (following it through its renames) is read with `git show`; the
settings that shape scheduling are parsed from its text, in the engine's own words (TensorRT-LLM's extra
config and flags, SGLang's and vLLM's flags and vLLM's config.yaml); consecutive versions with equal settings
merge into one date range [from, until) of UTC commit dates, listing each version's commit, date and file. A
launch chosen by an `if` on the input and output lengths becomes {"when": {"isl": I, "osl": O}, "then": A,
"else": B} for the settings that differ. A setting written in a form this script does not know stops it with
the version, rather than guessing.
InferenceX is Apache-2.0; only settings (facts) are recorded.
"""

import argparse
import json
import re
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src/servelab/calibrate/data/inferencex_recipes.json"
# (engine, servelab model names, servelab system, the recipe script's paths over time, oldest first), and the
# precision of the rows it ran where one system has a script per precision (None: every row)
RECIPES: list[tuple[str, list[str], str, list[str], str | None]] = [
    (
        "trtllm",
        ["deepseek-r1", "deepseek-v3"],  # a database dump names InferenceX's DeepSeek-R1 runs DeepSeek-V3
        "h200_sxm",
        [
            "benchmarks/dsr1_fp8_h200_trt_slurm.sh",
            "benchmarks/dsr1_fp8_h200_trt.sh",
            "benchmarks/single_node/dsr1_fp8_h200_trt.sh",
            "benchmarks/single_node/fixed_seq_len/dsr1_fp8_h200_trt.sh",
        ],
        None,
    ),
    (
        "trtllm",
        ["gpt-oss-120b"],
        "h200_sxm",
        [
            "benchmarks/gptoss_fp4_h200_trt_slurm.sh",
            "benchmarks/gptoss_fp4_h200_trt.sh",
            "benchmarks/single_node/gptoss_fp4_h200_trt.sh",
            "benchmarks/single_node/fixed_seq_len/gptoss_fp4_h200_trt.sh",
            "benchmarks/single_node/fixed_seq_len/deprecated/gptoss_fp4_h200_trt.sh",
        ],
        None,
    ),
    ("trtllm", ["llama-3.1-70b"], "h200_sxm", ["benchmarks/70b_fp8_h200_trt_slurm.sh"], None),
    (
        "sglang",
        ["deepseek-r1", "deepseek-v3"],
        "h200_sxm",
        [
            "benchmarks/dsr1_fp8_h200_slurm.sh",
            "benchmarks/dsr1_fp8_h200.sh",
            "benchmarks/single_node/dsr1_fp8_h200.sh",
            "benchmarks/single_node/fixed_seq_len/dsr1_fp8_h200.sh",
        ],
        None,
    ),
    (
        "vllm",
        ["gpt-oss-120b"],
        "h200_sxm",
        [
            "benchmarks/gptoss_fp4_h200_slurm.sh",
            "benchmarks/gptoss_fp4_h200.sh",
            "benchmarks/single_node/gptoss_fp4_h200.sh",
            "benchmarks/single_node/fixed_seq_len/gptoss_fp4_h200.sh",
            "benchmarks/single_node/fixed_seq_len/deprecated/gptoss_fp4_h200.sh",
        ],
        None,
    ),
    ("vllm", ["llama-3.1-70b"], "h200_sxm", ["benchmarks/70b_fp8_h200_slurm.sh"], None),
]
# Llama-3.3-70B on vLLM on B200: one docker script per precision (the B200 runners of those days ran a vLLM
# job by `benchmarks/70b_{precision}_b200_docker.sh`, the only vLLM script for that GPU: runners/launch_b200-
# nvd.sh and launch_b200-tg.sh; launch_b200-nb.sh and -nv.sh name a _slurm.sh that vLLM never had there)
RECIPES += [
    ("vllm", ["llama-3.1-70b"], "b200_sxm", [f"benchmarks/70b_{precision}_b200_docker.sh"], precision)
    for precision in ("fp8", "fp4")
]
# gpt-oss-120b on vLLM, B200 and H100: from the one script per GPU of 2026-01-22 (InferenceX b0c4ed21b merged
# each GPU's _docker.sh and _slurm.sh, which ran side by side and differed); rows before it keep the defaults
RECIPES += [
    (
        "vllm",
        ["gpt-oss-120b"],
        f"{gpu}_sxm",
        [
            f"benchmarks/{where}gptoss_fp4_{gpu}.sh"
            for where in (
                "",
                "single_node/",
                "single_node/fixed_seq_len/",
                "single_node/fixed_seq_len/deprecated/",
            )
        ],
        None,
    )
    for gpu in ("b200", "h100")
]
# MiniMax-M2.5 on vLLM: one script per GPU and precision (fp8: MiniMaxAI's FP8 checkpoint; fp4: the NVFP4 runs
# of the same model), moved twice (fixed_seq_len/ on 2026-06-02, deprecated/ on 2026-06-20)
RECIPES += [
    (
        "vllm",
        ["minimax-m2.5"],
        f"{gpu}_sxm",
        [
            f"benchmarks/single_node/{where}minimaxm2.5_{precision}_{gpu}.sh"
            for where in ("", "fixed_seq_len/", "fixed_seq_len/deprecated/")
        ],
        precision,
    )
    for gpu, precision in (
        ("h100", "fp8"),
        ("h200", "fp8"),
        ("b200", "fp8"),
        ("b200", "fp4"),
        ("b300", "fp8"),
        ("b300", "fp4"),
    )
] + [
    # Kimi-K2.5: Moonshot's INT4 checkpoint (rows of precision int4) and NVIDIA's NVFP4 one (fp4)
    (
        "vllm",
        ["kimi-k2.5"],
        f"{gpu}_sxm",
        [
            f"benchmarks/single_node/{where}kimik2.5_{precision}_{gpu}.sh"
            for where in ("", "fixed_seq_len/", "fixed_seq_len/deprecated/")
        ],
        precision,
    )
    for gpu, precision in (("h200", "int4"), ("b200", "int4"), ("b200", "fp4"), ("b300", "fp4"))
]

# GLM-5 on SGLang: one script per GPU and precision (fp8: zai-org/GLM-5-FP8; fp4: nvidia/GLM-5-NVFP4, its
# script renamed from nvfp4 to fp4 on 2026-04-02), moved like MiniMax's. B300's script came on 2026-04-17
# (#1051), after the B300 rows were measured (2026-04-03, from a branch): those rows keep SGLang's defaults
RECIPES += [
    (
        "sglang",
        ["glm-5"],
        f"{gpu}_sxm",
        [
            f"benchmarks/single_node/{where}glm5_{name}_{gpu}.sh"
            for name in names
            for where in ("", "fixed_seq_len/", "fixed_seq_len/deprecated/")
        ],
        precision,
    )
    for gpu, precision, names in (
        ("h200", "fp8", ("fp8",)),
        ("b200", "fp8", ("fp8",)),
        ("b200", "fp4", ("nvfp4", "fp4")),
    )
]


# Qwen3.5-397B-A17B on SGLang: one script per GPU and precision (fp8: Qwen/Qwen3.5-397B-A17B-FP8; fp4:
# nvidia/Qwen3.5-397B-A17B-NVFP4; bf16: Qwen/Qwen3.5-397B-A17B, its scripts deprecated since), moved like
# GLM-5's
RECIPES += [
    (
        "sglang",
        ["qwen3.5-397b-a17b"],
        f"{gpu}_sxm",
        [
            f"benchmarks/single_node/{where}qwen3.5_{precision}_{gpu}.sh"
            for where in ("", "fixed_seq_len/", "fixed_seq_len/deprecated/")
        ],
        precision,
    )
    for gpu, precision in (
        ("h200", "fp8"),
        ("b200", "fp8"),
        ("b200", "fp4"),
        ("b200", "bf16"),
        ("b300", "fp8"),
        ("b300", "fp4"),
        ("b300", "bf16"),
    )
]


def git(git_dir: str, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", git_dir, *args], capture_output=True, text=True, check=True
    ).stdout


def versions(git_dir: str, path: str) -> list[tuple[str, str, str]]:
    """(commit, UTC date, text) of every version of `path` on HEAD's history that has the file, in commit time
    order (rows carry UTC timestamps; two versions of one day keep their order)."""
    out = []
    for line in git(git_dir, "log", "--format=%H %ct", "HEAD", "--", path).splitlines():
        commit, stamp = line.split()
        shown = subprocess.run(
            ["git", "--git-dir", git_dir, "show", f"{commit}:{path}"], capture_output=True, text=True
        )
        if shown.returncode == 0 and shown.stdout.strip():
            out.append((int(stamp), commit, shown.stdout))
    return [(commit, _utc_date(stamp), text) for stamp, commit, text in sorted(out)]


def _utc_date(stamp: int) -> str:
    return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d")


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


def trtllm_settings(text: str, where: str) -> dict:
    """The scheduling settings a TensorRT-LLM recipe script sets (None: the engine's default)."""
    text = _uncommented(text)
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


def _uncommented(text: str) -> str:
    return "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))


def _logical_lines(text: str) -> list[str]:
    """The script's lines without comments, backslash continuations joined."""
    return _uncommented(text).replace("\\\n", " ").splitlines()


def _condition(test: str, where: str) -> dict:
    """{"isl": I, "osl": O} from `[[ $ISL -eq I && $OSL -eq O ]]` (or `[ "$ISL" = "I" ] && [ ... ]`)."""
    when = {}
    for part in test.replace("[", " ").replace("]", " ").split("&&"):
        m = re.fullmatch(r'\s*"?\$\{?(ISL|OSL)\}?"?\s*(?:-eq|==|=)\s*"?(\d+)"?\s*', part)
        if not m:
            raise SystemExit(f"{where}: launch chosen by `if {test}`, a condition this script does not read")
        when[m.group(1).lower()] = int(m.group(2))
    return when


def launches(text: str, command: str, where: str) -> list[tuple[dict | None, bool, list[str]]]:
    """Each launch of `command` (a regex) as (the `if` condition it sits under or None, True in the `then`
    branch, its argv up to the first redirect). One launch, or one per branch of a single `if` on the input
    and output lengths; any other arrangement stops the script."""
    found, stack = [], []  # stack: [condition text, in else branch] of each open `if`
    for line in _logical_lines(text):
        word = line.strip()
        if re.match(r"if\b.*\bfi\s*$", word):  # a one-line if
            pass
        elif m := re.match(r"if (.*?);?\s*then\s*$", word):
            stack.append([m.group(1), False])
        elif word.startswith("elif ") and stack:
            stack[-1][0] = None  # a launch under elif is not a form this script reads
        elif word == "else" and stack:
            stack[-1][1] = True
        elif word == "fi" and stack:
            stack.pop()
        if not re.search(command, word):
            continue
        if len(stack) > 1 or (stack and stack[-1][0] is None):
            raise SystemExit(
                f"{where}: a launch under nested `if` or `elif`, which this script does not read"
            )
        argv = []
        for token in shlex.split(word[re.search(command, word).start() :]):
            if token[0] in "&|>" or token.startswith("2>"):
                break
            argv.append(token)
        cond = _condition(stack[-1][0], where) if stack else None
        found.append((cond, not (stack and stack[-1][1]), argv))
    shapes = [(c is not None, then) for c, then, _ in found]
    if shapes not in ([], [(False, True)], [(True, True), (True, False)]):
        raise SystemExit(f"{where}: {len(found)} launches arranged in a way this script does not read")
    return found


def flags(argv: list[str]) -> dict[str, list[str]]:
    """`--name value...`, `--name=value` and bare `--switch` ([]) of an argv, names with dashes."""
    out: dict[str, list[str]] = {}
    name = None
    for token in argv:
        if token.startswith("--"):
            name, _, value = token[2:].partition("=")
            out[name] = [value] if value else []
        elif name is not None:
            out[name].append(token)
    return out


def _word(raw: str) -> int | float | bool | str:
    """A recorded value: "conc" for the client concurrency, a number, a switch, or the text."""
    if raw in ("$CONC", "${CONC}"):
        return "conc"
    if re.fullmatch(r"\d+", raw):
        return int(raw)
    if re.fullmatch(r"\d*\.\d+", raw):
        return float(raw)
    return {"true": True, "false": False}.get(raw.lower(), raw)


# a job-level shell variable other than the client concurrency, `$NAME` or `${NAME}`
JOB_VARIABLE = re.compile(r"\$(?!\{?CONC\b)\{?[A-Z_][A-Z0-9_]*\}?")
# a count written as a multiple of the job's input length, `$((ISL * 2 ))`
ISL_TIMES = re.compile(r"\$\(\(\s*\$?\{?ISL\}?\s*\*\s*(\d+)\s*\)\)")
# a count written as a multiple of the client concurrency, `$((CONC * 2))` (the CUDA-graph capture size of
# Kimi-K2.5's FP4 scripts from InferenceX 9607d7071)
CONC_TIMES = re.compile(r"\$\(\(\s*\$?\{?CONC\}?\s*\*\s*(\d+)\s*\)\)")


def _typed(raw: str | None, kind: type, where: str, name: str) -> int | float | str | dict | None:
    """A priced setting: an int (or "conc", {"isl_times": k} for k x the input length, {"conc_times": k} for
    k x the client concurrency) or a float; any other form stops the script."""
    if raw is None:
        return None
    if kind is int and (m := ISL_TIMES.fullmatch(raw)):
        return {"isl_times": int(m.group(1))}
    if kind is int and (m := CONC_TIMES.fullmatch(raw)):
        return {"conc_times": int(m.group(1))}
    value = _word(raw)
    if kind is int and (value == "conc" or type(value) is int):
        return value
    if kind is float and type(value) in (int, float):
        return float(value)
    raise SystemExit(f"{where}: cannot read --{name} {raw} as {'a count' if kind is int else 'a number'}")


def _branched(per_launch: list[tuple[dict | None, dict]]) -> dict:
    """One settings dict from each launch's: a value the branches differ on becomes {when, then, else}."""
    if not per_launch:
        return {}
    if len(per_launch) == 1:
        return per_launch[0][1]
    (when, then), (_, other) = per_launch
    return {
        k: then[k] if then[k] == other[k] else {"when": when, "then": then[k], "else": other[k]} for k in then
    }


# SGLang flags: priced (name -> type), recorded as written, and those that would change what the simulator
# prices but are not mapped (a recipe setting them stops the script)
SGLANG_PRICED = {
    "chunked-prefill-size": int,
    "max-prefill-tokens": int,
    "max-running-requests": int,
    "cuda-graph-max-bs": int,
    "mem-fraction-static": float,
}
SGLANG_RECORDED = ("stream-interval", "attention-backend", "disable-radix-cache", "enable-dp-attention")
# the recurrent state's format of a linear-attention model (Qwen3.5: --mamba-ssm-dtype bfloat16)
SGLANG_STATE_DTYPE = "mamba-ssm-dtype"
SGLANG_UNMAPPED = ("enable-mixed-chunk", "speculative-algorithm", "enable-dp-lm-head")


# `NAME=VALUE` on a line of its own: a shell assignment
ASSIGNMENT = re.compile(r"([A-Z_][A-Z0-9_]*)=(\S+)")


def script_constants(text: str) -> dict[str, str]:
    """The script's variables assigned once, outside any `if`, to a literal or $CONC (Qwen3.5's SGLang
    scripts write `CHUNKED_PREFILL_SIZE=32768` and launch with
    `--chunked-prefill-size $CHUNKED_PREFILL_SIZE`); a variable assigned twice, or inside an `if`, is left
    as written (and stops the script where a priced flag reads it)."""
    found: dict[str, str | None] = {}
    depth = 0
    for line in _logical_lines(text):
        word = line.strip()
        if re.match(r"if\b.*\bfi\s*$", word):
            continue
        if word.startswith("if "):
            depth += 1
        elif word == "fi":
            depth -= 1
        elif m := ASSIGNMENT.fullmatch(word):
            name, value = m.groups()
            literal = re.fullmatch(r"[\w.]+", value) or value in ("$CONC", "${CONC}")
            found[name] = value if depth == 0 and literal and name not in found else None
    return {name: value for name, value in found.items() if value is not None}


def _substituted(token: str, constants: dict[str, str]) -> str:
    """A launch argument with a script constant in place of `$NAME` or `${NAME}`."""
    m = re.fullmatch(r"\$\{?([A-Z_][A-Z0-9_]*)\}?", token)
    return constants.get(m.group(1), token) if m else token


def sglang_settings(text: str, where: str) -> dict:
    """The settings of a recipe's `python -m sglang.launch_server` (per branch of an `if` on ISL/OSL)."""
    per_launch = []
    constants = script_constants(text)
    for when, _, argv in launches(text, r"sglang\.launch_server|sglang serve", where):
        f = flags([_substituted(token, constants) for token in argv])
        if unmapped := [n for n in SGLANG_UNMAPPED if n in f]:
            raise SystemExit(f"{where}: --{unmapped[0]} changes scheduling and is not mapped by this script")
        found = {
            n.replace("-", "_"): _typed((f.get(n) or [None])[0], kind, where, n)
            for n, kind in SGLANG_PRICED.items()
        }
        if f.get("kv-cache-dtype"):  # written only where set: the other ranges stay as they were
            found["kv_cache_dtype"] = f["kv-cache-dtype"][0]
        if f.get(SGLANG_STATE_DTYPE):
            found["mamba_ssm_dtype"] = f[SGLANG_STATE_DTYPE][0]
        recorded = {n.replace("-", "_"): _word(f[n][0]) if f[n] else True for n in SGLANG_RECORDED if n in f}
        per_launch.append((when, {**found, "recorded": recorded}))
    return _branched(per_launch)


# vLLM settings, by their config.yaml key or flag (the same name): priced, and recorded
VLLM_PRICED = {
    "max-num-batched-tokens": int,
    "max-num-seqs": int,
    "gpu-memory-utilization": float,
}
VLLM_RECORDED = (
    "async-scheduling",
    "enable-prefix-caching",
    "max-model-len",
    "enable-chunked-prefill",
    "stream-interval",
)


def _config_yaml(text: str, name: str, where: str) -> dict[str, list[str]]:
    """`key: value` lines of the heredoc that writes the config file `name` (as flags: key -> [value])."""
    if re.search(rf">>\s*{re.escape(name)}", text):
        raise SystemExit(f"{where}: {name} is appended to, a form this script does not read")
    # `<<-EOF` (bash strips the body's and the delimiter's leading tabs) or `<<EOF`
    heredoc = rf"cat > {re.escape(name)} <<(-)? ?'?EOF'?\n(.*?)\n(?(1)\t*)EOF"
    bodies = [body for _, body in re.findall(heredoc, text, re.S)]
    if len(bodies) != 1:
        raise SystemExit(f"{where}: {len(bodies)} heredocs write {name}; this script reads exactly one")
    out = {}
    for line in bodies[0].splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            # quotes around a value, also written escaped (`\'$FUSION_FLAG\'`: InferenceX 5f91fd91d, replaced
            # the same day)
            out[key.strip()] = [value.strip().strip("\\'\"")]
    return out


def _cudagraph_max(f: dict[str, list[str]], where: str) -> int | dict | None:
    """The largest decode batch vLLM captures a CUDA graph for: max-cudagraph-capture-size (a count, or a
    multiple of the concurrency), or the largest of cuda-graph-sizes (vLLM 0.10-0.11: one value means
    captures up to it)."""
    raw = f.get("max-cudagraph-capture-size") or f.get("cuda-graph-sizes") or [None]
    if len(raw) == 1 and raw[0] and (m := CONC_TIMES.fullmatch(raw[0])):
        return {"conc_times": int(m.group(1))}
    sizes = [_typed(r, int, where, "cuda-graph-sizes") for r in " ".join(x for x in raw if x).split()]
    return max(sizes) if sizes else None  # type: ignore[type-var]  # ints here


# vLLM's expert parallelism switched on under a test of the job's EP size that every job passes,
# `if [ "$EP_SIZE" -ge 1 ]; then EP=" --enable-expert-parallel"`, and passed to the launch as `$EP`
# (InferenceX's sweep writes ep 1 where a search space names none: utils/matrix_logic/
# generate_sweep_configs.py): such a script ran expert parallel whatever ep its rows record (MiniMax-M2.5 FP8
# on H200 from 5e2c705d3 and on B200 from f342df18e, until `-gt 1` replaced the test)
EP_EVERY_JOB = re.compile(
    r'if \[\[? *"?\$\{?EP_SIZE\}?"? -ge 1 *\]\]? *; *then\s*\n\s*(\w+)="\s*--enable-expert-parallel\s*"'
)


def expert_parallel_every_job(text: str, argv: list[str]) -> bool:
    """True where the launch turns on vLLM's expert parallelism for every job (EP_EVERY_JOB)."""
    return any(
        f"${name}" in argv or f"${{{name}}}" in argv for name in EP_EVERY_JOB.findall(_uncommented(text))
    )


def vllm_settings(text: str, where: str) -> dict:
    """The settings of a recipe's `vllm serve`: its flags over the config.yaml it names."""
    found = launches(text, r"\bvllm serve\b", where)
    if not found:
        return {}
    if len(found) > 1:
        raise SystemExit(f"{where}: {len(found)} `vllm serve` launches; this script reads one")
    argv = found[0][2]
    f = flags(argv)
    if "config" in f:
        f = {**_config_yaml(_uncommented(text), f["config"][0], where), **f}
    if "no-enable-prefix-caching" in f:  # the negative switch: bare, or `no-enable-prefix-caching: true`
        off = f.pop("no-enable-prefix-caching") in ([], ["true"])
        f["enable-prefix-caching"] = ["false" if off else "true"]
    # a flag set from a job-level variable (`"$MAX_NUM_SEQS"`, its value chosen by the job, which the rows do
    # not record) is not priced: recorded as written
    read = (
        *VLLM_PRICED,
        "kv-cache-dtype",
        "max-cudagraph-capture-size",
        "cuda-graph-sizes",
        "compilation-config",
    )
    by_variable = {n: f.pop(n)[0] for n in read if f.get(n) and JOB_VARIABLE.fullmatch(f[n][0])}
    compilation = json.loads(f["compilation-config"][0]) if f.get("compilation-config") else {}
    settings = {
        n.replace("-", "_"): _typed((f.get(n) or [None])[0], kind, where, n)
        for n, kind in VLLM_PRICED.items()
    }
    settings["max_cudagraph_capture_size"] = _cudagraph_max(f, where)
    settings["kv_cache_dtype"] = (f.get("kv-cache-dtype") or [None])[0]
    if expert_parallel_every_job(text, argv):  # written only where set: the other ranges stay as they were
        settings["expert_parallel"] = True
    recorded = {n.replace("-", "_"): _word(f[n][0]) if f[n] else True for n in VLLM_RECORDED if n in f}
    if "cudagraph_mode" in compilation:
        recorded["cudagraph_mode"] = compilation["cudagraph_mode"]
    recorded.update((n.replace("-", "_"), raw) for n, raw in by_variable.items())
    # vLLM's environment switches pick kernels (VLLM_MXFP4_USE_MARLIN: the MXFP4 MoE on Hopper)
    # (a single-quoted value whole: VLLM_FLASHINFER_ALLREDUCE_FUSION_THRESHOLDS_MB='{"2":32,"4":32,"8":8}')
    exports = re.findall(r"^\s*export (VLLM_\w+)=(?:'([^']*)'|\"?([^\"\s]*))", _uncommented(text), re.M)
    for name, quoted, value in exports:
        recorded[name] = quoted if quoted else _word(value)
    return {**settings, "recorded": recorded}


SETTINGS = {"trtllm": trtllm_settings, "sglang": sglang_settings, "vllm": vllm_settings}


def ranges(git_dir: str, engine: str, paths: list[str]) -> list[dict]:
    """Date ranges of equal settings over every version of the script's paths. A version that replaced another
    on the same day leaves that one an empty range [d, d): a row of that day gets the later version."""
    out: list[dict] = []
    for path in paths:
        for commit, date, text in versions(git_dir, path):
            if out and date < out[-1]["from"]:
                raise SystemExit(f"{path}@{commit[:9]}: dated {date}, before the version it follows")
            found = SETTINGS[engine](text, f"{path}@{commit[:9]}")
            version = {"commit": commit, "date": date, "file": path}
            if out and out[-1]["settings"] == found:
                out[-1]["versions"].append(version)
                continue
            if out:
                out[-1]["until"] = date
            out.append({"from": date, "until": None, "versions": [version], "settings": found})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--git-dir", required=True, help="an InferenceX clone's .git (or a bare mirror)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    head = git(args.git_dir, "rev-parse", "HEAD").strip()
    table = []
    for engine, models, system, paths, precision in RECIPES:
        only = {"precision": precision} if precision else {}
        for r in ranges(args.git_dir, engine, paths):
            table.append({"engine": engine, "models": models, "system": system, **only, **r})
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
