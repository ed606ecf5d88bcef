"""accuracy/api_server_cost.py's /proc readers: the CPU time and parent of a process from its stat line (a
command name with spaces and parentheses in it), the listening sockets of a port from /proc/net/tcp, and the
process that holds one. The measurement itself starts vLLM, run by hand (docs/accuracy.md, section 7)."""

import json
import sys

import pytest
from accuracy_python import run_accuracy_python

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


FIT_RUNS = [
    _run(256, 4096, 4096, 16),
    _run(80, 3000, 4096, 16),
    _run(400, 410, 4096, 16),
    _run(64, 1024, 1024, 32),
    _run(40, 160, 1024, 32),
    _run(300, 2048, 2048, 64),
]
# the same loads, some with long prompts (--long-prompt-words): 1.5 us more a prompt token


def _prompted(run, prompt_tokens, words):
    cpu_s = run["api_cpu_s"] + 1.5 * prompt_tokens / 1e6
    return {**run, "prompt_tokens": prompt_tokens, "prompt_words": words, "api_cpu_s": cpu_s}


PROMPT_RUNS = [_prompted(r, 17 * r["requests"], 16) for r in FIT_RUNS] + [
    _prompted(_run(70, 1000, 1000, 32), 32 * 701, 700),
    _prompted(_run(20, 2000, 2000, 64), 64 * 701, 700),
]
# one chunk per token everywhere: chunks and tokens cannot be told apart
ONE_CHUNK_RUNS = [
    _run(s, t, t, r)
    for s, t, r in ((256, 4096, 16), (80, 4096, 16), (64, 1024, 32), (300, 2048, 64), (9, 99, 3))
]

# What the script answers, asked in a python of its own: the script is not a package, so it runs as
# `python accuracy/api_server_cost.py` would, with accuracy/ on PYTHONPATH (tests/architecture/test_scripts.py
# does the same). The listener and this process's own stat line are read there too.
ASK = """
import json, os, socket, sys
import api_server_cost as cost
given = json.load(sys.stdin)
out = {}
stat = given["stat"]
out["ticks"], out["ppid"], out["comm"] = cost.stat_cpu_ticks(stat), cost.stat_ppid(stat), cost.stat_comm(stat)
out["inodes"] = {str(p): sorted(cost.listening_inodes(given["net_tcp"], p)) for p in (19035, 8080, 19036)}
if sys.platform.startswith("linux"):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out["listener"] = cost.listener_pid(port, [os.getppid(), os.getpid()]) == os.getpid()
    try:  # closed now: nobody listens
        cost.listener_pid(port, [os.getpid()])
        out["refused"] = ""
    except RuntimeError as e:
        out["refused"] = str(e)
    own = open(f"/proc/{os.getpid()}/stat").read()
    out["own_ppid_ok"] = cost.stat_ppid(own) == os.getppid()
    out["own_cpu_s"] = cost.process_cpu_s(os.getpid())
loads = ((1, 256, 4096), (64, 256, 4096), (4, 512, 1000))
out["requests_for"] = [cost.requests_for(c, n, t) for c, n, t in loads]
out["fit"] = cost.fit_costs(given["fit_runs"])
out["one_chunk_fit"] = cost.fit_costs(given["one_chunk_runs"])
out["prompt_fit"] = cost.fit_costs(given["prompt_runs"])
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def answers() -> dict:
    given = {
        "stat": STAT,
        "net_tcp": NET_TCP,
        "fit_runs": FIT_RUNS,
        "one_chunk_runs": ONE_CHUNK_RUNS,
        "prompt_runs": PROMPT_RUNS,
    }
    return json.loads(run_accuracy_python(["-c", ASK], stdin=json.dumps(given)))


def test_utime_plus_stime_are_counted_after_the_command_name(answers):
    assert answers["ticks"] == 5321 + 187
    assert answers["ppid"] == 16164
    assert answers["comm"] == "VLLM::Engine) x"


def test_only_the_listening_socket_of_the_port_is_taken(answers):
    assert answers["inodes"] == {"19035": [77001], "8080": [77003], "19036": []}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_process_that_listens_is_found_among_candidates(answers):
    assert answers["listener"] is True
    assert "expected one process listening" in answers["refused"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_own_stat_line_reads_as_this_process(answers):
    assert answers["own_ppid_ok"] is True
    assert answers["own_cpu_s"] > 0


def test_a_run_is_two_waves_and_enough_tokens(answers):
    assert answers["requests_for"] == [16, 128, 8]


def test_the_fit_takes_a_load_apart_into_steps_chunks_tokens_and_requests(answers):
    fit = answers["fit"]
    assert fit is not None
    assert (fit["per_step_us"], fit["per_chunk_us"], fit["per_token_us"], fit["per_request_us"]) == (
        pytest.approx(200, abs=0.1),
        pytest.approx(40, abs=0.1),
        pytest.approx(5, abs=0.1),
        pytest.approx(2000, abs=1),
    )
    assert fit["median_abs_residual_pct"] == 0


def test_runs_of_one_chunk_per_token_cannot_tell_chunks_from_tokens(answers):
    assert answers["one_chunk_fit"] is None


def test_runs_of_two_prompt_lengths_also_price_a_prompt_token(answers):
    fit = answers["prompt_fit"]
    assert fit is not None
    assert fit["per_prompt_token_us"] == pytest.approx(1.5, abs=0.01)
    assert fit["per_request_us"] == pytest.approx(2000, abs=1)
    # runs of one prompt length (FIT_RUNS) have no prompt term: it would be the request's under another name
    assert "per_prompt_token_us" not in answers["fit"]
