"""Orchestration: dataset -> pre-serialized requests -> worker processes -> merged records -> result.

One worker process per core (each its own event loop and schedule share, round-robin), started with
'spawn' so no parent state (tokenizer thread pools, rich consoles) leaks into them. Workers get ready
(connection pool, ready check, warm-ups), then all start at one shared monotonic time T0.
Ctrl-C: the parent tells workers to stop; what was measured is merged and saved; exit code 130.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from multiprocessing.connection import wait
from pathlib import Path
from time import perf_counter

from servelab.bench import result as R
from servelab.bench.config import BenchConfig
from servelab.bench.datasets import Dataset, build_dataset
from servelab.bench.measured import MeasuredRequest, client_stats, derive
from servelab.bench.payload import RequestTemplate, Target, api_key_from_env
from servelab.bench.records import merge_jsonl
from servelab.bench.schedule import arrival_offsets, split_limit, split_round_robin
from servelab.bench.tokenizer import LocalTokenizer, load_tokenizer
from servelab.bench.worker import PROGRESS_SLOTS, WorkerSpec, WorkItem, worker_main
from servelab.errors import ServelabError
from servelab.metrics import percentile, summarize

# Thresholds for the client-bottleneck warning (why: above these the client, not the server, shapes latency).
CPU_BUSY_PCT = 90.0  # a worker busy >= 90 % of a core has no headroom left for timely reads
LOOP_LAG_P99_MS = 5.0  # timers / reads late by more than this inflate TTFT and ITL by as much
SEND_LAG_P99_MS = 5.0  # requests leaving later than scheduled (after the first cohort) by more than this


def fetch_model_id(base_url: str, api_key: str | None, timeout: float = 10.0) -> str:
    """vLLM asks /v1/models for the first model when --model is not given; so do we."""
    req = urllib.request.Request(base_url + "/v1/models")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            data = json.loads(resp.read())
        return data["data"][0]["id"]
    except Exception as e:  # network errors come in many types; the user needs one line
        raise ServelabError(f"--model not given and {base_url}/v1/models did not name one ({e})") from None


class LiveLine:
    """One status line about ten times a second, on a terminal only (off in CI and when piped)."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.enabled = enabled
        self.total = total
        self.hist: list[tuple[float, float, float]] = []

    def update(self, elapsed: float, p, num_workers: int) -> None:
        if not self.enabled:
            return
        rows = [p[k * PROGRESS_SLOTS : (k + 1) * PROGRESS_SLOTS] for k in range(num_workers)]
        done, failed, toks = (sum(r[i] for r in rows) for i in range(3))
        inflight = sum(r[3] for r in rows)
        ttfts = [r[4] for r in rows if r[4] > 0]
        cpu = max((r[5] for r in rows), default=0.0)
        self.hist.append((elapsed, done, toks))
        self.hist = [h for h in self.hist if elapsed - h[0] <= 1.0]
        t0, d0, k0 = self.hist[0]
        span = max(elapsed - t0, 1e-9)
        rps, tps = (done - d0) / span, (toks - k0) / span
        ttft = f"{sum(ttfts) / len(ttfts):.1f}" if ttfts else "-"
        msg = (
            f"\r\x1b[2K[{elapsed:6.1f}s] done {int(done)}/{self.total}  failed {int(failed)}  in flight "
            f"{int(inflight)}  {rps:7.1f} req/s  {tps:9.0f} tok/s  TTFT p50 {ttft} ms  client CPU {cpu:.0f}%"
        )
        sys.stderr.write(msg)
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()


def build_items(cfg: BenchConfig, data: Dataset, template: RequestTemplate) -> list[WorkItem]:
    offsets = arrival_offsets(
        cfg.num_prompts if cfg.dataset_name == "multiturn" else len(data.items),
        cfg.request_rate,
        cfg.burstiness,
        cfg.seed,
        cfg.ramp_up_strategy,
        cfg.ramp_up_start_rps,
        cfg.ramp_up_end_rps,
    )
    items = []
    for n, it in enumerate(data.items):
        off = offsets[n] if offsets is not None else None
        if it.turns:
            messages = [{"role": "user", "content": it.prompt}]
            items.append(
                WorkItem(
                    it.index * 1000,
                    template.encode(messages, it.output_len),
                    it.prompt_len,
                    off,
                    messages,
                    it.turns,
                )
            )
        else:
            items.append(WorkItem(it.index, template.encode(it.prompt, it.output_len), it.prompt_len, off))
    return items


def num_workers_for(cfg: BenchConfig, num_items: int) -> int:
    """One per core; when the server is on this machine (loopback), leave it a core: on the 2-core box a
    second client process starved the local server (bench/loadgen_vs_vllm.py, docs/benchmarks.md, section 3)."""
    n = cfg.num_workers
    if not n:
        cores = os.cpu_count() or 1
        local = Target.from_url(cfg.base_url).host in ("127.0.0.1", "localhost", "::1", "0.0.0.0")
        n = cores - 1 if local and cores > 1 else cores
    if cfg.max_concurrency is not None:
        n = min(n, cfg.max_concurrency)
    return max(1, min(n, num_items))


def run_point(cfg: BenchConfig, tok: LocalTokenizer | None = None, out=None) -> tuple[dict, Path | None, int]:
    """Run one benchmark point. Returns (result dict, saved path or None, exit code)."""
    out = out or sys.stdout
    api_key = api_key_from_env()
    model_id = cfg.model or fetch_model_id(cfg.base_url, api_key)
    tok = tok if tok is not None else load_tokenizer(cfg.tokenizer)
    data = build_dataset(cfg, tok)
    sampling = {
        k: v
        for k, v in (("temperature", cfg.temperature), ("top_p", cfg.top_p), ("top_k", cfg.top_k))
        if v is not None
    }
    template = RequestTemplate(
        Target.from_url(cfg.base_url),
        cfg.endpoint,
        cfg.served_model_name or model_id,
        cfg.is_chat,
        cfg.stream,
        bool(cfg.ignore_eos),
        sampling,
        api_key,
    )
    items = build_items(cfg, data, template)
    date = R.now_stamp()
    result_path = None
    if cfg.save_result:
        result_path = Path(cfg.result_dir or ".") / (
            cfg.result_filename or R.default_filename(cfg, model_id, date)
        )
        records_dir = result_path.with_name(result_path.stem + ".requests.d")
        records_dir.mkdir(parents=True, exist_ok=True)
    else:
        records_dir = Path(tempfile.mkdtemp(prefix="servelab-bench-"))

    n_workers = num_workers_for(cfg, len(items))
    shares = split_round_robin(list(range(len(items))), n_workers)
    limits = split_limit(cfg.max_concurrency, n_workers)
    warm = [items[0].payload] * cfg.num_warmups
    keep_text = cfg.save_detailed or cfg.dataset_name == "multiturn"
    specs = []
    for k in range(n_workers):
        share = [items[i] for i in shares[k]]
        pre = min(len(share), limits[k] if limits[k] is not None else 64)
        specs.append(
            WorkerSpec(
                k,
                template,
                share,
                limits[k],
                cfg.request_timeout_s,
                str(records_dir / f"worker-{k}.jsonl"),
                warmups=warm[k::n_workers],
                ready_check=items[0].payload if (k == 0 and cfg.ready_check) else None,
                keep_text=keep_text,
                use_uvloop=cfg.use_uvloop,
                preconnect=pre,
            )
        )
    ctx = mp.get_context("spawn")
    progress = ctx.Array("d", n_workers * PROGRESS_SLOTS, lock=False)
    stop = ctx.Event()
    procs, pipes = [], []
    for spec in specs:
        parent_end, child_end = ctx.Pipe()
        p = ctx.Process(target=worker_main, args=(spec, progress, stop, child_end), daemon=True)
        p.start()
        procs.append(p)
        pipes.append(parent_end)
    interrupted = False
    summaries: list[dict] = []
    infos: list[dict] = []
    live = LiveLine(cfg.live if cfg.live is not None else sys.stderr.isatty(), len(items))
    t0 = 0.0
    try:
        infos = [_recv(p, procs) for p in pipes]
        ready_error = next((i["ready_error"] for i in infos if i.get("ready_error")), None)
        if ready_error:
            for p in pipes:
                p.send(("stop",))
            raise ServelabError(f"initial test request to {cfg.base_url}{cfg.endpoint} failed: {ready_error}")
        t0 = perf_counter() + 0.05
        for p in pipes:
            p.send(("start", t0))
        summaries = _wait_done(pipes, procs, progress, live, t0, stop)
    except KeyboardInterrupt:
        interrupted = True
        stop.set()
        try:
            summaries = _wait_done(pipes, procs, progress, live, t0, stop, grace=10.0)
        except KeyboardInterrupt:
            pass
    finally:
        live.close()
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
    worker_files = [Path(s.out_path) for s in specs]
    merged_path = (
        result_path.with_name(result_path.stem + ".requests.jsonl")
        if result_path
        else records_dir / "requests.jsonl"
    )
    records = merge_jsonl(worker_files, merged_path)
    if result_path:
        shutil.rmtree(records_dir, ignore_errors=True)
    res = compute_result(cfg, records, summaries, infos, data, tok, model_id, date, t0 and 0.0)
    res["interrupted"] = interrupted
    if result_path:
        res["records_file"] = str(merged_path)
    R.print_report(res, cfg.percentile_metrics, file=out)
    if res["client_bottleneck_warning"]:
        _warn("the client may have been the bottleneck: " + res["client_bottleneck_warning"])
    if res["one_read_warning"]:
        _warn(res["one_read_warning"])
    if result_path:
        R.save(res, result_path, cfg.save_detailed)
        print(f"result: {result_path}", file=out)
    else:
        shutil.rmtree(records_dir, ignore_errors=True)
    code = 130 if interrupted else (1 if (res["failed"] or res.get("not_sent")) else 0)
    return res, result_path, code


def _warn(msg: str) -> None:
    red = "\x1b[1;31m" if sys.stderr.isatty() else ""
    reset = "\x1b[0m" if red else ""
    sys.stderr.write(f"{red}WARNING: {msg}{reset}\n")


def _recv(pipe, procs) -> dict:
    while True:
        if pipe.poll(0.2):
            kind, payload = pipe.recv()
            if kind == "error":
                raise ServelabError(payload)
            return payload
        if not any(p.is_alive() for p in procs):
            raise ServelabError("a bench worker process died before it was ready")


def _wait_done(pipes, procs, progress, live, t0, stop, grace: float | None = None) -> list[dict]:
    summaries: dict[int, dict] = {}
    waiting = {id(p): (k, p) for k, p in enumerate(pipes)}
    deadline = time.monotonic() + grace if grace else None
    while waiting:
        ready = wait([p for _, p in waiting.values()], timeout=0.1)
        for conn in ready:
            k, _ = waiting.pop(id(conn))
            try:
                kind, payload = conn.recv()
            except EOFError:
                continue
            if kind == "done":
                summaries[k] = payload
            else:
                print(f"warning: {payload}", file=sys.stderr)
        live.update(perf_counter() - t0, progress, len(pipes))
        for k, p in list(waiting.values()):
            if not procs[k].is_alive() and not p.poll():
                waiting.pop(id(p))  # died without a summary: its JSONL file still holds what it did
        if deadline and time.monotonic() > deadline:
            break
    return [summaries[k] for k in sorted(summaries)]


def resolve_output_len(rec: dict, tok: LocalTokenizer | None) -> tuple[int, str]:
    if rec.get("out") is not None:
        return int(rec["out"]), "usage"
    if tok is not None:
        return tok.count(rec.get("text") or ""), "tokenizer"
    return len(rec.get("chunks") or []), "content events (approximate: no usage, no tokenizer)"


def compute_result(
    cfg: BenchConfig,
    records: list[dict],
    summaries: list[dict],
    infos: list[dict],
    data: Dataset,
    tok: LocalTokenizer | None,
    model_id: str,
    date: str,
    _t0: float,
) -> dict:
    sent = [r for r in records if r.get("sent") is not None]
    not_sent = [r for r in records if r.get("sent") is None]
    reqs, sources = [], Counter()
    out_lens = []
    for r in sent:
        if r["ok"]:
            n, src = resolve_output_len(r, tok)
            sources[src] += 1
        else:
            n = 0
        out_lens.append(n)
        reqs.append(derive(r, n))
    duration = max((r["end"] for r in sent), default=0.0)  # from T0 (the first dispatch) to the last end
    res = R.header_fields(cfg, model_id, date)
    res.update(
        summarize(reqs, duration, cfg.percentile_metrics, cfg.metric_percentiles, cfg.goodput).fields()
    )
    res.update(client_stats(reqs, cfg.metric_percentiles))
    res["not_sent"] = len(not_sent)
    reasons = Counter(_reason_key(r["err"]) for r in records if not r["ok"])
    res["failure_reasons"] = dict(reasons.most_common())
    res["token_count_source"] = (
        next(iter(sources))
        if len(sources) == 1
        else ("mixed: " + ", ".join(f"{k} x{v}" for k, v in sources.items()))
        if sources
        else "none"
    )
    in_src = Counter(r.get("in_src") for r in sent if r["ok"])
    res["prompt_len_source"] = (
        "server usage.prompt_tokens"
        if in_src and set(in_src) == {"usage"}
        else f"dataset ({data.prompt_len_source})"
        if not in_src.get("usage")
        else f"mixed: usage x{in_src['usage']}, dataset ({data.prompt_len_source}) x{in_src.get('dataset', 0)}"
    )
    res["client"] = client_section(summaries, infos, res)
    res["client_bottleneck_warning"] = bottleneck_warning(res, reqs, cfg)
    res["one_read_requests"], res["one_read_warning"] = one_read_warning(reqs, cfg)
    res.update(R.provenance())
    res["config"] = cfg.public_dump()
    # detail fields (saved only with --save-detailed), in request order like vLLM
    order = sorted(range(len(sent)), key=lambda i: sent[i]["i"])
    res["input_lens"] = [reqs[i].prompt_len for i in order]
    res["output_lens"] = [out_lens[i] for i in order]
    res["ttfts"] = [reqs[i].ttft_s for i in order]
    res["itls"] = [reqs[i].itl_s for i in order]
    res["latencies"] = [reqs[i].e2el_s for i in order]
    res["start_times"] = [reqs[i].start_s for i in order]
    res["generated_texts"] = [sent[i].get("text", "") for i in order]
    res["errors"] = [sent[i]["err"] or "" for i in order]
    return res


def _reason_key(err: str | None) -> str:
    """Group failure reasons: drop the per-request numbers so identical causes count together."""
    import re

    return re.sub(
        r"after \d+ content events|\(\d+ content events\)", "after N content events", err or "unknown"
    )


def client_section(summaries: list[dict], infos: list[dict], res: dict) -> dict:
    lags = sorted(x for s in summaries for x in s["loop_lag_s"])
    cpu = sum(s["cpu_s"] for s in summaries)
    events = sum(s["content_events"] for s in summaries)
    p99 = percentile(lags, 99) * 1000 if lags else 0.0
    return {
        "num_workers": len(summaries),
        "event_loop": ",".join(sorted({s["loop"] for s in summaries})) or "-",
        "cpu_seconds": cpu,
        "cpu_util_per_worker_pct": [100.0 * s["cpu_s"] / max(s["wall_s"], 1e-9) for s in summaries],
        "cpu_us_per_content_event": 1e6 * cpu / events if events else 0.0,
        "event_loop_lag_mean_ms": 1000 * sum(lags) / len(lags) if lags else 0.0,
        "event_loop_lag_p99_ms": p99,
        "event_loop_lag_max_ms": lags[-1] * 1000 if lags else 0.0,
        "event_loop_lag_note": "sampled every 10 ms; asyncio/uvloop timers round up to 1 ms, so ~0.5-1 ms is the floor",
        "connections_opened": sum(s["connections_opened"] for s in summaries),
        "warmup_failed": sum(i.get("warmup_failed", 0) for i in infos),
        "abort_reasons": [s["abort_reason"] for s in summaries if s.get("abort_reason")],
    }


def bottleneck_warning(res: dict, reqs: list[MeasuredRequest], cfg: BenchConfig) -> str | None:
    c = res["client"]
    why = []
    busy = [u for u in c["cpu_util_per_worker_pct"] if u >= CPU_BUSY_PCT]
    if busy:
        why.append(f"{len(busy)} worker(s) used >= {CPU_BUSY_PCT:.0f}% of a core (max {max(busy):.0f}%)")
    if c["event_loop_lag_p99_ms"] > LOOP_LAG_P99_MS:
        why.append(f"event-loop lag p99 {c['event_loop_lag_p99_ms']:.1f} ms > {LOOP_LAG_P99_MS} ms")
    # send lag after the first cohort: the opening burst of a closed loop is expected to queue briefly
    first = cfg.max_concurrency or 0
    lags = sorted(r.client_lag_s for r in sorted((r for r in reqs if r.ok), key=lambda r: r.start_s)[first:])
    if lags:
        p99 = percentile(lags, 99) * 1000
        if p99 > SEND_LAG_P99_MS:
            why.append(
                f"send lag p99 {p99:.1f} ms > {SEND_LAG_P99_MS} ms (requests left later than scheduled)"
            )
    return "; ".join(why) or None


def one_read_warning(reqs: list[MeasuredRequest], cfg: BenchConfig) -> tuple[int, str | None]:
    """Streamed requests whose every token came in one socket read, so their TPOT and ITL read 0. Seen against
    vLLM on a 2-core machine whose API process was starved by the engine: it sent the whole answer at the end."""
    if not cfg.stream:
        return 0, None
    streamed = [r for r in reqs if r.ok and r.output_len > 1]
    one_read = sum(1 for r in streamed if not any(r.itl_s))
    if not one_read:
        return 0, None
    return one_read, (
        f"{one_read} of {len(streamed)} streamed requests received all their tokens in one socket read "
        "(the server sent them as one burst, or this client read late: see the client fields); "
        "their TPOT and ITL read 0"
    )


def run(cfg_points: list[BenchConfig], out=None) -> int:
    """Run one point or a sweep; print a summary table for sweeps. Returns the exit code."""
    out = out or sys.stdout
    tok = load_tokenizer(cfg_points[0].tokenizer)
    results = []
    code = 0
    for cfg in cfg_points:
        point = _point_name(cfg)
        if len(cfg_points) > 1:
            print(f"\n### point {point}", file=out)
        res, path, c = run_point(cfg, tok, out)
        results.append((point, res, str(path) if path else None))
        code = max(code, c)
        if c == 130:
            break
    if len(cfg_points) > 1:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="servelab bench sweep")
        for h in R.SUMMARY_HEADER:
            table.add_column(h)
        for row in R.summary_rows(results):
            table.add_row(*row)
        Console(file=out, width=200).print(table)
    return code


def _point_name(cfg: BenchConfig) -> str:
    rate = "inf" if math.isinf(cfg.request_rate) else f"{cfg.request_rate:g}"
    return f"concurrency={cfg.max_concurrency} rate={rate}"
