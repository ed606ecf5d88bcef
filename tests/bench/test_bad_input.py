"""Hostile and careless input to `servelab bench`: one line naming the option, variable or file (exit 2),
never a traceback; secrets never stored or printed; nothing reaches a request head that could inject a
header."""

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.bench.payload import Target
from servelab.cli.main import main

CLI = [sys.executable, "-m", "servelab.cli.main", "bench"]


def cli(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    """`servelab bench ARGS` in this process; returns (exit code, stderr)."""
    monkeypatch.setattr(sys, "argv", ["servelab", "bench", "--model", "m", "--num-prompts", "2", *args])
    with pytest.raises(SystemExit) as e:
        main()
    return e.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    "args,start",
    [
        (("--port", "70000"), "error: --port 70000 is not in 1-65535"),
        (("--port", "0"), "error: --port 0"),
        (("--base-url", "http://127.0.0.1:99999"), "error: --base-url: port '99999'"),
        (("--base-url", "http://127.0.0.1:abc"), "error: --base-url: port 'abc'"),
        (("--base-url", "http://[::1"), "error: --base-url"),
        (("--base-url", "ftp://host"), "error: --base-url: must start with http"),
        (("--base-url", "http://"), "error: --base-url: has no host"),
        (("--base-url", "http://exa mple.com"), "error: --base-url: contains a space"),
        (("--base-url", "http://h/x?a=1"), "error: --base-url: must not have a query"),
        (("--endpoint", "/v1/completions\r\nX-Evil: 1"), "error: --endpoint: contains a control character"),
        (("--endpoint", "/v1/completions HTTP/1.0"), "error: --endpoint: must be a path"),
        (("--header", "X-Team=a\r\nX-Evil: 1"), "error: --header: the value of X-Team contains a control"),
        (("--header", "X Evil=1"), "error: --header: header name 'X Evil' is not an HTTP token"),
        (("--header", "Content-Length=5"), "error: --header: Content-Length is set by servelab"),
        (("--header", "novalue"), "error: --header values must be KEY=VALUE"),
    ],
)
def test_bad_options_are_one_line(monkeypatch, capsys, args, start):
    code, err = cli(monkeypatch, capsys, *args)
    assert code == 2 and err.startswith(start) and len(err.splitlines()) == 1, err


def test_control_characters_in_the_api_key_are_refused(monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-1\r\nX-Evil: 1")
    code, err = cli(monkeypatch, capsys, "--base-url", "http://127.0.0.1:9")
    assert code == 2 and err.startswith("error: OPENAI_API_KEY contains a control character"), err
    assert "sk-1" not in err


def test_two_authorization_sources_are_refused(monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-1")
    code, err = cli(monkeypatch, capsys, "--base-url", "http://u:pw@127.0.0.1:9")
    assert code == 2 and "OPENAI_API_KEY and credentials in --base-url" in err and "pw" not in err


@pytest.mark.parametrize(
    "content,expected",
    [
        ('{"prompt": "a"}\n{"prompt": "b"\n', ":2: not JSON"),
        ('{"prompt": "a"}\n[1, 2]\n', ':2: expected {"prompt"'),
        ('{"prompt": 5}\n', ':1: expected {"prompt"'),
        ('{"text": "a"}\n', ':1: expected {"prompt"'),
        ('{"prompt": "a", "output_len": -5}\n', ":1: output_len must be a positive integer, not -5"),
        ('{"prompt": "a", "output_len": "abc"}\n', ":1: output_len must be a positive integer, not abc"),
        ('{"prompt": "a", "output_len": 1.5}\n', ":1: output_len must be a positive integer"),
        (b"\xff\xfe\x00", ": not UTF-8 text"),
    ],
)
def test_malformed_custom_datasets_name_the_file_and_line(monkeypatch, capsys, tmp_path, content, expected):
    path = tmp_path / "data.jsonl"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    code, err = cli(monkeypatch, capsys, "--dataset-name", "custom", "--dataset-path", str(path))
    assert code == 2 and err.startswith(f"error: --dataset-path {path}{expected}"), err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("content", ["5", '{"a": 1}', '[{"conversations": "ab"}, {"conversations": [1, 2]}]'])
def test_malformed_sharegpt_files_are_one_line(monkeypatch, capsys, tmp_path, content):
    path = tmp_path / "sg.json"
    path.write_text(content)
    code, err = cli(monkeypatch, capsys, "--dataset-name", "sharegpt", "--dataset-path", str(path))
    assert code == 2 and err.startswith(f"error: --dataset-path {path}: "), err


@pytest.mark.slow  # 1.3 s of CPU a case: a whole bench with its load worker processes
def test_url_credentials_are_sent_as_basic_auth_and_never_stored(hostile_server, tmp_path):
    s = hostile_server("crlf")
    url = s.url.replace("http://", "http://alice:s3cr%40t@")
    p = subprocess.run(
        CLI
        + ["--base-url", url, "--header", "X-Team=perf", "--num-prompts", "3", "--random-input-len", "8"]
        + ["--save-result", "--result-dir", str(tmp_path), "--result-filename", "r.json", "--save-detailed"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    basic = base64.b64encode(b"alice:s3cr@t")
    assert s.heads and all(b"Authorization: Basic " + basic in h and b"X-Team: perf" in h for h in s.heads)
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["config"]["base_url"] == s.url and r["completed"] == 3
    everything = p.stdout + p.stderr + "".join(f.read_text() for f in tmp_path.iterdir() if f.is_file())
    for secret in ("s3cr", "alice", basic.decode(), "perf"):
        assert secret not in everything, secret


@pytest.mark.slow  # 1.0 s of CPU a case: a whole bench with its load worker processes
def test_unreachable_server_without_model_is_one_line(tmp_path):
    p = subprocess.run(
        CLI + ["--base-url", "http://u:pw@127.0.0.1:9", "--num-prompts", "2"], capture_output=True, text=True
    )
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and "pw" not in p.stderr, p.stderr
    assert Path(tmp_path).exists()


def test_ipv6_hosts_are_bracketed_in_the_host_header():
    assert Target.from_url("http://[::1]:8000").host_header == "[::1]:8000"
    assert Target.from_url("https://example.com").host_header == "example.com"
