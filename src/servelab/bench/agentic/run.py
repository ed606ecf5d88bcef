"""One point of a trace replay (`servelab bench --trace FILE`): read the trace, plan the sessions over the
worker processes, read the server's prefix-cache counters, run the load (runner.run_load, with the replay's
worker), and make the result: the load generator's own, plus its `agentic` section.

Sessions: --num-prompts of them (session n replays trace n mod the number of traces), by default each trace
once, or, with --max-seconds and no --num-prompts, traces again and again until the time is up (InferenceX
replays for a fixed duration). --max-concurrency is the number of sessions at once.
"""

from __future__ import annotations

import secrets
import shutil
import sys
import tempfile
from pathlib import Path

from servelab.bench import result as R
from servelab.bench.agentic.prompts import StreamPrompt
from servelab.bench.agentic.replay import TraceWorker, TraceWorkerSpec
from servelab.bench.agentic.report import agentic_section, summary_lines
from servelab.bench.agentic.server_cache import hit_rates, scrape
from servelab.bench.agentic.trace import TraceFile, read_trace_file
from servelab.bench.config import BenchConfig
from servelab.bench.datasets import Dataset
from servelab.bench.evaluate import compute_result
from servelab.bench.payload import RequestTemplate, api_key_from_env, auth_headers
from servelab.bench.processes import WorkerPool
from servelab.bench.report import present
from servelab.bench.runner import (
    _save_somewhere,
    exit_code,
    fetch_model_id,
    num_workers_for,
    run_load,
    template_of,
)
from servelab.bench.tokenizer import LocalTokenizer, load_tokenizer
from servelab.errors import ServelabError
from servelab.traffic.schedule import split_limit

PROMPT_SOURCE = "the trace's input tokens (prompts of one-token words: approximate)"
WARMUP_SESSION = (1 << 31) - 1  # the ready check's and warm-ups' salt: text no session of the run sends


def sessions_of(cfg: BenchConfig, traces: TraceFile) -> int | None:
    """How many sessions the point replays; None: until --max-seconds."""
    if "num_prompts" in cfg.model_fields_set:
        return cfg.num_prompts
    if cfg.max_seconds is not None:
        if cfg.max_concurrency is None:
            raise ServelabError(
                "a trace replayed until --max-seconds needs --max-concurrency (the sessions at once)",
                field="max_concurrency",
            )
        return None
    return len(traces.traces)


def worker_specs(
    cfg: BenchConfig,
    traces: TraceFile,
    sessions: int | None,
    template: RequestTemplate,
    records_dir: Path,
    nonce: int,
) -> list[TraceWorkerSpec]:
    """One spec per worker: sessions k, k + W, ... and its share of the lanes (--max-concurrency)."""
    plans = traces.traces
    n = num_workers_for(cfg, sessions if sessions is not None else 1 << 30)
    lanes = split_limit(cfg.max_concurrency, n)
    first = plans[0]
    warm = _warmup_payload(template, first, nonce)
    specs = []
    for k in range(n):
        count = len(range(k, sessions, n)) if sessions is not None else None
        needed = (
            {s % len(plans) for s in range(k, sessions, n)} if sessions is not None else range(len(plans))
        )
        limit = lanes[k]
        specs.append(
            TraceWorkerSpec(
                index=k,
                template=template,
                num_items=0,  # its sessions make their own requests: nothing is fed
                max_in_flight=limit,  # the warm-ups' concurrency; the run counts sessions (lanes)
                timeout_s=cfg.request_timeout_s,
                out_path=str(records_dir / f"worker-{k}.jsonl"),
                max_body_bytes=int(cfg.max_response_mib * (1 << 20)),
                warmups=[warm] * len(range(k, cfg.num_warmups, n)),
                ready_check=warm if (k == 0 and cfg.ready_check) else None,
                keep_text=cfg.save_detailed,
                ttft_at_first_content=cfg.ttft_at == "first-content",
                use_uvloop=cfg.use_uvloop,
                preconnect=min(limit if limit is not None else 64, count if count is not None else 64),
                max_seconds=cfg.max_seconds,
                traces={i: plans[i] for i in needed},
                num_traces=len(plans),
                first=k,
                step=n,
                count=count,
                lanes=limit,
                nonce=nonce,
            )
        )
    return specs


def _warmup_payload(template: RequestTemplate, trace, nonce: int) -> bytes:
    """The ready check's and warm-ups' request: the trace's first request's length in text of its own."""
    req = trace.requests[0]
    text = StreamPrompt((nonce << 32) + WARMUP_SESSION, trace.block_size).text(req)
    return template.encode(text, max(1, req.output_tokens))


def run_trace_point(
    cfg: BenchConfig,
    tok: LocalTokenizer | None = None,
    out=None,
    details: bool = False,
    pool: WorkerPool | None = None,
) -> tuple[R.BenchResult, Path | None, int]:
    """Run one trace-replay point: the same steps and guarantees as runner.run_point (records written as
    requests end, kept on interrupt; the result saved or said why not). Returns (result, path, exit code)."""
    out = out or sys.stdout
    tok = tok if tok is not None else load_tokenizer(cfg.tokenizer, cfg.trust_remote_code)
    traces = read_trace_file(cfg.dataset_path or "", cfg.trace_max_gap_s)
    sessions = sessions_of(cfg, traces)
    headers = auth_headers(api_key_from_env(), cfg.basic_auth, cfg.headers)
    model_id = cfg.model or fetch_model_id(cfg.base_url, headers)
    template = template_of(cfg, model_id, headers)
    date = R.now_stamp()
    result_dir = Path(cfg.result_dir or ".")
    name = None
    if cfg.save_result:
        name = cfg.result_filename or R.default_filename(cfg, model_id, date)
        R.check_name(result_dir / name, "--result-filename" if cfg.result_filename else "--label/--model")
    try:
        records_dir = Path(
            tempfile.mkdtemp(prefix=".servelab-bench-", dir=result_dir if cfg.save_result else None)
        )
    except OSError as e:
        raise ServelabError(f"--result-dir {result_dir}: cannot be written ({e.strerror or e})") from None
    # each point its own text: the points of a sweep against one server never hit each other's cache
    nonce = secrets.randbits(30)
    specs = worker_specs(cfg, traces, sessions, template, records_dir, nonce)
    urls = cfg.server_metrics_url or [cfg.base_url + "/metrics"]
    before: dict = {}

    def snapshot() -> None:
        before["counters"], before["error"] = scrape(urls)

    plans = traces.traces
    planned = None if sessions is None else sum(plans[s % len(plans)].num_requests for s in range(sessions))
    load = run_load(
        cfg,
        None,
        specs,
        records_dir / "requests.jsonl",
        total=planned,
        worker_cls=TraceWorker,
        before_start=snapshot,
        pool=pool,
    )
    after, after_error = scrape(urls)
    server = _server_cache(before, after, after_error, urls)
    data = Dataset(items=[], prompt_len_source=PROMPT_SOURCE)
    result = compute_result(cfg, load.records, load.summaries, load.infos, data, tok, model_id, date)
    result.interrupted = load.interrupted
    replay = {
        "sessions": sessions,
        "until_max_seconds": sessions is None,
        "max_concurrency": cfg.max_concurrency,
        "max_gap_s": cfg.trace_max_gap_s,
        "workers": len(specs),
        "text_nonce": nonce,
    }
    result.agentic = agentic_section(load.records, traces, replay, server)
    result.header["num_prompts"] = sessions if sessions is not None else result.agentic["sessions"]["started"]
    present(result, cfg.percentile_metrics, file=out)
    for line in summary_lines(result.agentic):
        print(line, file=out)
    result_path = None
    code = exit_code(cfg, result, load.signum)
    if name is not None:
        result_path = _save_somewhere(cfg, result, result_dir / name, records_dir / "requests.jsonl", load)
        if result_path is None or result_path.parent != result_dir:
            code = code or 1
        if result_path is not None:
            print(f"result: {result_path}", file=out)
    shutil.rmtree(records_dir, ignore_errors=True)
    return result, result_path, code


def _server_cache(before: dict, after: dict | None, after_error: str | None, urls: list[str]) -> dict:
    """The server's prefix-cache section: the counters' growth over the run, or why it was not measured."""
    where = {"urls": urls}
    if not before:
        return where | {"engine": None, "error": "the run did not start"}
    if before["counters"] is None or after is None:
        return where | {"engine": None, "error": before["error"] or after_error}
    return where | hit_rates(before["counters"], after)
