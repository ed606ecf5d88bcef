"""scripts/device_vllm/server_args.sh, as start.sh runs it on the device: SERVER_ARGS becomes the server's
extra argv only where every flag is one of the three scheduler limits a held-out set may change (or the
largest CUDA graph) and every value is of its kind; anything else stops the start in one line with status 2,
before any server runs."""

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "device_vllm" / "server_args.sh"

FLAGS = "expected --max-num-batched-tokens, --max-num-seqs, --gpu-memory-utilization, " + (
    "--max-cudagraph-capture-size or --stream-interval"
)

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="the device's scripts are bash")


def server_argv(text: str) -> tuple[int, list[str], str]:
    """server_args with SERVER_ARGS=text: its status, SERVER_ARGV one word a line, and what it printed."""
    shell = f'source "{SCRIPT}"; server_args; status=$?; printf "%s\\n" "${{SERVER_ARGV[@]}}"; exit $status'
    done = subprocess.run(
        ["bash", "-c", shell],
        env={"SERVER_ARGS": text, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    return done.returncode, [w for w in done.stdout.splitlines() if w], done.stderr


def test_a_recipes_three_limits_become_the_servers_argv_word_by_word():
    text = "--max-num-batched-tokens 2048  --max-num-seqs 48 --gpu-memory-utilization 0.83"
    assert server_argv(text) == (0, text.split(), "")
    assert server_argv("--gpu-memory-utilization 1") == (0, ["--gpu-memory-utilization", "1"], "")
    graphs = "--max-num-seqs 32 --max-cudagraph-capture-size 1024"
    assert server_argv(graphs) == (0, graphs.split(), "")
    streamed = "--stream-interval 20"
    assert server_argv(streamed) == (0, streamed.split(), "")


def test_no_server_args_keep_vllms_defaults():
    assert server_argv("") == (0, [], "")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("--port 9000", f"{FLAGS}, got '--port'"),
        ("--max-num-seqs 48 --enforce-eager", f"{FLAGS}, got '--enforce-eager'"),
        ("--max-num-seqs 4x", "--max-num-seqs expects a positive integer, got '4x'"),
        ("--max-num-seqs 0", "--max-num-seqs expects a positive integer, got '0'"),
        ("--max-num-batched-tokens", "--max-num-batched-tokens expects a positive integer, got ''"),
        ("--max-num-seqs $(id)", "--max-num-seqs expects a positive integer, got '$(id)'"),
        ("--gpu-memory-utilization 1.2", "--gpu-memory-utilization expects a share in (0, 1], got '1.2'"),
        (
            "--max-cudagraph-capture-size -1",
            "--max-cudagraph-capture-size expects a positive integer, got '-1'",
        ),
        ("--stream-interval 0", "--stream-interval expects a positive integer, got '0'"),
        ("--gpu-memory-utilization 0.0", "--gpu-memory-utilization expects a share in (0, 1], got '0.0'"),
    ],
)
def test_anything_else_stops_the_start_in_one_line(text, says):
    status, argv, err = server_argv(text)
    assert status == 2 and argv == []
    assert err == f"SERVER_ARGS: {says}\n"
