"""Carry out a run plan: record the run, start (or attach to) the server, run every stage row, judge the
assertions, tear down, and say how it ended.

Every stage row (stage x config x repetition) is written to the store as it ends, with its metrics (source
measured) and its artifact, so a run cut short keeps what it measured and `--resume RUN_ID` reruns only the
rows that did not pass. Ctrl-C, SIGTERM and SIGHUP stop the run the same way: the bench point measuring
keeps its partial result, the server is torn down, the run ends as error.

Outcome and exit code: error (3) when the server or a stage errored or an assertion could not be judged; fail
(1) when an assertion failed; pass (0) otherwise; interrupted runs exit 128 + the signal (130 for Ctrl-C).
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from servelab.bench.processes import WorkerPool
from servelab.bench.runner import Terminated
from servelab.errors import ServelabError
from servelab.metrics.repeats import summarize
from servelab.redact import redact_text
from servelab.results import provenance
from servelab.results.journal import JournaledWriter
from servelab.results.runlock import RunLock
from servelab.results.schema import RunOutcome
from servelab.results.store import Store, new_run_id, now
from servelab.run.assertions import Judged, judge
from servelab.run.deployment import LOG_DIR, engine_process, record_deployment, refuse_unstartable
from servelab.run.plan import RunPlan
from servelab.run.server import container_name, docker_argv, serve
from servelab.run.stage import (
    SERVER_STAGE,
    StageCall,
    StageFailed,
    StageName,
    StageOptions,
    StageOutput,
    StageStatus,
    Target,
)
from servelab.run.stages import STAGES, StageRegistry, preflight
from servelab.runner.deployment import LocalDeployment
from servelab.runner.server import ServerProcess, ServerStartError

EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 3
SUMMARY_FILE = "summary.json"


@dataclass
class RunOptions:
    base_url: str | None = None  # attach to this server instead of starting one
    model: str | None = None  # served model name (default: the plan's, or /v1/models when attached)
    tokenizer: str | None = None
    docker: bool = False
    gpu: str | None = None  # perf-eval GPU profile (AMD ones get devices instead of --gpus)
    hf_cache: Path | None = None
    server_timeout_s: float = 3600.0
    gsm8k_path: Path | None = None
    bfcl_python: Path | None = None  # the BFCL environment's python (default: servelab.run.bfcl finds one)
    resume: str | None = None  # run id (or unique prefix) to continue
    baseline: str | None = None  # run id (or unique prefix) regression assertions compare with
    server_stop_timeout_s: float = 30.0  # SIGTERM to SIGKILL when the server is stopped


@dataclass
class Row:
    stage: str
    config: str
    repetition: int
    status: StageStatus  # pass | error | skipped (not run: an earlier failure or an interruption stopped it)
    detail: str = ""
    artifact: str | None = None

    def dump(self) -> dict:
        return dict(self.__dict__) | {"status": str(self.status), "detail": redact_text(self.detail)}


@dataclass
class RunResult:
    run_id: str
    run_dir: Path
    outcome: RunOutcome
    exit_code: int
    rows: list[Row]
    metrics: dict[str, dict[str, dict[str, dict]]]  # stage -> config -> metric -> stats.Summary.dump()
    judged: list[Judged]
    errors: list[str] = field(default_factory=list)

    def dump(self) -> dict:
        return {
            "run_id": self.run_id,
            "run_dir": str(self.run_dir),
            "outcome": str(self.outcome),
            "exit_code": self.exit_code,
            "errors": [redact_text(e) for e in self.errors],
            "stages": [r.dump() for r in self.rows],
            "metrics": self.metrics,
            "assertions": [j.dump() for j in self.judged],
        }


def _raise_terminated(signum: int, frame) -> None:
    raise Terminated(signum)


@contextmanager
def _termination_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise like Ctrl-C, so every exit path tears the server down."""
    previous = {s: signal.signal(s, _raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def stage_values(store: Store, run_id: str) -> dict[tuple[str, str], dict[str, list[float]]]:
    """(stage, config) -> metric -> the value of every repetition, as the store holds them."""
    out: dict[tuple[str, str], dict[str, list[float]]] = {}
    for m in store.metrics(run_id):
        if m.value is not None and m.stage != SERVER_STAGE:
            out.setdefault((m.stage, m.config), {}).setdefault(m.name, []).append(m.value)
    return out


def _summaries(values: dict[tuple[str, str], dict[str, list[float]]]) -> dict:
    out: dict = {}
    for (stage, config), metrics in sorted(values.items()):
        out.setdefault(stage, {})[config] = {
            name: summarize(vs).dump() for name, vs in sorted(metrics.items())
        }
    return out


class _Runner:
    def __init__(self, plan: RunPlan, store: Store, opts: RunOptions, registry: StageRegistry, log: IO[str]):
        self.plan, self.store, self.opts, self.registry, self.log = plan, store, opts, registry, log
        self.rows: list[Row] = []
        self.errors: list[str] = []
        self.signum = 0
        self.lock: RunLock | None = None
        self.writer: JournaledWriter

    def say(self, text: str) -> None:
        print(f"run {self.run_id}: {redact_text(text)}", file=self.log, flush=True)

    def begin(self) -> set[tuple[str, str, int]]:
        """The run row (new, or the one resumed) and the stage rows already passed."""
        opts, plan = self.opts, self.plan
        if opts.resume:
            run = self.store.get_run(opts.resume)
            if run.name != plan.name:
                raise ServelabError(
                    f"run {run.id} is {run.name!r}, not {plan.name!r}: resume it with its own source",
                    field="resume",
                )
            self.run_id = run.id
            self.lock = RunLock.take(self.store.run_dir(run.id), run.id)  # one process runs a run at a time
            self.writer = JournaledWriter(self.store, self.store.run_dir(run.id))
            return {
                (s.stage, s.config, s.repetition)
                for s in self.store.stages(run.id)
                if s.status == StageStatus.PASS
            }
        run_id = new_run_id()
        # held before the run row exists: a run `running` in the store whose lock nobody holds is abandoned
        self.lock = RunLock.take(self.store.run_dir(run_id), run_id)
        self.writer = JournaledWriter(self.store, self.store.run_dir(run_id))
        argv: list[str] = []
        env = plan.server.env
        if plan.server.processes and not opts.base_url:
            # the store keeps one server's argv (its engine and flags, which results read back): the
            # deployment's first server; every process is in deployment.json in the run folder
            recorded = engine_process(plan.server.processes)
            argv, env = recorded.argv, recorded.env or {}
            record_deployment(self.store.run_dir(run_id), plan.server.processes)
        elif not opts.base_url:
            argv = (
                docker_argv(
                    plan.server,
                    container_name(run_id),
                    opts.hf_cache,
                    self.store.root / "runs" / run_id,
                    opts.gpu,
                )
                if opts.docker
                else plan.server.argv
            )
        prov = provenance.collect(
            server_argv=argv,
            env=env,
            recipe_fingerprint=plan.fingerprint,
            image_digest=plan.server.image if opts.docker else None,
        )
        self.run_id = self.store.start_run(plan.name, prov, run_id=run_id)
        return set()

    def record(self, row: Row, output: StageOutput | None, started: str, run_dir: Path) -> None:
        if output is not None:
            if output.artifacts:
                row.artifact = _relative(output.artifacts[0], run_dir)
            self.writer.record_metrics(
                self.run_id, row.stage, output.metrics, config=row.config, repetition=row.repetition,
                units=output.units,
            )  # fmt: skip
        self.writer.record_stage(
            self.run_id, row.stage, row.status, config=row.config, repetition=row.repetition,
            started_at=started, ended_at=now(), artifact=row.artifact,
        )  # fmt: skip
        self.rows.append(row)

    def call(
        self, item: tuple[str, str, int], target: Target, run_dir: Path, workers: WorkerPool
    ) -> StageOutput:
        stage, config, rep = item
        options = StageOptions(gsm8k_path=self.opts.gsm8k_path, bfcl_python=self.opts.bfcl_python)
        call = StageCall(self.plan, config, rep, run_dir, options, workers)
        return self.registry.get(stage)().run(target, call)

    def run_items(
        self, todo: list, target: Target, server: ServerProcess | LocalDeployment | None, run_dir: Path
    ) -> None:
        """Run the rows in order; the benches among them share one pool of load worker processes, ended
        with the last row (or the first failure or interruption that stops the rows)."""
        with WorkerPool() as workers:
            self._run_items(todo, target, server, run_dir, workers)

    def _run_items(
        self,
        todo: list,
        target: Target,
        server: ServerProcess | LocalDeployment | None,
        run_dir: Path,
        workers: WorkerPool,
    ) -> None:
        for n, item in enumerate(todo):
            stage, config, rep = item
            reps = sum(1 for s, c, _ in self.plan.items() if (s, c) == (stage, config))
            name = (
                f"{stage}"
                + (f" {config}" if config else "")
                + (f" repetition {rep + 1}/{reps}" if reps > 1 else "")
            )
            self.say(f"{name}: running")
            started = now()
            row = Row(stage, config, rep, StageStatus.PASS)
            try:
                output: StageOutput | None = self.call(item, target, run_dir, workers)
            except StageFailed as e:
                row.status, row.detail = StageStatus.ERROR, str(e)
                output = getattr(e, "output", None)
            except ServelabError as e:  # bad input the preflight could not see (a file gone since)
                row.status, row.detail, output = StageStatus.ERROR, str(e), None
            except KeyboardInterrupt as e:
                row.status, row.detail = StageStatus.ERROR, "interrupted"
                self.record(row, getattr(e, "output", None), started, run_dir)
                self.skip(todo[n + 1 :], "not run: the run was interrupted")
                raise
            self.record(row, output, started, run_dir)
            self.say(f"{name}: {row.status}" + (f" ({row.detail})" if row.detail else ""))
            # a deployment is looked at after every row: its router may have hidden a worker's death
            look = row.status == StageStatus.ERROR or isinstance(server, LocalDeployment)
            exited = server.exit_note(f"during {name}") if look and server is not None else None
            if exited:
                self.errors.append(exited)
                self.writer.record_stage(
                    self.run_id,
                    SERVER_STAGE,
                    StageStatus.ERROR,
                    ended_at=now(),
                    artifact=_relative(server.log_path, run_dir) if server else None,
                )
                self.skip(todo[n + 1 :], "not run: the server had exited")
                return

    def skip(self, items: list, why: str) -> None:
        for stage, config, rep in items:
            self.writer.record_stage(self.run_id, stage, StageStatus.SKIPPED, config=config, repetition=rep)
            self.rows.append(Row(stage, config, rep, StageStatus.SKIPPED, why))


def _relative(path: Path, run_dir: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(run_dir.resolve()))
    except ValueError:
        return str(path)


def server_log_name(run_dir: Path, deployment: bool = False) -> str:
    """server.log, or server.2.log, server.3.log, ... for the attempts that resume the run; for a
    deployment, the folder of its logs: deployment, deployment.2, ..."""
    stem, suffix = (LOG_DIR, "") if deployment else ("server", ".log")
    n = 1
    while (run_dir / (name := f"{stem}{suffix}" if n == 1 else f"{stem}.{n}{suffix}")).exists():
        n += 1
    return name


def _run_todo(r: _Runner, plan: RunPlan, opts: RunOptions, todo: list, run_dir: Path) -> None:
    """Start (or attach to) the server and run the rows; a start failure or an interruption is recorded in
    `r`, and the server is down when this returns."""
    if not todo:
        return
    writer = r.writer
    deployment = bool(plan.server.processes) and not opts.base_url
    log_name = server_log_name(run_dir, deployment)  # a resume keeps the first attempt's log
    with _termination_as_interrupt():
        try:
            if opts.base_url:
                r.say(f"server: attaching to {opts.base_url}")
            elif deployment:
                r.say(
                    f"server: starting a deployment of {len(plan.server.processes)} processes "
                    f"(logs in {run_dir / log_name})"
                )
            else:
                r.say(f"server: starting {plan.server.argv[0]} (log {run_dir / log_name})")
            started = now()
            try:
                with serve(
                    plan.server,
                    run_dir,
                    base_url=opts.base_url,
                    model=opts.model,
                    docker=opts.docker,
                    gpu=opts.gpu,
                    hf_cache=opts.hf_cache,
                    timeout_s=opts.server_timeout_s,
                    tokenizer=opts.tokenizer,
                    stop_timeout_s=opts.server_stop_timeout_s,
                    log_name=log_name,
                    say=r.say,
                ) as (target, server):
                    artifact = None if server is None else log_name
                    writer.record_stage(
                        r.run_id,
                        SERVER_STAGE,
                        StageStatus.PASS,
                        started_at=started,
                        ended_at=now(),
                        artifact=artifact,
                    )
                    r.say(f"server: ready at {target.base_url}, model {target.model}")
                    r.run_items(todo, target, server, run_dir)
            except ServerStartError as e:
                writer.record_stage(
                    r.run_id,
                    SERVER_STAGE,
                    StageStatus.ERROR,
                    started_at=started,
                    ended_at=now(),
                    artifact=None if opts.base_url or not (run_dir / log_name).exists() else log_name,
                )
                r.errors.append(str(e))
                r.say(f"server: {e}")
                r.skip(todo, "not run: the server did not start")
        except KeyboardInterrupt as e:
            r.signum = getattr(e, "signum", signal.SIGINT)
            r.errors.append(f"interrupted by {signal.Signals(r.signum).name}")
            r.say(f"interrupted by {signal.Signals(r.signum).name}; server down, what was measured kept")


def _in_plan_order(plan: RunPlan, rows: list[Row], done: set[tuple[str, str, int]]) -> list[Row]:
    """The rows of the whole run in the plan's order: those run now, and those a resumed run passed before
    (so resuming a finished run shows its whole table)."""
    by_item = {(r.stage, r.config, r.repetition): r for r in rows}
    out = []
    for item in plan.items():
        if item in by_item:
            out.append(by_item[item])
        elif item in done:
            out.append(Row(*item, StageStatus.PASS))
    return out


def execute(
    plan: RunPlan,
    store: Store,
    opts: RunOptions | None = None,
    registry: StageRegistry | None = None,
    log: IO[str] | None = None,
) -> RunResult:
    """Run the plan and record it, with the stages of `registry` (servelab's own by default). What the
    plan's stages need is checked first (`Stage.preflight`): a ServelabError then, before any run is
    recorded or server started."""
    opts = opts or RunOptions()
    registry = registry or STAGES
    preflight(plan, StageOptions(gsm8k_path=opts.gsm8k_path, bfcl_python=opts.bfcl_python), registry)
    if plan.server.processes and not opts.base_url:
        refuse_unstartable(plan.server.processes, opts.docker)
    r = _Runner(plan, store, opts, registry, log or sys.stderr)
    baseline = None
    if opts.baseline:
        baseline = stage_values(store, store.get_run(opts.baseline).id)
    try:
        done = r.begin()
        return _carry_out(r, done, baseline)
    finally:
        if r.lock is not None:
            r.lock.release()


def _values(r: _Runner) -> dict[tuple[str, str], dict[str, list[float]]]:
    """stage_values of the store, with the records only the journal holds (a store that could not be
    written)."""
    out = stage_values(r.store, r.run_id)
    for rec in r.writer.pending_values():
        if rec["stage"] != SERVER_STAGE:
            metrics = out.setdefault((rec["stage"], rec["config"]), {})
            for name, v in rec["values"].items():
                if v is not None:
                    metrics.setdefault(name, []).append(v)
    return out


def _statuses(r: _Runner) -> set[StageStatus]:
    rows = {(s.stage, s.config, s.repetition): s.status for s in r.store.stages(r.run_id)}
    rows |= {
        (x["stage"], x["config"], x["repetition"]): StageStatus(x["status"])
        for x in r.writer.pending_stages()
    }
    return {status for key, status in rows.items() if key in set(r.plan.items())}


def _carry_out(r: _Runner, done: set[tuple[str, str, int]], baseline) -> RunResult:
    plan, store, writer = r.plan, r.store, r.writer
    run_dir = store.run_dir(r.run_id)
    todo = [i for i in plan.items() if i not in done]
    if done and not todo:
        r.say(
            f"resuming: all {len(done)} stage rows passed before; nothing to run, the stored results follow"
        )
    elif done:
        r.say(f"resuming: {len(done)} stage rows passed before, {len(todo)} to run")
    try:
        _run_todo(r, plan, r.opts, todo, run_dir)
    except BaseException:  # an unforeseen failure: the run is recorded as ended before it propagates
        writer.finish_run(r.run_id, RunOutcome.ERROR)
        writer.flush()
        raise
    if not writer.flush():
        r.errors.append(
            f"{writer.error}: what the run measured is kept in {writer.path} and reaches the store the next "
            "time it is opened"
        )
    values = _values(r)
    judged = judge(plan.assertions, values, baseline, not_run={str(s) for s in StageName} - set(plan.stages))
    statuses = _statuses(r)
    if r.signum:
        outcome, code = RunOutcome.ERROR, 128 + r.signum
    elif r.errors or statuses - {StageStatus.PASS} or any(j.outcome == "error" for j in judged):
        outcome, code = RunOutcome.ERROR, EXIT_ERROR
    elif any(j.outcome == "fail" for j in judged):
        outcome, code = RunOutcome.FAIL, EXIT_FAIL
    else:
        outcome, code = RunOutcome.PASS, EXIT_PASS
    writer.finish_run(r.run_id, outcome)
    writer.flush()
    rows = _in_plan_order(plan, r.rows, done)
    result = RunResult(r.run_id, run_dir, outcome, code, rows, _summaries(values), judged, r.errors)
    (run_dir / SUMMARY_FILE).write_text(json.dumps(result.dump(), indent=1) + "\n")
    r.say(f"{outcome} (store {store.location}, folder {run_dir})")
    return result
