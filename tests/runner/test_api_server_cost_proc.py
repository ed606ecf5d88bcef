"""accuracy/api_server_cost.py's /proc readers: the CPU time and parent of a process from its stat line (a
command name with spaces and parentheses in it), the listening sockets of a port from /proc/net/tcp, and the
process that holds one. The measurement itself starts vLLM, run by hand (docs/accuracy.md, section 7)."""

import importlib.util
import os
import socket
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "accuracy" / "api_server_cost.py"
_spec = importlib.util.spec_from_file_location("api_server_cost", SCRIPT)
assert _spec is not None and _spec.loader is not None
cost = importlib.util.module_from_spec(_spec)
sys.modules["api_server_cost"] = cost  # its dataclass looks its module up while the module runs
_spec.loader.exec_module(cost)

# a real stat line's shape, its command name made hostile: a space and a ')' inside the parentheses
STAT = (
    "16177 (VLLM::Engine) x) S 16164 16164 16164 0 -1 4194368 160213 0 1 0 5321 187 0 0 20 0 9 0 8123456 "
    "3551232000 301234 18446744073709551615 1 1 0 0 0 0 0 16781312 16386 0 0 0 17 1 0 0 0 0 0"
)

# /proc/net/tcp: a listener on 127.0.0.1:19035 (0x4A5B), a connection to that port, a listener elsewhere
NET_TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:4A5B 00000000:0000 0A 00000000:00000000 00:00000000 00000000 1000 0 77001 1 0 100 0 0 10
   1: 0100007F:4A5B 0100007F:C350 01 00000000:00000000 00:00000000 00000000 1000 0 77002 1 0 20 4 30
   2: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 1000 0 77003 1 0 100 0 0 10
"""


def test_utime_plus_stime_are_counted_after_the_command_name():
    assert cost.stat_cpu_ticks(STAT) == 5321 + 187
    assert cost.stat_ppid(STAT) == 16164
    assert cost.stat_comm(STAT) == "VLLM::Engine) x"


def test_only_the_listening_socket_of_the_port_is_taken():
    assert cost.listening_inodes(NET_TCP, 19035) == {77001}
    assert cost.listening_inodes(NET_TCP, 8080) == {77003}
    assert cost.listening_inodes(NET_TCP, 19036) == set()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_process_that_listens_is_found_among_candidates():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert cost.listener_pid(port, [os.getppid(), os.getpid()]) == os.getpid()
    with pytest.raises(RuntimeError, match="expected one process listening"):
        cost.listener_pid(port, [os.getpid()])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_own_stat_line_reads_as_this_process():
    line = Path(f"/proc/{os.getpid()}/stat").read_text()
    assert cost.stat_ppid(line) == os.getppid()
    assert cost.process_cpu_s(os.getpid()) > 0


def test_a_run_is_two_waves_and_enough_tokens():
    assert cost.requests_for(1, 256, 4096) == 16
    assert cost.requests_for(64, 256, 4096) == 128
    assert cost.requests_for(4, 512, 1000) == 8


def _run(steps, chunks, tokens, requests):
    # a load whose API CPU is 200 us a step, 40 a chunk, 5 a token and 2 ms a request
    cpu_us = 200 * steps + 40 * chunks + 5 * tokens + 2000 * requests
    return {
        "steps": steps,
        "chunks": chunks,
        "completion_tokens": tokens,
        "requests": requests,
        "api_cpu_s": cpu_us / 1e6,
    }


def test_the_fit_takes_a_load_apart_into_steps_chunks_tokens_and_requests():
    runs = [
        _run(256, 4096, 4096, 16),
        _run(80, 3000, 4096, 16),
        _run(400, 410, 4096, 16),
        _run(64, 1024, 1024, 32),
        _run(40, 160, 1024, 32),
        _run(300, 2048, 2048, 64),
    ]
    fit = cost.fit_costs(runs)
    assert fit is not None
    assert (fit["per_step_us"], fit["per_chunk_us"], fit["per_token_us"], fit["per_request_us"]) == (
        pytest.approx(200, abs=0.1),
        pytest.approx(40, abs=0.1),
        pytest.approx(5, abs=0.1),
        pytest.approx(2000, abs=1),
    )
    assert fit["median_abs_residual_pct"] == 0


def test_runs_of_one_chunk_per_token_cannot_tell_chunks_from_tokens():
    runs = [
        _run(s, t, t, r)
        for s, t, r in ((256, 4096, 16), (80, 4096, 16), (64, 1024, 32), (300, 2048, 64), (9, 99, 3))
    ]
    assert cost.fit_costs(runs) is None
