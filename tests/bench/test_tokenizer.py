"""`--tokenizer` takes a hub id resolved from the local Hugging Face cache, offline (issue 15, item 6)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from servelab.bench.tokenizer import LocalTokenizer, load_tokenizer, resolve_tokenizer_path
from servelab.errors import ServelabError


def fake_cache(root, tiny_tokenizer, repo_id: str, revision: str = "0123abcd"):
    """The hub cache layout: models--ORG--NAME/{refs/main, snapshots/<rev>/tokenizer.json}."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / revision
    snap.mkdir(parents=True)
    shutil.copy(tiny_tokenizer / "tokenizer.json", snap / "tokenizer.json")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return snap


@pytest.fixture
def clean_hf_env(monkeypatch):
    for var in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


@pytest.mark.parametrize("var", ["HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME"])
def test_hub_id_resolves_to_its_cached_snapshot(tmp_path, tiny_tokenizer, clean_hf_env, var):
    hub = tmp_path / "hub" if var == "HF_HOME" else tmp_path
    snap = fake_cache(hub, tiny_tokenizer, "acme/tiny-model")
    clean_hf_env.setenv(var, str(tmp_path))
    assert resolve_tokenizer_path("acme/tiny-model") == str(snap)
    tok = load_tokenizer("acme/tiny-model")
    assert isinstance(tok, LocalTokenizer) and tok.kind == "tokenizers"
    assert tok.path == "acme/tiny-model" and tok.count(" the city") >= 1


def test_default_cache_is_under_home(tmp_path, tiny_tokenizer, clean_hf_env):
    clean_hf_env.setenv("HOME", str(tmp_path))
    snap = fake_cache(tmp_path / ".cache" / "huggingface" / "hub", tiny_tokenizer, "acme/tiny-model")
    assert resolve_tokenizer_path("acme/tiny-model") == str(snap)


def test_a_hub_id_not_in_the_cache_is_one_clear_line(tmp_path, clean_hf_env):
    clean_hf_env.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ServelabError) as e:
        resolve_tokenizer_path("acme/not-here")
    msg = str(e.value)
    assert "\n" not in msg and "acme/not-here" in msg and str(tmp_path) in msg and "never downloads" in msg


@pytest.mark.slow  # 1.8 s of CPU a case: a CLI process reading a hub cache
def test_cli_accepts_a_cached_hub_id_and_trust_remote_code(mock_server, tmp_path, tiny_tokenizer):
    fake_cache(tmp_path / "cache", tiny_tokenizer, "acme/tiny-model")
    s = mock_server("--token-delay-ms", "2")
    env = dict(os.environ, HF_HUB_CACHE=str(tmp_path / "cache"))

    def bench(tokenizer: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "servelab.cli.main", "bench", "--base-url", s.url, "--model", "mock"]
        cmd += ["--tokenizer", tokenizer, "--trust-remote-code", "--random-input-len", "12"]
        cmd += [
            "--random-output-len",
            "3",
            "--num-prompts",
            "2",
            "--save-result",
            "--result-dir",
            str(tmp_path),
        ]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=90, env=env)

    p = bench("acme/tiny-model")
    assert p.returncode == 0, p.stderr
    (result,) = tmp_path.glob("*.json")
    r = json.loads(result.read_text())
    assert r["tokenizer_id"] == "acme/tiny-model"
    assert r["config"]["trust_remote_code"] is True
    p = bench("acme/missing")
    assert p.returncode == 2 and p.stderr.startswith("error: --tokenizer acme/missing")
