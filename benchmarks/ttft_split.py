"""Where `servelab bench`'s TTFT inflation against the mock comes from (issue 33): one run of the mock
scenario of benchmarks/loadgen_vs_vllm.py (10 ms a token, 128 output tokens, 32-token prompts with the tiny
Llama tokenizer) at a chosen concurrency, with the mock instrumented, and each request's TTFT split in three:

  server read   the mock parsed the request (wall clock) minus the client's `sent` (its loop busy elsewhere)
  first timer   the mock wrote the first token minus (parsed + the first-token delay): its timer's lateness
  client read   the client's first-token time minus the mock's write (the client's loop busy elsewhere)

Requests are matched by X-Request-Id (--request-id-prefix d-, so the id is the record's index); times are
compared on the wall clock (the result's benchmark_start_time_unix + a record's `sent`; the mock's
time.time()).
The mock's instrumentation is a subclass (one extra attribute test a token, one time.time() a request); its
per-token lateness (every token against its absolute due time) and CPU seconds are reported too, with the
client's. The wave view: in a closed loop of equal requests, those sent together finish together, so each
"wave" of `concurrency` requests is sent in one burst; TTFT by position in its burst tells queueing from a
constant delay.

    python benchmarks/ttft_split.py [--concurrency 1024] [--prompts 6144] [--src PATH] [--out DIR]
    python benchmarks/ttft_split.py --mock PORT TOKEN_MS LOGFILE      # the instrumented mock (internal)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from servelab.bench.records import read_jsonl

REPO = Path(__file__).resolve().parents[1]
# the tiny Llama that benchmarks/loadgen_vs_vllm.py builds (its tokenizer only), or $SERVELAB_TINY_LLAMA
TINY = sorted((REPO / ".cache" / "e2e").glob("tiny-llama-*"))
TOKENIZER = Path(os.environ.get("SERVELAB_TINY_LLAMA") or (TINY[0] if TINY else "tiny-llama-not-built"))


def run_mock(port: int, token_ms: float, log_path: str) -> None:
    """The mock server with a log of each request's parse and first-write time and every token's lateness."""
    import asyncio  # noqa: PLC0415 (only the mock's process needs these)

    from servelab.bench import mock_server as m  # noqa: PLC0415

    log: list[list] = []
    late = {"n": 0, "sum": 0.0, "max": 0.0, "over1ms": 0, "over5ms": 0}

    base = m._Stream

    class Stream(m._Stream):
        __slots__ = ("diag",)

        def arm(self) -> None:  # as _Stream.arm; the first token's callback notes its write time
            s = self.proto.s
            when = self.start + s.first_delay + self.k * s.token_delay
            cb = self.fire if self.k else self.first
            self.proto.handle_timer = self.proto.loop.call_at(when, cb, when)

        def fire(self, when: float = 0.0) -> None:  # type: ignore[override]
            d = time.monotonic() - when
            late["n"] += 1
            late["sum"] += d
            late["max"] = max(late["max"], d)
            late["over1ms"] += d > 0.001
            late["over5ms"] += d > 0.005
            base.fire(self)

        def first(self, when: float) -> None:
            self.proto.diag[2] = time.time()
            self.fire(when)

    m._Stream = Stream  # type: ignore[misc]
    orig = m.MockProtocol.handle

    def handle(self, head: bytes, body: bytes) -> None:
        t = time.time()
        i = head.find(b"X-Request-Id: ")
        j = head.find(b"\r\n", i)
        rid = head[i + 14 : j if j >= 0 else len(head)].decode() if i >= 0 else None
        self.diag = [rid, t, 0.0]
        log.append(self.diag)
        orig(self, head, body)

    m.MockProtocol.handle = handle  # type: ignore[method-assign]

    prof = None
    if os.environ.get("TTFT_SPLIT_MOCK_PROFILE"):  # a cProfile of the mock (slower: for proportions only)
        import cProfile  # noqa: PLC0415

        prof = cProfile.Profile()
        prof.enable()

    def dump(*_: object) -> None:
        if prof is not None:
            prof.disable()
            prof.dump_stats(os.environ["TTFT_SPLIT_MOCK_PROFILE"])
        ru = resource.getrusage(resource.RUSAGE_SELF)
        with open(log_path, "w") as f:
            json.dump({"requests": log, "late": late, "cpu_s": ru.ru_utime + ru.ru_stime}, f)
        os._exit(0)

    signal.signal(signal.SIGTERM, dump)
    a = m.parse_args(["--port", str(port), "--token-delay-ms", str(token_ms)])
    import uvloop  # noqa: PLC0415

    uvloop.install()
    asyncio.run(m.serve(a))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", type=int, default=1024)
    ap.add_argument("--prompts", type=int, default=6144)
    ap.add_argument("--token-ms", type=float, default=10.0)
    ap.add_argument("--src", default=str(REPO / "src"), help="the servelab source tree the client runs")
    ap.add_argument("--out", default="/tmp/ttft-split")
    ap.add_argument("--tag", default="run")
    ap.add_argument("--plain-mock", action="store_true", help="the mock as shipped: no split, its cost only")
    ap.add_argument("--extra", default="", help="more `servelab bench` arguments (one string)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    mock_log = out / f"{a.tag}-mock.json"
    env = dict(os.environ, PYTHONPATH=a.src, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    mock_cmd = [sys.executable, __file__, "--mock", str(port), str(a.token_ms), str(mock_log)]
    if a.plain_mock:
        mock_cmd = [sys.executable, "-m", "servelab.bench.mock_server", "--port", str(port)]
        mock_cmd += ["--token-delay-ms", str(a.token_ms)]
    mock = subprocess.Popen(mock_cmd, env=env, stdout=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    name = f"{a.tag}.json"
    for old in (out / name, out / f"{a.tag}.requests.jsonl"):
        old.unlink(missing_ok=True)
    cmd = [
        sys.executable, "-m", "servelab.cli.main", "bench", "--base-url", f"http://127.0.0.1:{port}",
        "--model", "mock", "--tokenizer", str(TOKENIZER), "--dataset-name", "random",
        "--random-input-len", "32", "--random-output-len", "128", "--num-prompts", str(a.prompts),
        "--max-concurrency", str(a.concurrency), "--ignore-eos", "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--save-result", "--result-dir", str(out), "--result-filename", name, "--temperature", "0",
        "--no-live", "--num-workers", "0", "--request-id-prefix", "d-", *a.extra.split(),
    ]  # fmt: skip
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    mock.send_signal(signal.SIGTERM)
    mock.wait(30)
    if p.returncode != 0:
        sys.exit(f"bench failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    r = json.loads((out / name).read_text())
    if a.plain_mock:
        ideal = a.concurrency / (128 * a.token_ms / 1000.0)
        plain = {"tag": a.tag, "loadavg_before": load, "pct_ideal": 100.0 * r["request_throughput"] / ideal}
        plain["ttft_inflation_ms"] = r["mean_ttft_ms"] - a.token_ms
        (out / f"{a.tag}-split.json").write_text(json.dumps(plain, indent=1))
        print(json.dumps(plain, indent=1))
        return
    m = json.loads(mock_log.read_text())
    srv = {rid: (t_parse, t_first) for rid, t_parse, t_first in m["requests"] if rid}
    t0 = r["benchmark_start_time_unix"] if "benchmark_start_time_unix" in r else r["start_unix"]
    first = a.token_ms / 1000.0
    rows = []
    for rec in read_jsonl(Path(r["records_file"])):  # either form of the records (records.py)
        if not rec.get("ok"):
            continue
        s = srv.get(f"d-{rec['i']}")
        if s is None:
            continue
        sent = t0 + rec["sent"]
        got = sent + rec["chunks"][0] / 1e6
        rows.append((rec["sent"], got - sent - first, s[0] - sent, s[1] - s[0] - first, got - s[1]))
    rows.sort()
    # waves: a gap of over 100 ms between consecutive sends starts a new burst
    waves: list[list[tuple]] = [[]]
    for row in rows:
        if waves[-1] and row[0] - waves[-1][-1][0] > 0.1:
            waves.append([])
        waves[-1].append(row)
    ms = 1000.0
    client_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    c = r.get("client", {})
    summary = {
        "tag": a.tag,
        "src": a.src,
        "loadavg_before": load,
        "req_s": r["request_throughput"],
        "pct_ideal": 100.0 * r["request_throughput"] / (a.concurrency / (128 * a.token_ms / 1000.0)),
        "mean_ttft_ms": r["mean_ttft_ms"],
        "ttft_inflation_ms": r["mean_ttft_ms"] - a.token_ms,
        "split_ms": {
            "inflation (matched)": mean([x[1] for x in rows]) * ms,
            "server read": mean([x[2] for x in rows]) * ms,
            "first timer": mean([x[3] for x in rows]) * ms,
            "client read": mean([x[4] for x in rows]) * ms,
        },
        "matched": len(rows),
        "waves": [
            {
                "n": len(w),
                "send_spread_ms": (w[-1][0] - w[0][0]) * ms,
                "inflation_ms": mean([x[1] for x in w]) * ms,
                "server_read_ms": mean([x[2] for x in w]) * ms,
                "first_timer_ms": mean([x[3] for x in w]) * ms,
                "client_read_ms": mean([x[4] for x in w]) * ms,
                "inflation_by_quarter_ms": [
                    mean([x[1] for x in w[q * len(w) // 4 : (q + 1) * len(w) // 4]]) * ms for q in range(4)
                ],
            }
            for w in waves
        ],
        "mock_token_lateness": {
            "mean_ms": m["late"]["sum"] / max(1, m["late"]["n"]) * ms,
            "max_ms": m["late"]["max"] * ms,
            "over_1ms_pct": 100.0 * m["late"]["over1ms"] / max(1, m["late"]["n"]),
            "over_5ms_pct": 100.0 * m["late"]["over5ms"] / max(1, m["late"]["n"]),
        },
        "cpu_s": {"mock": m["cpu_s"], "client (all processes)": client_cpu},
        "client_worker_cpu_s": c.get("cpu_seconds"),
        "duration_s": r["duration"],
        "client_loop_lag_ms": [c.get(f"event_loop_lag_{k}_ms") for k in ("mean", "p99", "max")],
        "send_lag_ms": [r.get("mean_client_send_lag_ms"), r.get("p99_client_send_lag_ms")],
    }  # fmt: skip
    (out / f"{a.tag}-split.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--mock":
        run_mock(int(sys.argv[2]), float(sys.argv[3]), sys.argv[4])
    else:
        main()
