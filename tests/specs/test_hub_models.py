"""Models by Hugging Face id (ORG/NAME): from the local hub cache offline (the layout huggingface_hub writes,
where HF_HUB_CACHE or HF_HOME put it; its own lookup when installed, servelab's reading of the layout
without it), from the hub when online (a stand-in hub on this machine: HF_ENDPOINT), and one line naming both
when neither has it. No test touches the network."""

import http.server
import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hubcache import COMMIT, CONFIG, fake_cache

from servelab.errors import ServelabError
from servelab.specs import load_model

SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(params=["huggingface_hub", "servelab"])
def lookup(request, monkeypatch):
    """Both lookups: huggingface_hub's own (installed here), and servelab's, as without it."""
    if request.param == "servelab":
        monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # an import of it fails
    else:
        pytest.importorskip("huggingface_hub")
    return request.param


def test_an_id_in_the_hub_cache_resolves_offline(tmp_path, monkeypatch, offline, lookup):
    fake_cache(tmp_path / "hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    spec = load_model("acme/tiny-qwen")
    assert (spec.num_layers, spec.source, spec.name) == (2, "acme/tiny-qwen", "acme/tiny-qwen")


def test_hf_home_holds_the_cache_under_hub(tmp_path, monkeypatch, offline, lookup):
    fake_cache(tmp_path / "home" / "hub", "acme/other", CONFIG | {"num_hidden_layers": 3})
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert load_model("acme/other").num_layers == 3


def test_not_in_the_cache_and_offline_is_one_line(tmp_path, monkeypatch, offline, lookup):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ServelabError) as e:
        load_model("acme/missing")
    assert str(e.value).startswith(
        f"unknown model 'acme/missing': not embedded, and no config.json of it in the Hugging Face cache "
        f"{tmp_path / 'hub'} (HF_HUB_OFFLINE is set: the hub was not asked)"
    )


class Hub(http.server.BaseHTTPRequestHandler):
    """A stand-in hub: /acme/online/resolve/main/config.json, with the headers huggingface_hub reads."""

    body = json.dumps(CONFIG | {"num_hidden_layers": 5}).encode()

    def _head(self) -> bool:
        if self.path.split("?")[0] != "/acme/online/resolve/main/config.json":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return False
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.send_header("ETag", '"cafe"')
        self.send_header("X-Repo-Commit", COMMIT)
        self.end_headers()
        return True

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        self._head()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self._head():
            self.wfile.write(self.body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def hub(tmp_path):
    """The stand-in hub's environment: its endpoint, an empty cache, online."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": SRC, "HF_HUB_CACHE": str(tmp_path / "hub")}
    yield env | {"HF_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}"}
    server.shutdown()


# in a process of its own: huggingface_hub reads HF_HUB_OFFLINE once, when it is first imported
LOAD = """import sys
if sys.argv[2] == "servelab":
    sys.modules["huggingface_hub"] = None  # as without it: an import of it fails
from servelab.errors import ServelabError
from servelab.specs import load_model
try:
    print(load_model(sys.argv[1]).num_layers)
except ServelabError as e:
    print(e)
"""


def load_in_a_process(repo_id: str, lookup: str, env: dict) -> str:
    r = subprocess.run([sys.executable, "-c", LOAD, repo_id, lookup], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.mark.parametrize("lookup", ["huggingface_hub", "servelab"])
def test_online_an_id_not_cached_comes_from_the_hub(hub, lookup, tmp_path):
    if lookup == "huggingface_hub":
        pytest.importorskip("huggingface_hub")
    assert load_in_a_process("acme/online", lookup, hub) == "5"
    cached = tmp_path / "hub" / "models--acme--online" / "snapshots" / COMMIT / "config.json"
    # huggingface_hub keeps what it downloads in the cache; without it servelab writes nothing there
    assert cached.is_file() == (lookup == "huggingface_hub")


@pytest.mark.parametrize("lookup", ["huggingface_hub", "servelab"])
def test_online_an_id_the_hub_does_not_have_is_one_line(hub, lookup):
    message = load_in_a_process("acme/nowhere", lookup, hub)
    assert message.startswith(
        "unknown model 'acme/nowhere': not embedded, no config.json of it in the Hugging"
    )
    assert "and the hub did not give one (" in message and "\n" not in message


@pytest.mark.slow  # 1.0 s of CPU a case: a CLI process
def test_the_cli_names_the_model_by_its_id(tmp_path):
    fake_cache(tmp_path / "hub")
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": SRC,
        "HF_HUB_CACHE": str(tmp_path / "hub"),
        "HF_HUB_OFFLINE": "1",
    }
    run = [sys.executable, "-m", "servelab.cli.main"]
    r = subprocess.run([*run, "memory", "acme/tiny-qwen", "--json"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([*run, "memory", "acme/missing"], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("error: unknown model 'acme/missing': not embedded")


def test_a_hub_out_of_reach_is_one_line_after_one_try(tmp_path):
    """No network (a closed port here): one line on stderr, not huggingface_hub's retries and their logs."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": SRC, "HF_HUB_CACHE": str(tmp_path / "hub")}
    env["HF_ENDPOINT"] = f"http://127.0.0.1:{closed}"
    r = subprocess.run(
        [sys.executable, "-m", "servelab.cli.main", "memory", "acme/unreachable"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "and the hub did not give one (" in r.stderr and "Retry" not in r.stderr
