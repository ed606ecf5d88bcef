"""A deployment read from what a run records about itself: the GPU's name (an nvidia-smi name or an
InferenceX runner type) as a servelab system, an engine's name, and the engine's command line as the model,
the parallel split and the settings that shape scheduling. The calibration's store rows, `sweep --predict` and
`results compare --twin` all read deployments so."""

import re

from servelab.specs import Parallel

# GPU names as nvidia-smi and InferenceX runner types write them -> servelab system; Grace-Blackwell first so
# that `gb200` is never read as `b200`
GPU_SYSTEMS = (
    ("gb300", "gb300"),
    ("gb200", "gb200"),
    ("b300", "b300_sxm"),
    ("b200", "b200_sxm"),
    ("h200", "h200_sxm"),
    ("h100", "h100_sxm"),
)
# InferenceX `framework` names of single-node aggregated engines -> servelab engine
FRAMEWORKS = {"vllm": "vllm", "sglang": "sglang", "trt": "trtllm", "trtllm": "trtllm"}


def system_of_gpu(text: str | None) -> str:
    """The servelab system of a GPU name (`8x NVIDIA H200`, `h200-dgxc`), or raise ValueError."""
    name = (text or "").lower()
    for token, system in GPU_SYSTEMS:
        if re.search(rf"(?<![a-z]){token}", name):
            return system
    raise ValueError(f"GPU {text or '(none recorded)'} has no servelab system")


def engine_of_framework(framework: str) -> str:
    engine = FRAMEWORKS.get(framework.strip().lower())
    if engine is None:
        raise ValueError(f"framework {framework} has no servelab engine (vllm, sglang, trt)")
    return engine


def argv_flags(argv: list[str]) -> dict[str, str]:
    """`--name value`, `--name=value` and bare `--switch` (value "true") of a command line."""
    out: dict[str, str] = {}
    for i, arg in enumerate(argv):
        if not arg.startswith("-"):
            continue
        if "=" in arg:
            key, value = arg.split("=", 1)
        else:
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            key, value = arg, nxt if nxt is not None and not nxt.startswith("-") else "true"
        out[key.lstrip("-").replace("_", "-")] = value
    return out


def _int(flags: dict[str, str], *names: str) -> int:
    for name in names:
        if name in flags:
            try:
                return int(flags[name])
            except ValueError:
                raise ValueError(f"--{name} {flags[name]} is not a number") from None
    return 1


def _positional_after(argv: list[str], word: str) -> str | None:
    for i, arg in enumerate(argv[:-1]):
        if arg.endswith(word) and not argv[i + 1].startswith("-"):
            return argv[i + 1]
    return None


def engine_of_argv(argv: list[str]) -> str:
    """vllm (`vllm serve`), sglang (`python -m sglang.launch_server`, `sglang serve`) or trtllm
    (`trtllm-serve`); raise ValueError for any other command."""
    words = [a.rsplit("/", 1)[-1] for a in argv if not a.startswith("-")]
    if "trtllm-serve" in words:
        return "trtllm"
    if any(w.startswith("sglang") for w in words):
        return "sglang"
    if "vllm" in words and "serve" in words:
        return "vllm"
    raise ValueError("server command is not vllm serve, sglang or trtllm-serve")


def model_of_argv(argv: list[str], engine: str) -> str:
    flags = argv_flags(argv)
    if engine == "sglang":
        model = flags.get("model-path") or flags.get("model")
    else:
        model = _positional_after(argv, "serve") or flags.get("model")
    if not model or model == "true":
        raise ValueError("server command names no model")
    return model


def parallel_of_argv(argv: list[str], engine: str, is_moe: bool) -> Parallel:
    """The parallel split a server command asks for, in servelab's terms (tp = GPUs per pipeline stage).

    vLLM: --tensor-parallel-size x --data-parallel-size GPUs; data parallel with --enable-expert-parallel is
    attention DP with the experts spread over all of them. SGLang: --tp-size GPUs, --enable-dp-attention,
    --ep-size. trtllm-serve: --tp_size, --ep_size (attention DP lives in its config file, not read here)."""
    flags = argv_flags(argv)
    if engine == "vllm":
        tp = _int(flags, "tensor-parallel-size", "tp")
        dp = _int(flags, "data-parallel-size", "dp")
        pp = _int(flags, "pipeline-parallel-size", "pp")
        expert_parallel = flags.get("enable-expert-parallel") == "true"
        if dp > 1 and not (is_moe and expert_parallel):
            raise ValueError(f"data parallel {dp} without expert parallelism (replicas, not one deployment)")
        ep = tp * dp if is_moe and expert_parallel else 1
        return Parallel(tp=tp * dp, ep=ep, dp_attn=dp > 1, pp=pp)
    if engine == "sglang":
        tp = _int(flags, "tp-size", "tp")
        ep = _int(flags, "ep-size", "ep") if is_moe else 1
        pp = _int(flags, "pp-size", "pp")
        return Parallel(tp=tp, ep=ep, dp_attn=flags.get("enable-dp-attention") == "true", pp=pp)
    tp = _int(flags, "tp-size")
    return Parallel(tp=tp, ep=_int(flags, "ep-size") if is_moe else 1, pp=_int(flags, "pp-size"))


# launch flags (vLLM, SGLang, TensorRT-LLM spellings) -> the twin's engine settings
BUDGET_FLAGS = ("max-num-batched-tokens", "chunked-prefill-size", "max-num-tokens")
SEQS_FLAGS = ("max-num-seqs", "max-running-requests", "max-batch-size")
MEMORY_FLAGS = ("gpu-memory-utilization", "mem-fraction-static", "free-gpu-memory-fraction")


def _first(flags: dict[str, str], names: tuple[str, ...], kind: type) -> object:
    for name in names:
        if name in flags:
            try:
                return kind(flags[name])
            except ValueError:
                raise ValueError(f"--{name} {flags[name]} is not a {kind.__name__}") from None
    return None


def engine_settings_of_argv(argv: list[str]) -> dict:
    """The scheduling settings a server command sets (None where it keeps the engine's default), as
    predict.twin.EngineSettings fields."""
    flags = argv_flags(argv)
    return {
        "max_num_batched_tokens": _first(flags, BUDGET_FLAGS, int),
        "max_num_seqs": _first(flags, SEQS_FLAGS, int),
        "gpu_memory_utilization": _first(flags, MEMORY_FLAGS, float),
    }


def kv_dtype_of_argv(argv: list[str]) -> str | None:
    """fp8 when the command stores the KV cache in an FP8 format; None keeps the checkpoint's."""
    return "fp8" if argv_flags(argv).get("kv-cache-dtype", "auto").startswith("fp8") else None
