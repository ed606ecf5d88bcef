"""Result files as `vllm bench serve` and InferenceX write them, and a real PostgreSQL server, for the
results-store tests."""

import json
import secrets
from collections.abc import Iterator

import pytest
from pgserver import Server, binaries


def _vllm_result(max_concurrency=16, median_ttft_ms=110.0, output_throughput=400.0, **extra) -> dict:
    """The fields of a `vllm bench serve --save-result` file (vLLM's vllm/benchmarks/serve.py), trimmed."""
    return {
        "date": "20261130-101500",
        "endpoint_type": "openai",
        "backend": "openai",
        "label": "vllm",
        "model_id": "Qwen/Qwen3-0.6B",
        "tokenizer_id": "Qwen/Qwen3-0.6B",
        "num_prompts": 64,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": max_concurrency,
        "duration": 20.0,
        "completed": 64,
        "failed": 0,
        "total_input_tokens": 65536,
        "total_output_tokens": 8192,
        "request_throughput": 3.2,
        "output_throughput": output_throughput,
        "total_token_throughput": 3676.8,
        "mean_ttft_ms": median_ttft_ms * 1.1,
        "median_ttft_ms": median_ttft_ms,
        "p99_ttft_ms": median_ttft_ms * 3,
        "mean_tpot_ms": 25.0,
        "median_tpot_ms": 24.5,
        "p99_tpot_ms": 40.0,
        "ttfts": [0.1, 0.12],
        **extra,
    }


def _inferencex_result(conc=64, hw="h200") -> dict:
    """An InferenceX result after utils/process_result.py (single node): latencies in seconds."""
    return {
        "hw": hw,
        "conc": conc,
        "image": "vllm/vllm-openai@sha256:abc",
        "model": "deepseek-ai/DeepSeek-R1-0528",
        "infmax_model_prefix": "dsr1",
        "framework": "vllm",
        "precision": "fp8",
        "spec_decoding": "none",
        "disagg": False,
        "recipe_fingerprint": "f" * 64,
        "isl": 1024,
        "osl": 1024,
        "is_multinode": False,
        "tp": 8,
        "pp": 1,
        "dcp_size": 1,
        "pcp_size": 1,
        "ep": 1,
        "dp_attention": "false",
        "tput_per_gpu": 1875.0,
        "output_tput_per_gpu": 1500.0,
        "input_tput_per_gpu": 375.0,
        "median_ttft": 0.15,
        "p99_ttft": 0.25,
        "median_tpot": 0.025,
        "median_intvty": 40.0,
    }


@pytest.fixture
def write_json(tmp_path):
    def write(name: str, data) -> str:
        path = tmp_path / name
        path.write_text(json.dumps(data))
        return str(path)

    return write


@pytest.fixture
def vllm_result():
    return _vllm_result


@pytest.fixture
def inferencex_result():
    return _inferencex_result


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Server]:
    """One PostgreSQL server for the session (tests/results/pgserver.py); skipped, saying why, without
    PostgreSQL's binaries or psycopg."""
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'servelab[postgres]')")
    folder = binaries()
    if folder is None:
        pytest.skip(
            "PostgreSQL is not installed (no initdb on PATH or under /usr/lib/postgresql/*/bin): "
            "apt-get install postgresql"
        )
    server = Server.start(folder)
    yield server
    server.stop()


@pytest.fixture
def pg_url(postgres_server: Server) -> Iterator[str]:
    """The URL of a fresh, empty database on the test server (dropped after the test)."""
    import psycopg  # noqa: PLC0415  # the [postgres] extra: the fixture above skips without it

    name = f"t_{secrets.token_hex(6)}"
    with psycopg.connect(postgres_server.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield postgres_server.url(name)
    with psycopg.connect(postgres_server.url(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
