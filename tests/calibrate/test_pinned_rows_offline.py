"""Pinned evidence (silicon rows, InferenceX results, the fresh closed-loop points) is read with servelab's
embedded models only: a row of a model servelab does not embed is left out the same way on every machine,
whatever its Hugging Face cache holds, and the hub is never asked (an accuracy script once waited minutes on
DNS lookups for the rows of Kimi-K2.5, GLM-5 and Qwen3.5 before printing anything)."""

import http.server
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hubcache import fake_cache

from servelab.calibrate.rows import model_of
from servelab.errors import ServelabError
from servelab.specs import load_model

ROOT = Path(__file__).resolve().parents[2]


def test_a_cached_model_is_a_users_but_not_pinned_evidences(tmp_path, monkeypatch):
    fake_cache(tmp_path / "hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert load_model("acme/tiny-qwen").num_layers == 2  # what a user asking for it gets
    with pytest.raises(ServelabError, match="'acme/tiny-qwen' is not embedded"):
        load_model("acme/tiny-qwen", hub=False)
    with pytest.raises(ValueError, match="model acme/tiny-qwen is not embedded"):
        model_of({"model_path": "acme/tiny-qwen", "gemm_quant_mode": "bf16"})
    # embedded models and their checkpoints are read as before
    assert model_of({"model_path": "Qwen/Qwen3-32B", "gemm_quant_mode": "bf16"}).name == "qwen3-32b"


class CountingHub(http.server.BaseHTTPRequestHandler):
    """A stand-in hub that answers nothing but counts what it was asked."""

    asked: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.asked.append(self.path)
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET  # noqa: N815 - http.server's name

    def log_message(self, *args) -> None:
        pass


READ = """from servelab.calibrate.rows import model_of
try:
    model_of({"model_path": "example-org/Unembedded-MoE", "gemm_quant_mode": "fp8"})
except ValueError as e:
    print(e)
"""


def test_reading_a_pinned_row_online_asks_the_hub_nothing(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), CountingHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT / "src"),
        "HF_HUB_CACHE": str(tmp_path / "hub"),  # empty; HF_HUB_OFFLINE not set: online
        "HF_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}",
    }
    try:
        r = subprocess.run([sys.executable, "-c", READ], capture_output=True, text=True, env=env, timeout=120)
    finally:
        server.shutdown()
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "model example-org/Unembedded-MoE is not embedded"
    assert CountingHub.asked == []
