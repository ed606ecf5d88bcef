"""Orchestration: dataset -> pre-serialized requests, fed to worker processes as they go -> merged records
-> result. Nothing here holds a run's requests or records: they are made as the workers take them (feed.py)
and read back from the workers' files (merge.py, tally.py).

One worker process per core (each its own event loop and schedule share, round-robin), started with
'spawn' so no parent state (tokenizer thread pools, rich consoles) leaks into them, and kept for the next
point of a sweep or bench of a `servelab run` (processes.py). Workers get ready (connection pool, ready check,
warm-ups), then all start at one shared monotonic time T0.
Ctrl-C, SIGTERM or SIGHUP: the parent tells workers to stop; what was measured is merged and saved; the exit
code is 128 + the signal number (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP), as shells report them.
Workers die with the parent however it ends (worker.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import wait
from pathlib import Path
from time import perf_counter

from servelab.bench import result as R
from servelab.bench import server_profile, spec_decode
from servelab.bench.config import BenchConfig
from servelab.bench.datasets import Dataset, build_dataset
from servelab.bench.evaluate import compute_result
from servelab.bench.feed import Feeder, WorkItem, first_items, window_for
from servelab.bench.merge import RecordSet
from servelab.bench.payload import (
    RequestTemplate,
    Target,
    api_key_from_env,
    auth_headers,
    without_request_id,
)
from servelab.bench.processes import WorkerPool
from servelab.bench.progress import (
    LiveLine,
    RunProgress,
    Totals,
    warmup_done_line,
    warmup_line,
    warmup_start_line,
)
from servelab.bench.rate_sweep import SweepStep, rate_sweep
from servelab.bench.records import NOT_SENT
from servelab.bench.report import present, print_sweep_table
from servelab.bench.tokenizer import LocalTokenizer, load_tokenizer
from servelab.bench.worker import MAX_SECONDS_REASON, Worker, WorkerSpec
from servelab.errors import ServelabError
from servelab.readable import typed
from servelab.traffic.schedule import arrival_offset_array, split_limit


def fetch_model_id(base_url: str, headers: tuple, timeout: float = 10.0) -> str:
    """vLLM asks /v1/models for the first model when --model is not given; so do we."""
    req = urllib.request.Request(base_url + "/v1/models", headers=dict(headers))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            data = json.loads(resp.read(MAX_MODELS_BYTES))
        model = data["data"][0]["id"]
    except Exception as e:  # network errors come in many types; the user needs one line
        raise ServelabError(f"--model not given and {base_url}/v1/models did not name one ({e})") from None
    if not isinstance(model, str) or not model:
        # the id is sent back in every request and names the result file: refused before any is sent
        raise ServelabError(
            f"--model not given and {base_url}/v1/models names the model {json.dumps(model)[:80]}, not a "
            "name; give --model"
        )
    return model


MAX_MODELS_BYTES = 1 << 20  # a model list is a few KB; a server sending more is not one


def iter_work_items(
    cfg: BenchConfig, data: Dataset, template: RequestTemplate, bare: Callable[[], bool] | None = None
) -> Iterator[WorkItem]:
    """The run's requests in dataset order, each made and rendered as it is taken (the arrival offsets, 8
    bytes a request, are drawn first: they are rescaled on the whole schedule). Once `bare()` is true the
    requests come without their bytes (a stopped run only records them as not sent)."""
    offsets = arrival_offset_array(
        cfg.num_prompts if cfg.dataset_name == "multiturn" else len(data.items),
        cfg.request_rate,
        cfg.burstiness,
        cfg.seed,
        cfg.ramp_up_strategy,
        cfg.ramp_up_start_rps,
        cfg.ramp_up_end_rps,
    )
    rid = cfg.rid_prefix  # X-Request-Id: the prefix and the request's index, as vLLM's x-request-id
    models = cfg.request_models()  # --lora-modules: each request's adapter
    for n, it in enumerate(data.items):
        off = float(offsets[n]) if offsets is not None else None
        render = bare is None or not bare()
        if it.turns:
            messages = [{"role": "user", "content": it.prompt}]
            model = next(models)
            payload = template.encode(messages, it.output_len, rid + str(it.index), model) if render else b""
            yield WorkItem(it.index * 1000, payload, it.prompt_len, off, messages, it.turns)
        else:
            model = next(models)
            payload = template.encode(it.prompt, it.output_len, rid + str(it.index), model) if render else b""
            yield WorkItem(it.index, payload, it.prompt_len, off)


def num_workers_for(cfg: BenchConfig, num_items: int) -> int:
    """One per core; when the server is on this machine (loopback), leave it a core: on the 2-core box a
    second client process starved the local server (benchmarks/loadgen_vs_vllm.py, docs/benchmarks.md,
    section 3)."""
    n = cfg.num_workers
    if not n:
        cores = os.cpu_count() or 1
        local = Target.from_url(cfg.base_url).host in ("127.0.0.1", "localhost", "::1", "0.0.0.0")
        n = cores - 1 if local and cores > 1 else cores
    if cfg.max_concurrency is not None:
        n = min(n, cfg.max_concurrency)
    return max(1, min(n, num_items))


@dataclass
class Prepared:
    """What a point sends, settled before any process starts: the model name, the dataset (its requests are
    made as they are sent) and the request template."""

    model_id: str
    data: Dataset
    template: RequestTemplate

    @property
    def num_items(self) -> int:
        return len(self.data.items)

    def work_items(self, cfg: BenchConfig, bare: Callable[[], bool] | None = None) -> Iterator[WorkItem]:
        return iter_work_items(cfg, self.data, self.template, bare)


@dataclass
class LoadRun:
    """What running the load left: the merged records, each worker's summary and ready info."""

    records: RecordSet
    summaries: list[dict]
    infos: list[dict]
    interrupted: bool
    signum: int = 0  # the signal that interrupted the run
    records_unwritten: bool = False  # the merged file could not be written (a full disk): `records` has them
    t0_unix: float | None = None  # wall-clock time of T0 (the run's start); None when it never started


def prepare(cfg: BenchConfig, tok: LocalTokenizer | None) -> Prepared:
    """Resolve the model name, settle the dataset (its requests are made as they are sent) and the
    request template."""
    headers = auth_headers(api_key_from_env(), cfg.basic_auth, cfg.headers)
    model_id = cfg.model or fetch_model_id(cfg.base_url, headers)
    data = build_dataset(cfg, tok)
    return Prepared(model_id, data, template_of(cfg, model_id, headers))


def template_of(cfg: BenchConfig, model_id: str, headers: tuple) -> RequestTemplate:
    """The request every worker sends, but for its prompt and output length."""
    sampling = cfg.body_extras()
    return RequestTemplate(
        Target.from_url(cfg.base_url, verify=not cfg.insecure),
        cfg.endpoint,
        cfg.served_model_name or model_id,
        cfg.is_chat,
        cfg.stream,
        bool(cfg.ignore_eos),
        sampling,
        headers,
    )


def worker_specs(cfg: BenchConfig, prep: Prepared, records_dir: Path) -> list[WorkerSpec]:
    """One WorkerSpec per worker process: its round-robin share of the requests (fed as they go), of the
    concurrency limit and of the warm-ups, and its own records file."""
    num_items = prep.num_items
    n_workers = num_workers_for(cfg, num_items)
    limits = split_limit(cfg.max_concurrency, n_workers)
    first = next(prep.work_items(cfg), None)  # the warm-ups and the ready check send the first request
    # without the first request's X-Request-Id: warm-ups run at once, and vLLM sends none with them either
    first_payload = without_request_id(first.payload) if first is not None else b""
    warm = [first_payload] * cfg.num_warmups
    keep_text = cfg.save_detailed or cfg.dataset_name == "multiturn"
    specs = []
    for k in range(n_workers):
        share = len(range(k, num_items, n_workers))
        limit = limits[k]
        pre = min(share, limit if limit is not None else 64)
        specs.append(
            WorkerSpec(
                k,
                prep.template,
                share,
                limits[k],
                cfg.request_timeout_s,
                str(records_dir / f"worker-{k}.jsonl"),
                max_body_bytes=int(cfg.max_response_mib * (1 << 20)),
                warmups=warm[k::n_workers],
                ready_check=first_payload if (k == 0 and cfg.ready_check) else None,
                keep_text=keep_text,
                ttft_at_first_content=cfg.ttft_at == "first-content",
                use_uvloop=cfg.use_uvloop,
                preconnect=pre,
                max_seconds=cfg.max_seconds,
                open_loop=first is not None and first.offset is not None,
                window=window_for(limit),
                first_items=first_items(share, window_for(limit), len(first_payload)),
            )
        )
    return specs


def run_load(
    cfg: BenchConfig,
    items: Callable[[Callable[[], bool]], Iterator[WorkItem]] | None,
    specs: Sequence[WorkerSpec],
    merged_path: Path,
    *,
    total: int | None = None,
    worker_cls: type[Worker] | None = None,
    before_start: Callable[[], None] | None = None,
    pool: WorkerPool | None = None,
) -> LoadRun:
    """Give the worker processes their specs and feed them the requests `items(bare)` gives (made as the
    workers take them: feed.py; once `bare()` is true, the run stopping, without their bytes), start them
    together at T0, wait (live line; Ctrl-C stops them and keeps what was measured), and merge their records
    into `merged_path`. `total`: how many requests the run plans (None: no fixed number). The processes come
    from `pool` (a run's, kept for its next bench; shut down when this bench did not end cleanly), else from
    a pool of this bench's own. A trace replay passes no items (its workers make their own requests), its
    request loop (`worker_cls`) and `before_start`, called once every worker is ready (its ready check and
    warm-ups done) and before the run starts."""
    own = pool is None
    pool = pool if pool is not None else WorkerPool()
    stop = pool.stop
    clean = False
    try:
        workers = pool.take(len(specs))
        procs = [w.proc for w in workers]
        pipes = [w.pipe for w in workers]
        progress = [w.progress for w in workers]
        for w, spec in zip(workers, specs, strict=True):
            w.pipe.send(("bench", spec, worker_cls, items is not None))
        feeder = Feeder(items(stop.is_set), [w.feed for w in workers]) if items is not None else None
        if feeder is not None:
            feeder.start()
        load = _load(cfg, pipes, procs, progress, stop, feeder, total, before_start)
        clean = len(load.summaries) == len(specs) and not load.interrupted
    finally:
        if own or not clean:
            pool.shutdown()
    kept = [r for s in load.summaries for r in s.pop("records_kept", ())]
    errors = sorted({why for s in load.summaries if (why := s.pop("records_error", None))})
    if feeder is not None and feeder.error:
        print(f"warning: the requests could not all be made ({feeder.error})", file=sys.stderr)
    records = RecordSet([Path(s.out_path) for s in specs], kept)
    try:
        records.write(merged_path)
    except OSError as e:
        errors.append(f"{merged_path}: {e.strerror or e}")
    for error in errors:  # the records are in memory: the result is computed, and saved where it can be
        print(f"warning: the request records could not be written ({error}); kept in memory", file=sys.stderr)
    return LoadRun(
        records, load.summaries, load.infos, load.interrupted, load.signum, bool(errors), load.t0_unix
    )


@dataclass
class _Load:
    summaries: list[dict]
    infos: list[dict]
    interrupted: bool
    signum: int
    t0_unix: float | None


def _load(
    cfg: BenchConfig,
    pipes,
    procs,
    progress,
    stop,
    feeder: Feeder | None,
    total: int | None,
    before_start: Callable[[], None] | None,
) -> _Load:
    """The bench's ready, start and run phases with the workers given their specs."""
    interrupted, signum = False, 0
    summaries: list[dict] = []
    infos: list[dict] = []
    live = cfg.live if cfg.live is not None else sys.stderr.isatty()
    run_progress = RunProgress(LiveLine(live, interval_s=cfg.progress_interval_s), total)
    t0 = 0.0
    t0_unix: float | None = None
    try:
        # the warm-up's start is said by its own line (warmup_start_line)
        warm_line = LiveLine(live, interval_s=cfg.progress_interval_s, at_start=False)
        infos = _wait_ready(cfg, pipes, procs, progress, warm_line)
        ready_error = next((i["ready_error"] for i in infos if i.get("ready_error")), None)
        if ready_error:
            if feeder is not None:
                feeder.abandon()
            for pipe in pipes:
                pipe.send(("stop",))
            raise ServelabError(f"initial test request to {cfg.base_url}{cfg.endpoint} failed: {ready_error}")
        if before_start is not None:
            before_start()
        t0 = perf_counter() + 0.05
        t0_unix = time.time() + 0.05  # T0 on the wall clock (the result's benchmark_start_time_unix)
        for pipe in pipes:
            pipe.send(("start", t0))
        summaries = _wait_done(pipes, procs, progress, run_progress, t0, stop)
    except KeyboardInterrupt as e:
        interrupted, signum = True, getattr(e, "signum", signal.SIGINT)
        stop.set()
        if not t0:  # before the start, workers wait (or will) for a word: stop, and send what you have
            for pipe in pipes:
                try:
                    pipe.send(("stop",))
                except OSError:
                    pass  # that worker is gone
        try:  # the workers record the rest as not sent as the feeder walks it; a second Ctrl-C stops waiting
            busy = feeder.alive if feeder is not None else None
            summaries = _wait_done(pipes, procs, progress, run_progress, t0, stop, grace=10.0, busy=busy)
        except KeyboardInterrupt:
            pass
    finally:
        if feeder is not None:
            feeder.abandon()  # done by now, unless the run failed or was given up on
        if t0:
            run_progress.finish(perf_counter() - t0, Totals.read(progress))
    return _Load(summaries, infos, interrupted, signum, t0_unix)


def run_point(
    cfg: BenchConfig,
    tok: LocalTokenizer | None = None,
    out=None,
    details: bool = False,
    pool: WorkerPool | None = None,
) -> tuple[R.BenchResult, Path | None, int]:
    """Run one benchmark point: prepare, run the load (on the processes of `pool`, else of its own), compute
    the result, present it, save it. The result keeps the per-request detail lists with --save-detailed or
    `details` (for --json). Returns (result, saved path or None, exit code)."""
    out = out or sys.stdout
    tok = tok if tok is not None else load_tokenizer(cfg.tokenizer, cfg.trust_remote_code)
    prep = prepare(cfg, tok)
    date = R.now_stamp()
    result_dir = Path(cfg.result_dir or ".")  # made by R.check_path before the run
    name = None
    if cfg.save_result:  # a name the file system refuses is refused now, not after the benchmark
        name = cfg.result_filename or R.default_filename(cfg, prep.model_id, date)
        R.check_name(result_dir / name, "--result-filename" if cfg.result_filename else "--label/--model")
    # a folder of this run's own: concurrent runs never share (or delete) each other's records
    try:
        records_dir = Path(
            tempfile.mkdtemp(prefix=".servelab-bench-", dir=result_dir if cfg.save_result else None)
        )
    except OSError as e:
        raise ServelabError(f"--result-dir {result_dir}: cannot be written ({e.strerror or e})") from None
    specs = worker_specs(cfg, prep, records_dir)
    items = partial(prep.work_items, cfg)
    urls = cfg.server_metrics_url or [cfg.base_url + "/metrics"]
    auth = dict(prep.template.headers)
    spec_before: list[spec_decode.SpecCounters | None] = []

    def before_start() -> None:  # after the warm-ups, as vLLM reads the counters and starts the profiler
        spec_before.append(spec_decode.read(urls, auth))
        if cfg.server_profile:
            server_profile.post(cfg.base_url, "start_profile", auth)

    load = run_load(
        cfg,
        items,
        specs,
        records_dir / "requests.jsonl",
        total=prep.num_items,
        pool=pool,
        before_start=before_start,
    )
    if cfg.server_profile:
        server_profile.post(cfg.base_url, "stop_profile", auth)
    result = compute_result(
        cfg, load.records, load.summaries, load.infos, prep.data, tok, prep.model_id, date, details
    )
    result.spec_decode = spec_decode.result_fields(
        spec_before[0] if spec_before else None, spec_decode.read(urls, auth)
    )
    result.interrupted = load.interrupted
    result.start_unix = load.t0_unix
    present(result, cfg.percentile_metrics, file=out)
    result_path = None
    code = exit_code(cfg, result, load.signum)
    if name is not None:
        result_path = _save_somewhere(cfg, result, result_dir / name, records_dir / "requests.jsonl", load)
        if result_path is None or result_path.parent != result_dir:
            code = code or 1  # not where it was asked: CI must not read the run as passed
        if result_path is not None:
            print(f"result: {result_path}", file=out)
    shutil.rmtree(records_dir, ignore_errors=True)  # merged; unsaved runs keep nothing
    return result, result_path, code


def exit_code(cfg: BenchConfig, result: R.BenchResult, signum: int = signal.SIGINT) -> int:
    """128 + the signal when interrupted (130 for Ctrl-C); 1 when requests failed or were not sent (except
    those --max-seconds left); else 0."""
    if result.interrupted:
        return 128 + signum
    return 1 if lost(cfg, result) else 0


def lost(cfg: BenchConfig, result: R.BenchResult) -> int:
    """Requests that failed or were not sent, less those --max-seconds left unsent (a timed run, as
    InferenceX's agentic replay, ends with sessions cut short)."""
    left_by_limit = 0
    if cfg.max_seconds is not None:
        left_by_limit = result.failure_reasons.get(NOT_SENT + MAX_SECONDS_REASON.format(cfg.max_seconds), 0)
    return result.failed + result.not_sent - left_by_limit


def _save_somewhere(
    cfg: BenchConfig, result: R.BenchResult, path: Path, records: Path, load: LoadRun
) -> Path | None:
    """Save the result in --result-dir; when that cannot be written (a full disk, measured after the whole
    benchmark), in the temporary folder instead, saying so. None when neither takes it: the table printed
    is then what was measured."""
    try:
        return _save(cfg, result, path, records, load.records if load.records_unwritten else None)
    except OSError as e:
        why = f"{path.parent}: {e.strerror or e}"
    fallback = Path(tempfile.gettempdir()) / "servelab-results"
    try:
        fallback.mkdir(exist_ok=True)
        saved = _save(cfg, result, fallback / path.name, records, load.records)
    except OSError as e:
        print(
            f"error: the result could not be saved ({why}; {fallback}: {e.strerror or e}); the table above "
            "is what was measured",
            file=sys.stderr,
        )
        return None
    print(f"error: the result could not be saved in {why}; saved in {saved} instead", file=sys.stderr)
    return saved


def _save(
    cfg: BenchConfig, result: R.BenchResult, path: Path, records: Path, rewrite: RecordSet | None
) -> Path:
    """Claim a free result name (`path` or a suffixed one), move the records next to it (or write them from
    `rewrite`, the workers' files and memory, when the merged file could not be written), write the result;
    an interruption or a failure in between removes the still empty claimed file. Returns the result's
    path."""
    if cfg.append_result:
        return _append(cfg, result, path, records, rewrite)
    result_path = R.claim(path, taken=_records_path)
    try:
        if result_path != path:
            print(f"note: {path} exists; the result goes to {result_path}", file=sys.stderr)
        records_path = _records_path(result_path)
        if rewrite is None:
            os.replace(records, records_path)
        else:
            rewrite.write(records_path)
        result.records_file = str(records_path)
        R.save(result, result_path, cfg.save_detailed)
    except BaseException:
        if result_path.stat().st_size == 0:
            result_path.unlink()
            _records_path(result_path).unlink(missing_ok=True)  # the workers' files still hold them
        raise
    return result_path


def _append(
    cfg: BenchConfig, result: R.BenchResult, path: Path, records: Path, rewrite: RecordSet | None
) -> Path:
    """--append-result: the result is one more line of `path`; its records go to a free name beside it
    (X.requests.jsonl, then X.requests-1.jsonl, ...), which the line names."""
    records_path = R.claim(_records_path(path), taken=lambda p: p)
    if rewrite is None:
        os.replace(records, records_path)
    else:
        rewrite.write(records_path)
    result.records_file = str(records_path)
    R.append(result, path, cfg.save_detailed)
    return path


def _records_path(result_path: Path) -> Path:
    return result_path.with_name(result_path.stem + ".requests.jsonl")


def _wait_ready(cfg: BenchConfig, pipes, procs, progress, line: LiveLine) -> list[dict]:
    """Wait for every worker's ready info; while the warm-ups run, show how far they are."""
    warm = cfg.num_warmups
    if warm:
        sys.stderr.write(warmup_start_line(warm, cfg.max_concurrency) + "\n")
    start = perf_counter()
    infos: dict[int, dict] = {}
    while True:
        for k, pipe in enumerate(pipes):
            if k in infos:
                continue
            if pipe.poll():
                kind, payload = pipe.recv()
                if kind == "error":
                    raise ServelabError(payload)
                infos[k] = payload
            elif not procs[k].is_alive():
                raise ServelabError("a bench worker process died before it was ready")
        if len(infos) == len(pipes):
            break
        if warm:
            totals = Totals.read(progress)
            line.show(warmup_line(perf_counter() - start, totals, warm, cfg.ready_check))
        wait([p for k, p in enumerate(pipes) if k not in infos], timeout=0.1)
    if warm and any(i.get("ready_error") for i in infos.values()):
        line.finish("warm-up: not run (the ready check failed)")
    elif warm:
        failed = sum(i.get("warmup_failed", 0) for i in infos.values())
        line.finish(warmup_done_line(perf_counter() - start, warm, failed))
    return [infos[k] for k in range(len(pipes))]


def _wait_done(
    pipes,
    procs,
    progress,
    run_progress: RunProgress,
    t0,
    stop,
    grace: float | None = None,
    busy: Callable[[], bool] | None = None,
) -> list[dict]:
    """Each worker's summary, waiting for every one (or `grace` seconds once `busy()`, the feeder still
    walking the requests, is false)."""
    summaries: dict[int, dict] = {}
    waiting = {id(p): (k, p) for k, p in enumerate(pipes)}
    deadline = time.monotonic() + grace if grace else None
    while waiting:
        if grace and busy is not None and busy():
            deadline = time.monotonic() + grace
        ready = wait([p for _, p in waiting.values()], timeout=0.1)
        for conn in ready:
            k, pipe = waiting.pop(id(conn))
            try:
                kind, payload = pipe.recv()
            except EOFError:
                continue
            if kind == "done":
                summaries[k] = payload
            elif kind == "ready":  # interrupted before the start: its summary follows
                waiting[id(conn)] = (k, conn)
            else:
                print(f"warning: {payload}", file=sys.stderr)
        run_progress.update(perf_counter() - t0, Totals.read(progress))
        for k, p in list(waiting.values()):
            if not procs[k].is_alive() and not p.poll():
                waiting.pop(id(p))  # died without a summary: its JSONL file still holds what it did
        if deadline and time.monotonic() > deadline:
            break
    return [summaries[k] for k in sorted(summaries)]


class Terminated(KeyboardInterrupt):
    """A termination signal (SIGTERM, SIGHUP) to the bench process, handled like Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _terminate(signum: int, frame) -> None:
    raise Terminated(signum)


def run(
    cfg_points: list[BenchConfig],
    out=None,
    json_out: Callable[[list[dict]], None] | None = None,
    saved: list[Path] | None = None,
    point: Callable = run_point,
) -> int:
    """Run one point or a sweep (a termination signal is handled like Ctrl-C); print a summary table for
    sweeps. With `json_out` the summaries go to stderr and `json_out` is given the results (one per point,
    measured parts of an interrupted run included) at the end. The result files written are added to `saved`.
    `point` runs one point (run_point, or a trace replay's). Returns the exit code."""
    text = out or (sys.stderr if json_out else sys.stdout)
    return _with_signals(cfg_points, lambda: _run_points(cfg_points, text, json_out, saved, point))


def _with_signals(cfg_points: list[BenchConfig], body) -> int:
    """Refuse taken result files before anything runs, then run `body` with SIGTERM and SIGHUP raised as
    `Terminated` (a KeyboardInterrupt), so what was measured is saved as for Ctrl-C."""
    for cfg in cfg_points:
        if cfg.save_result:
            R.check_path(Path(cfg.result_dir or "."), cfg.result_filename, cfg.append_result)
    previous = {s: signal.signal(s, _terminate) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return body()
    except Terminated as e:  # outside the load (e.g. while preparing): nothing measured to save
        print("interrupted", file=sys.stderr)
        return 128 + e.signum
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _run_points(
    cfg_points: list[BenchConfig],
    out,
    json_out: Callable[[list[dict]], None] | None = None,
    saved: list[Path] | None = None,
    point: Callable = run_point,
) -> int:
    tok = load_tokenizer(cfg_points[0].tokenizer, cfg_points[0].trust_remote_code)
    results = []
    code = 0
    try:
        with WorkerPool() as pool:  # the points of a sweep share the worker processes
            for cfg in cfg_points:
                name = _point_name(cfg)
                if len(cfg_points) > 1:
                    print(f"\n### point {name}", file=out)
                result, path, c = point(cfg, tok, out, details=json_out is not None, pool=pool)
                results.append((name, result.dump(), str(path) if path else None))
                if path is not None and saved is not None:
                    saved.append(path)
                code = max(code, c)
                if result.interrupted:
                    break
        if len(cfg_points) > 1:
            print_sweep_table(results, file=out)
    finally:
        if json_out is not None:
            json_out([dump for _, dump, _ in results])
    return code


def run_rate_sweep(base: BenchConfig, num_rates: int, out=None, saved: list[Path] | None = None) -> int:
    """`--request-rate sweep`: each step of rate_sweep is a normal point (its own result, added to `saved`),
    then a table."""
    return _with_signals([base], lambda: _run_rate_sweep(base, num_rates, out or sys.stdout, saved))


def _run_rate_sweep(base: BenchConfig, num_rates: int, out, saved: list[Path] | None = None) -> int:
    tok = load_tokenizer(base.tokenizer, base.trust_remote_code)
    steps = rate_sweep(num_rates, base.max_concurrency)
    step = next(steps)
    results = []
    code = 0
    with WorkerPool() as pool:  # the steps share the worker processes
        while True:
            print(f"\n### sweep step {step.name}", file=out)
            result, path, c = run_point(_step_config(base, step), tok, out, pool=pool)
            results.append((step.name, result.dump(), str(path) if path else None))
            if path is not None and saved is not None:
                saved.append(path)
            code = max(code, c)
            if result.interrupted:
                break
            try:
                step = steps.send(result)
            except StopIteration as stop:
                if stop.value:
                    print(f"sweep: {stop.value}", file=out)
                break
    print_sweep_table(results, file=out)
    return code


def _step_config(base: BenchConfig, step: SweepStep) -> BenchConfig:
    fields = dict(base.model_dump(), max_concurrency=step.max_concurrency, request_rate=step.request_rate)
    if base.result_filename:
        stem = base.result_filename.removesuffix(".json")
        fields["result_filename"] = f"{stem}-{step.name.replace(' ', '')}.json"
    return BenchConfig(**fields)


def _point_name(cfg: BenchConfig) -> str:
    rate = typed(cfg.request_rate)
    return f"concurrency={cfg.max_concurrency} rate={rate}"
