"""Provenance: secrets never reach the store, and a machine without git or nvidia-smi is fine."""

from servelab.results import provenance
from servelab.results.provenance import REDACTED, Provenance, redact_argv, redact_env, redact_url
from servelab.results.store import Store


def test_env_keys_that_name_a_secret_are_redacted():
    env = {
        "HF_TOKEN": "hf_abc",
        "OPENAI_API_KEY": "sk-1",
        "aws_secret_access_key": "x",
        "DB_PASSWORD": "p",
        "GOOGLE_APPLICATION_CREDENTIALS": "/k.json",
        "VLLM_USE_V1": "1",
        "PROXY": "http://user:pass@proxy:3128/x",
    }
    assert redact_env(env) == {
        "HF_TOKEN": REDACTED,
        "OPENAI_API_KEY": REDACTED,
        "aws_secret_access_key": REDACTED,
        "DB_PASSWORD": REDACTED,
        "GOOGLE_APPLICATION_CREDENTIALS": REDACTED,
        "VLLM_USE_V1": "1",
        "PROXY": "http://proxy:3128/x",
    }


def test_urls_lose_their_user_info():
    assert redact_url("see https://alice:s3cret@host:8000/v1 and s3://k@bucket/p") == (
        "see https://host:8000/v1 and s3://bucket/p"
    )
    assert redact_url("http://host/a@b") == "http://host/a@b"  # an @ in the path is not user info


def test_argv_secret_flags_are_redacted_but_token_counts_kept():
    argv = ["vllm", "serve", "m", "--api-key", "sk-1", "--hf-token=hf_x", "--max-num-batched-tokens", "8192"]
    argv += ["--download-dir", "https://u:p@mirror/x"]
    assert redact_argv(argv) == [
        "vllm",
        "serve",
        "m",
        "--api-key",
        REDACTED,
        f"--hf-token={REDACTED}",
        "--max-num-batched-tokens",
        "8192",
        "--download-dir",
        "https://mirror/x",
    ]


def test_store_redacts_whatever_it_is_given(tmp_path):
    with Store.open(tmp_path / "r.db") as store:
        run_id = store.start_run("x", Provenance(env={"HF_TOKEN": "hf_abc"}, server_argv=["--api-key", "k"]))
        p = store.get_run(run_id).provenance
    assert p.env == {"HF_TOKEN": REDACTED} and p.server_argv == ["--api-key", REDACTED]
    assert b"hf_abc" not in (tmp_path / "r.db").read_bytes()


def test_collect_without_git_or_nvidia_smi(monkeypatch):
    monkeypatch.setenv("PATH", "")
    p = provenance.collect(server_argv=["vllm", "serve"], env={"API_KEY": "k"}, image_digest="sha256:1")
    assert (p.gpu, p.driver, p.git_sha) == (None, None, None)
    assert p.env == {"API_KEY": REDACTED} and p.image_digest == "sha256:1" and p.host
