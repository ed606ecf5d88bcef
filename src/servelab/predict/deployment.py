"""A deployment read from what a run records about itself: the GPU's name (an nvidia-smi name or an
InferenceX runner type) as a servelab system, an engine's name, and the engine's command line as the model,
the parallel split and the settings that shape scheduling. The calibration's store rows, `sweep --predict` and
`results compare --twin` all read deployments so.

The command line is read by the engine's grammar (servelab.engines), the one reader of server commands. These
functions raise ValueError for a command they cannot read: their callers record it as the reason a row or a
twin is missing."""

import re
from collections.abc import Mapping
from typing import Any

from servelab.engines import argv as argvlib
from servelab.engines.command import engine_of_argv as _engine_of_argv
from servelab.engines.command import grammar_of
from servelab.engines.names import MODELLED, Engine, engine_of, is_engine
from servelab.engines.settings import ServerSettings
from servelab.errors import ServelabError
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
# `servelab run --docker` records `docker run ... --entrypoint PROGRAM IMAGE ARGS` (run/server.py)
DOCKER = "docker"
ENTRYPOINT = "--entrypoint"


def system_of_gpu(text: str | None) -> str:
    """The servelab system of a GPU name (`8x NVIDIA H200`, `h200-dgxc`), or raise ValueError."""
    name = (text or "").lower()
    for token, system in GPU_SYSTEMS:
        if re.search(rf"(?<![a-z]){token}", name):
            return system
    raise ValueError(f"GPU {text or '(none recorded)'} has no servelab system")


def engine_of_framework(framework: str) -> Engine:
    """The engine of an InferenceX `framework` (vllm, sglang, trt) or any spelling servelab knows."""
    if not is_engine(framework) or engine_of(framework) not in MODELLED:
        raise ValueError(f"framework {framework} has no servelab engine model (vllm, sglang, trt)")
    return engine_of(framework)


def argv_flags(argv: list[str]) -> dict[str, str]:
    """`--name value`, `--name=value` and bare `--switch` (value "true") of a command line that is not a
    server's (a `servelab bench` or `lm_eval` command), by name without dashes."""
    return {
        a.name.lstrip("-"): "true" if a.value is None else a.value
        for a in argvlib.parse(argv)
        if a.name is not None
    }


def server_argv(argv: list[str]) -> list[str]:
    """The server command of a recorded argv: the command itself, or the one `servelab run --docker` wrapped
    in `docker run` (its entrypoint, then the arguments after the image)."""
    if argv and argv[0] == DOCKER and ENTRYPOINT in argv:
        at = argv.index(ENTRYPOINT)
        return [argv[at + 1], *argv[at + 3 :]]
    return list(argv)


def engine_of_argv(argv: list[str]) -> Engine:
    """vllm (`vllm serve`), sglang (`python -m sglang.launch_server`, `sglang serve`) or trtllm
    (`trtllm-serve`); raise ValueError for any other command."""
    try:
        return _engine_of_argv(server_argv(argv))
    except ServelabError as e:
        raise ValueError(str(e)) from None


def settings_of_argv(
    argv: list[str], engine: Engine | str | None = None, options: Mapping[str, Any] | None = None
) -> ServerSettings:
    """The typed settings of a recorded server command (its engine found from the command if not given);
    `options` is the content of the options file it names (TensorRT-LLM), when there is one."""
    command = server_argv(argv)
    try:
        return grammar_of(engine or _engine_of_argv(command)).parse(command, options)
    except ServelabError as e:
        raise ValueError(str(e)) from None


def model_of_argv(argv: list[str], engine: Engine | str) -> str:
    model = settings_of_argv(argv, engine).model
    if not model:
        raise ValueError("server command names no model")
    return model


def parallel_of_argv(
    argv: list[str], engine: Engine | str, is_moe: bool, options: Mapping[str, Any] | None = None
) -> Parallel:
    """The parallel split a server command asks for, in servelab's terms (tp = GPUs per pipeline stage), by
    the engine's rule (Grammar.parallel); TensorRT-LLM's attention DP lives in its options file."""
    return grammar_of(engine).parallel(settings_of_argv(argv, engine, options), is_moe)


def engine_settings_of_argv(
    argv: list[str], engine: Engine | str | None = None, options: Mapping[str, Any] | None = None
) -> dict:
    """The scheduling settings a server command sets (None where it keeps the engine's default), as
    predict.twin.EngineSettings fields; the memory share keeps the engine's meaning (ServerSettings)."""
    return engine_settings_of(settings_of_argv(argv, engine, options))


def engine_settings_of(s: ServerSettings) -> dict:
    """engine_settings_of_argv of a command already read."""
    return {
        "max_num_batched_tokens": s.max_num_batched_tokens,
        "max_num_seqs": s.max_num_seqs,
        "gpu_memory_utilization": s.memory_fraction,
        "enable_prefix_caching": s.prefix_caching,
        "stream_interval": s.stream_interval,
    }


def kv_dtype_of_argv(
    argv: list[str], engine: Engine | str | None = None, options: Mapping[str, Any] | None = None
) -> str | None:
    """fp8 when the command stores the KV cache in an FP8 format; None keeps the checkpoint's."""
    dtype = settings_of_argv(argv, engine, options).kv_cache_dtype or "auto"
    return "fp8" if dtype.startswith("fp8") else None
