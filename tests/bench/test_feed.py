"""Requests made as they are sent (feed.py): the dataset makes a prompt only when it is read, the parent's
feeder pulls a request only when a worker has room for it, and a whole run never has more than a window
made ahead of what the server received. Assertions are on counts, never on times."""

import fcntl
import json
import os
import pickle
import signal
import subprocess
import sys
import time
import urllib.request
from itertools import islice

import numpy as np
import pytest

from servelab.bench import datasets, feed
from servelab.bench.config import BenchConfig
from servelab.bench.datasets import build_dataset
from servelab.bench.feed import BATCH, FRAME_LENGTH, READ_BYTES, Feeder, FeedReader, WorkItem, window_for
from servelab.bench.runner import Prepared, iter_work_items, prepare, run_point
from servelab.traffic.lengths import sample_lengths

HANG_GUARD_S = 60


def item(n: int, size: int = 200) -> WorkItem:
    return WorkItem(n, b"x" * size, 7, n * 0.01)


def pipe_size(fd: int) -> int:
    return fcntl.fcntl(fd, getattr(fcntl, "F_GETPIPE_SZ", 1032))


def test_a_dataset_makes_a_prompt_only_when_it_is_read(monkeypatch):
    made = []
    original = datasets._TextMaker.random

    def counted(self, n, offset=None):
        made.append(n)
        return original(self, n, offset)

    monkeypatch.setattr(datasets._TextMaker, "random", counted)
    cfg = BenchConfig(model="m", num_prompts=1_000_000, random_input_len=64, random_prefix_len=4, seed=2)
    data = build_dataset(cfg, None)
    assert len(data.items) == 1_000_000 and made == [4]  # the shared prefix only
    first = iter(data.items)
    head = [next(first) for _ in range(5)]
    assert len(made) == 1 + 5
    again = iter(data.items)  # each reading starts from the same state: the same prompts
    assert [next(again) for _ in range(5)] == head


def test_a_stopping_run_walks_the_rest_without_rendering_them():
    cfg = BenchConfig(model="m", num_prompts=100, random_input_len=8)
    prep = prepare(cfg, None)
    stopped = [False]
    items = []
    for it in iter_work_items(cfg, prep.data, prep.template, bare=lambda: stopped[0]):
        items.append(it)
        stopped[0] = len(items) >= 10
    assert len(items) == 100 and [it.key for it in items] == list(range(100))
    assert all(it.payload for it in items[:10]) and not any(it.payload for it in items[10:])
    assert all(it.prompt_len == 8 for it in items)  # still recorded with their lengths


def test_each_worker_gets_its_round_robin_share_in_order():
    pipes = [os.pipe() for _ in range(3)]
    conns = [_Conn(w) for _, w in pipes]
    feeder = Feeder(iter([item(n, size=10) for n in range(1_000)]), conns)  # type: ignore[arg-type]
    feeder.start()
    got = []
    for r, _ in pipes:  # a pipe holds a whole share (about 20 KB): reading one after another cannot block
        reader = FeedReader(_Conn(r))  # type: ignore[arg-type]
        mine = []
        while not reader.ended:
            mine.extend(reader.read())
        got.append([it.key for it in mine])
    feeder.join(HANG_GUARD_S)
    assert got == [list(range(k, 1_000, 3)) for k in range(3)]
    assert feeder.error is None


def test_a_feed_nobody_reads_stops_pulling():
    """A worker whose window is full does not read: the feeder then holds back, with no more made than the
    batch in its hand, the one it is writing and what the pipe buffers."""
    r, w = os.pipe()
    pulled = []

    def requests():
        for n in range(100_000):
            pulled.append(n)
            yield item(n, size=1_000)

    feeder = Feeder(requests(), [_Conn(w)])  # type: ignore[arg-type]
    feeder.start()
    settled, last = 0, -1
    deadline = time.monotonic() + HANG_GUARD_S
    while settled < 5:  # until the count stops moving (the thread waits on the full pipe)
        assert time.monotonic() < deadline, "the feeder never stopped"
        time.sleep(0.05)
        settled = settled + 1 if len(pulled) == last else 0
        last = len(pulled)
    per_item = len(pickle.dumps([item(n, 1_000).packed() for n in range(BATCH)])) / BATCH
    bound = 2 * BATCH + pipe_size(r) / per_item + 1
    assert BATCH < len(pulled) <= bound
    feeder.abandon()
    reader = FeedReader(_Conn(r))  # type: ignore[arg-type]
    while not reader.ended:  # reading lets it go on: it sees the abandon and closes the pipe
        reader.read()
    feeder.join(HANG_GUARD_S)
    assert len(pulled) < 100_000


def test_a_batch_that_comes_in_parts_is_read_once_whole():
    """The loop makes a watched pipe non-blocking: a read finding half a batch waits for the rest."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    reader = FeedReader(_Conn(r))  # type: ignore[arg-type]
    body = pickle.dumps([item(n).packed() for n in range(3)])
    frame = FRAME_LENGTH.pack(len(body)) + body
    os.write(w, frame[:10])
    assert reader.read(block=False) == [] and not reader.ended
    os.write(w, frame[10:] + frame)
    assert [it.key for it in reader.read(block=False)] == [0, 1, 2, 0, 1, 2]
    os.close(w)
    assert reader.read() == [] and reader.ended


@pytest.mark.slow  # 3.4 s of CPU a case: a whole bench with its load worker processes
@pytest.mark.parametrize("prefill", [False, True])
def test_a_whole_run_makes_requests_only_as_they_are_sent(mock_server, tmp_path, monkeypatch, prefill):
    """In a real run (the parent here, a worker process, the mock server), the requests the parent has made
    and the server has not received stay within the worker's window and one read of its pipe, what the pipe
    buffers, three batches and the requests in flight: a few hundred of a run of thousands. With the first
    few MB read before the start (the default; off here but in the second case), a run this short has all
    its requests made before the server receives any but the ready check."""
    if not prefill:
        monkeypatch.setattr(feed, "PREFILL_BYTES", 0)
    server = mock_server("--token-delay-ms", "1")
    num, limit = 6_000, 8
    made, ahead = [0], []
    original = Prepared.work_items

    def counted(self, cfg, bare=None):
        for it in original(self, cfg, bare):
            if bare is not None:  # the feeder's walk (the first request is also read alone, for warm-ups)
                made[0] += 1
                if made[0] % BATCH == 0:
                    with urllib.request.urlopen(server.url + "/stats", timeout=10) as resp:
                        ahead.append(made[0] - json.loads(resp.read())["requests"])
            yield it

    monkeypatch.setattr(Prepared, "work_items", counted)
    cfg = BenchConfig(
        base_url=server.url,
        model="mock",
        num_prompts=num,
        max_concurrency=limit,
        random_input_len=16,
        random_output_len=4,
        num_workers=1,
        live=False,
    )
    with open(os.devnull, "w") as out:
        result, _, code = run_point(cfg, out=out)
    assert code == 0 and result.summary.completed == num and made[0] == num
    sample = [it.packed() for it in islice(prepare(cfg, None).work_items(cfg), 10 * BATCH)]
    per_item = min(len(pickle.dumps(sample[k : k + BATCH])) for k in range(0, len(sample), BATCH)) / BATCH
    r, w = os.pipe()
    pipe_bytes = pipe_size(r)
    os.close(r)
    os.close(w)
    # made ahead of the server: the batch in the feeder's hand, the one it writes, the pipe, a batch read in
    # part, the worker's window and one read of its pipe, the requests in flight
    bound = 3 * BATCH + (pipe_bytes + READ_BYTES) / per_item + window_for(limit) + limit
    assert len(ahead) == num // BATCH
    if prefill:
        # made up to the last count (a multiple of BATCH) when the server had received the ready check only
        assert ahead[-1] == num // BATCH * BATCH - 1
    else:
        assert max(ahead) <= bound < num / 4


@pytest.mark.slow  # 3.3 s of CPU a case: a whole bench with its load worker processes
def test_a_failed_ready_check_ends_a_long_run_of_several_workers(mock_server, tmp_path):
    """Every worker reads its first window, the one whose ready check failed too: a worker that did not would
    leave its pipe full, the feeder waiting on it and the others waiting for their windows (a hang)."""
    server = mock_server("--mode", "http500")
    cmd = [sys.executable, "-m", "servelab.cli.main", "bench", "--base-url", server.url, "--model", "mock",
           "--num-prompts", "20000", "--random-input-len", "64", "--max-concurrency", "64",
           "--num-workers", "2"]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert p.returncode == 2 and "initial test request" in p.stderr, p.stderr


@pytest.mark.slow  # 5.1 s of CPU a case: a whole bench with its load worker processes
def test_ctrl_c_records_every_request_even_those_not_made_yet(mock_server, tmp_path):
    """Interrupted early, a run has made a few hundred of its requests: the rest are still walked, and each
    is recorded as not sent with its own length from the dataset, in the saved records file."""
    server = mock_server("--token-delay-ms", "5")
    num = 30_000
    cmd = [sys.executable, "-m", "servelab.cli.main", "bench", "--base-url", server.url, "--model", "mock",
           "--num-prompts", str(num), "--random-input-len", "32", "--random-range-ratio", "0.5",
           "--random-output-len", "4", "--max-concurrency", "4", "--seed", "9", "--num-workers", "2",
           "--save-result", "--result-dir", str(tmp_path), "--result-filename", "r.json"]  # fmt: skip
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + HANG_GUARD_S
    while json.loads(urllib.request.urlopen(server.url + "/stats").read())["requests"] < 40:
        assert p.poll() is None and time.monotonic() < deadline, "the benchmark never got going"
        time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=HANG_GUARD_S)
    assert p.returncode == 130, err
    records = [json.loads(line) for line in (tmp_path / "r.requests.jsonl").read_text().splitlines()]
    assert sorted(r["i"] for r in records) == list(range(num))
    not_sent = [r for r in records if r["sent"] is None]
    assert len(not_sent) > num - 1_000
    in_lens, _ = sample_lengths(np.random.default_rng(9), num, 32, 4, 0.5)
    assert all(r["in"] == in_lens[r["i"]] for r in not_sent)
    assert {r["err"] for r in not_sent} == {"not sent: interrupted (Ctrl-C or SIGTERM)"}


class _Conn:
    """A bare descriptor with the two methods Feeder and FeedReader use of a Connection."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        os.close(self.fd)
