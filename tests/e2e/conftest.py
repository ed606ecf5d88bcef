"""Real vLLM (CPU build) for e2e tests, built from nothing: a tiny random-weight Llama and a byte-level BPE
tokenizer trained here (shared/reference/test-servers.md). Reusable pieces:

  vllm_python()                      the vLLM venv's python, or None (SERVELAB_VLLM_VENV, else <repo>/.venv-vllm)
  build_tiny_llama(cache_dir, ...)   model dir (config, weights, tokenizer), cached by its settings
  VllmServer(model_dir, port, extra_args=[...], env={...})   start / wait for /health / stop (a context manager)
  free_port()                        a free port in 18900-18999 (this suite's share of 18000-18999)

Fixtures: `tiny_llama` (session, model dir), `vllm_server` (session, a running server on that model).
Every test here is marked e2e and is skipped with the reason when the vLLM venv is missing.
Set up the venv with scripts/setup_vllm_cpu.sh.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL_NAME = "tiny-llama"

_BUILD_SCRIPT = r"""
import json, sys
from pathlib import Path
out = Path(sys.argv[1]); cfg = json.loads(sys.argv[2])
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
import torch
torch.manual_seed(cfg["seed"])
words = ("the of and to in is was for on that with as by at from his her it an be are this which or have has had not "
         "but all they one two new first time year people city state world after also other many most some only "
         "over into would could about than then when where who will can may under while each between").split()
import random
rnd = random.Random(cfg["seed"])
text = [" ".join(rnd.choice(words) for _ in range(60)) for _ in range(2000)]
tok = Tokenizer(models.BPE(unk_token=None))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=cfg["vocab_size"], special_tokens=["<s>", "</s>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train_from_iterator(text, trainer)
tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
fast.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                      "{% if add_generation_prompt %}assistant:{% endif %}")
out.mkdir(parents=True, exist_ok=True)
fast.save_pretrained(out)
conf = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                   bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, tie_word_embeddings=False)
LlamaForCausalLM(conf).save_pretrained(out, safe_serialization=True)
print("built", out)
"""


def vllm_python() -> Path | None:
    venv = Path(os.environ.get("SERVELAB_VLLM_VENV") or REPO / ".venv-vllm")
    py = venv / "bin" / "python"
    return py if py.exists() else None


def skip_reason() -> str | None:
    if vllm_python() is None:
        return (
            "vLLM CPU venv not found (set SERVELAB_VLLM_VENV or run scripts/setup_vllm_cpu.sh to create "
            f"{REPO / '.venv-vllm'})"
        )
    return None


def free_port(lo: int = 18900, hi: int = 19000) -> int:
    for port in range(lo, hi):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {lo}-{hi - 1}")


def build_tiny_llama(cache_dir: Path, vocab_size: int = 1000, seed: int = 0) -> Path:
    """Build (once, cached by settings) a tiny random Llama + tokenizer with the vLLM venv's libraries."""
    settings = {"vocab_size": vocab_size, "seed": seed, "v": 1}
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    out = Path(cache_dir) / f"tiny-llama-{key}"
    if (
        (out / "config.json").exists()
        and (out / "tokenizer.json").exists()
        and (out / "model.safetensors").exists()
    ):
        return out
    py = vllm_python()
    if py is None:
        raise RuntimeError(skip_reason())
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    subprocess.run(
        [str(py), "-c", _BUILD_SCRIPT, str(out), json.dumps(settings)],
        check=True,
        env=env,
        capture_output=True,
        timeout=600,
    )
    return out


class VllmServer:
    """`python -m vllm.entrypoints.openai.api_server` from the vLLM venv, on 127.0.0.1:port."""

    def __init__(
        self,
        model_dir: Path,
        port: int | None = None,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        served_model_name: str = MODEL_NAME,
        log_path: Path | None = None,
        start_timeout_s: float = 300.0,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.model = served_model_name
        self.args = [
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_dir),
            "--served-model-name",
            served_model_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dtype",
            "bfloat16",
            "--max-model-len",
            "4096",
            "--max-num-seqs",
            "16",
            *(extra_args or []),
        ]
        self.env = dict(
            os.environ,
            VLLM_CPU_KVCACHE_SPACE="2",
            HF_HUB_OFFLINE="1",
            TOKENIZERS_PARALLELISM="false",
            VLLM_LOGGING_LEVEL="WARNING",
            **(env or {}),
        )
        self.log_path = log_path or (self.model_dir.parent / f"vllm-{self.port}.log")
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None

    def start(self) -> VllmServer:
        py = vllm_python()
        if py is None:
            raise RuntimeError(skip_reason())
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [str(py), *self.args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"vLLM exited with {self.proc.returncode}; log: {self.log_path}\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(1)
        self.stop()
        raise RuntimeError(f"vLLM not healthy after {self.start_timeout_s:.0f} s; log: {self.log_path}")

    def log_tail(self, n: int = 3000) -> str:
        try:
            return Path(self.log_path).read_text()[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)  # its own session: the engine-core child goes too
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        if getattr(self, "_log", None):
            self._log.close()

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def pytest_collection_modifyitems(config, items):
    reason = skip_reason()
    for item in items:
        if "e2e" in item.keywords and reason:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def e2e_cache_dir() -> Path:
    d = Path(os.environ.get("SERVELAB_E2E_CACHE") or REPO / ".cache" / "e2e")
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="session")
def tiny_llama(e2e_cache_dir) -> Path:
    if skip_reason():
        pytest.skip(skip_reason())
    return build_tiny_llama(e2e_cache_dir)


@pytest.fixture(scope="session")
def vllm_server(tiny_llama):
    with VllmServer(tiny_llama) as server:
        yield server
