"""Secret shapes: one redaction rule (servelab.redact) over a corpus of names and values that hold secrets,
and the commands that print or store what they were given (`run --base-url` with credentials, `run --dry-run`
with bench headers and secret env, a store given as a URL with a password). The secret never appears in
stdout, stderr, the run folder or the store's bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fuzzkit import hostile, tried

from servelab.redact import REDACTED, redact_argv, redact_env, redact_text

SECRET = "Zq9sEcReT7x"  # what must never be seen

SECRET_NAMES = [
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "aws_secret_access_key", "AWS_ACCESS_KEY_ID",
    "DB_PASS", "DB_PASSWD", "MYSQL_PWD", "PGPASSWORD", "REDIS_PASSWORD", "SSH_PASSPHRASE", "hfToken",
    "apiKey", "X-Api-Key", "api-key", "AZURE_OPENAI_APIKEY", "GITHUB_AUTH_TOKEN", "SESSION_COOKIE",
    "GOOGLE_APPLICATION_CREDENTIALS", "WANDB_API_KEY", "NGC_API_KEY", "Authorization", "PROXY_AUTH",
    "client_secret", "PRIVATE_KEY", "my.secret.value", "SLACK_BOT_TOKEN", "SECRETS",
]  # fmt: skip
KEPT_NAMES = [
    "VLLM_USE_V1", "MAX_NUM_BATCHED_TOKENS", "TOKENIZERS_PARALLELISM", "BYPASS_CACHE", "PASSTHROUGH",
    "VLLM_ATTENTION_BACKEND", "NCCL_DEBUG", "CUDA_VISIBLE_DEVICES", "HF_HOME",
]  # fmt: skip

# free text holding the secret in every shape the rule knows
SECRET_TEXTS = {
    "url-userinfo": f"http://user:{SECRET}@host:8000/v1",
    "url-password-with-at": f"http://user:p@{SECRET}@host/v1",
    "url-password-with-two-ats": f"https://u:a@b@{SECRET}@host",
    "url-user-only": f"https://{SECRET}@github.com/org/repo.git",
    "url-empty-user": f"http://:{SECRET}@host",
    "url-upper-scheme": f"HTTP://u:{SECRET}@HOST:80",
    "url-ipv6": f"http://u:{SECRET}@[::1]:8000/x",
    "url-postgres": f"postgresql://admin:{SECRET}@db.internal:5432/results",
    "url-in-sentence": f"could not reach https://u:{SECRET}@h/v1 (refused)",
    "url-encoded-at": f"http://u:p%40{SECRET}@host",
    "two-urls": f"a://u:x@h1,b://v:{SECRET}@h2",
    "bare-userinfo": f"user:{SECRET}@proxy.corp:3128",
    "bearer": f"Authorization: Bearer {SECRET}",
    "basic": f"Basic {SECRET}==",
    "hf-token-shape": f"hf_{SECRET}abcdefghijkl",
    "openai-key-shape": f"sk-proj-{SECRET}abcdefghij",
    "github-token-shape": f"ghp_{SECRET}0123456789ab",
    "query-token": f"http://h/v1?token={SECRET}&x=1",
    "assignment": f"password={SECRET}",
    "json-pair": f'{{"hf_token": "{SECRET}", "dtype": "auto"}}',
    "json-pair-camel": f'{{"apiKey":"{SECRET}"}}',
}  # fmt: skip
SECRET_ARGVS = {
    "flag-value": ["--api-key", SECRET],
    "flag-equals": [f"--hf-token={SECRET}"],
    "flag-pass": ["--db-pass", SECRET],
    "flag-password-file-kept-flag": ["--password", SECRET, "--port", "8000"],
    "json-argument": ["--model-loader-extra-config", json.dumps({"token": SECRET})],
    "url-argument": ["--download-dir", f"https://u:{SECRET}@mirror/x"],
    "header-argument": ["--header", f"Authorization=Bearer {SECRET}"],
}


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_env_names_are_redacted(name):
    tried()
    assert redact_env({name: SECRET}) == {name: REDACTED}


@pytest.mark.parametrize("name", KEPT_NAMES)
def test_settings_are_kept(name):
    tried()
    assert redact_env({name: "8192"}) == {name: "8192"}
    assert redact_argv([f"--{name.lower().replace('_', '-')}", "8192"])[-1] == "8192"


@pytest.mark.parametrize("shape", list(SECRET_TEXTS))
def test_secret_shapes_in_text_are_redacted(shape):
    tried()
    text = SECRET_TEXTS[shape]
    assert SECRET not in redact_text(text), redact_text(text)
    assert SECRET not in json.dumps(redact_env({"EXTRA": text}))
    assert SECRET not in " ".join(redact_argv(["--x", text]))


@pytest.mark.parametrize("shape", list(SECRET_ARGVS))
def test_secret_shapes_in_argv_are_redacted(shape):
    tried()
    argv = ["vllm", "serve", "m", *SECRET_ARGVS[shape]]
    out = redact_argv(argv)
    assert SECRET not in " ".join(out), out
    assert out[:3] == ["vllm", "serve", "m"]


def test_redaction_keeps_what_is_not_a_secret():
    tried()
    assert redact_text("http://host:8000/a@b ok") == "http://host:8000/a@b ok"
    assert redact_argv(["--max-num-batched-tokens", "8192", "--port", "80"]) == [
        "--max-num-batched-tokens", "8192", "--port", "80",
    ]  # fmt: skip


def _workload(path: Path, header: str = "Authorization", **vllm) -> Path:
    data = {
        "name": "tiny",
        "gpu": "H200",
        "vllm": {"model": "mock-model", **vllm},
        "vllm_bench": {
            "configs": [
                {
                    "name": "s",
                    "input_len": 8,
                    "output_len": 2,
                    "num_prompts": 2,
                    "max_concurrency": 1,
                    "args": {"num_warmups": 0, "headers": {header: f"Bearer {SECRET}"}},
                }
            ]
        },
    }
    path.write_text(yaml.safe_dump(data))
    return path


def _everything(*texts: str, folder: Path) -> str:
    seen = list(texts)
    for f in folder.rglob("*"):
        if f.is_file():
            seen.append(f.read_bytes().decode("utf-8", "replace"))
    return "\n".join(seen)


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_dry_run_prints_no_secret(as_json, tmp_path):
    """Bench headers (Authorization) and secret env of a workload are not printed by `run --dry-run`."""
    wl = _workload(tmp_path / "wl.yaml", env={"DB_PASS": SECRET, "PROXY": f"http://u:{SECRET}@p:1"})
    r = hostile("run", str(wl), "--dry-run", *(["--json"] if as_json else []), codes=(0,))
    assert SECRET not in r.out + r.err, r.out


def test_run_attached_with_credentials_stores_and_prints_no_secret(mock_server, tmp_path):
    wl = _workload(tmp_path / "wl.yaml", header="X-Api-Key")  # the URL's credentials are the Authorization
    url = mock_server.replace("http://", f"http://user:p@{SECRET}@")
    db = tmp_path / "store" / "r.db"
    r = hostile("run", str(wl), "--base-url", url, "--store", str(db), "--json", codes=(0,))
    assert json.loads(r.out)["outcome"] == "pass", r.err
    assert SECRET not in _everything(r.out, r.err, folder=db.parent)


def test_run_attached_to_nothing_with_credentials_prints_no_secret(tmp_path):
    """The server is not there: the error names the URL without its password."""
    wl = _workload(tmp_path / "wl.yaml")
    db = tmp_path / "store" / "r.db"
    r = hostile(
        "run", str(wl), "--base-url", f"http://u:{SECRET}@127.0.0.1:9", "--store", str(db), codes=(3,)
    )
    assert "127.0.0.1:9" in r.out + r.err
    assert SECRET not in _everything(r.out, r.err, folder=db.parent)


def test_a_store_given_as_a_url_is_refused_without_its_password(tmp_path):
    r = hostile(
        "results", "list", "--store", f"mysql://admin:{SECRET}@db/results?password={SECRET}", cwd=tmp_path
    )
    assert "URL" in r.err and SECRET not in r.err
    assert list(tmp_path.iterdir()) == []  # no directory tree named after the URL


def test_a_postgres_store_not_there_is_named_without_its_password(tmp_path):
    url = f"postgresql://admin:{SECRET}@127.0.0.1:9/results?password={SECRET}"
    r = hostile("results", "list", "--store", url, codes=(1, 2), cwd=tmp_path)  # 2: without psycopg
    assert "postgresql://127.0.0.1:9/results" in r.err and SECRET not in r.out + r.err
    assert list(tmp_path.iterdir()) == []
