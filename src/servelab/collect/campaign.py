"""A collection campaign: plan the keys, print the cost, skip what is done, run the rest on an executor while
the parent writes every outcome as it arrives, then model collectives beyond the GPUs there were and run the
acceptance checks. Kill it at any point and run it again: finished rows stay and are not measured twice."""

import json
import os
import time
from pathlib import Path
from typing import NamedTuple

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from servelab.collect import accept, cases, estimate, modelled, provenance
from servelab.collect.campaign_dir import CampaignDir, key_from_row, key_id
from servelab.collect.engines import campaign as engine_campaign
from servelab.collect.engines import runtime as engine_runtime
from servelab.collect.engines.campaign import EngineRun
from servelab.collect.executors import Callbacks, LocalExecutor
from servelab.collect.suite import OpSuite, gpu_suite
from servelab.errors import ServelabError
from servelab.perfdb.keys import Comm
from servelab.perfdb.ops import COMM_OPS
from servelab.perfdb.roofline import Roofline
from servelab.progress import DEFAULT_INTERVAL_S, Steps, is_terminal
from servelab.specs import load_system

NCCL_SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


class CampaignConfig(NamedTuple):
    out: Path
    system: str = "h200_sxm"
    models: tuple[str, ...] = ()  # empty: cases.default_models()
    ops: tuple[str, ...] = ()  # empty: every op
    smoke: bool = False
    gpus: int = 1  # GPUs on this node for single-GPU ops and collectives
    comm_gpus: tuple[int, ...] = ()  # collective group sizes to measure; default 2..gpus in powers of two
    model_gpus: tuple[int, ...] = (8,)  # collective sizes to model when there were fewer GPUs
    retry_errors: bool = False
    max_minutes: float | None = None  # stop starting new keys after this long (resume later)
    limit: int | None = None  # measure at most this many keys (of those not done)
    repeat_of: Path | None = None  # measure again a sample of this campaign's measured keys (repeatability)
    sample: int = 300
    engine: EngineRun | None = None  # engine kernels (collect.engines) instead of servelab's torch ops


class CampaignPlan(NamedTuple):
    keys: list
    todo: list
    single_s: float
    comm_s: float
    done: int = 0  # keys an earlier run finished (rows, or errors unless retried)


def plan_campaign(cfg: CampaignConfig) -> CampaignPlan:
    system = load_system(cfg.system)
    models = list(cfg.models) or cases.default_models()
    ops = cases.expand_ops(list(cfg.ops) or None)
    comm_gpus = cfg.comm_gpus or tuple(g for g in (2, 4, 8, 16) if g <= cfg.gpus)
    if cfg.repeat_of is not None:
        keys = repeat_sample(Path(cfg.repeat_of), cfg.sample, ops)
    elif cfg.engine is not None:
        keys = engine_campaign.plan_keys(cfg.engine, ops)
        keys = cases._smoke(keys, per_op=2) if cfg.smoke else cases._interleave(keys)
    else:
        keys = cases.plan(models, system, ops, comm_gpus, smoke=cfg.smoke)
    store = CampaignDir(cfg.out)
    done = store.done_ids(include_errors=not cfg.retry_errors) if store.rows_dir.exists() else set()
    todo = [k for k in keys if key_id(k) not in done]
    finished = len(keys) - len(todo)
    if cfg.limit is not None:
        todo = todo[: cfg.limit]
    if cfg.engine is not None:
        single, comm = engine_campaign.seconds(cfg.engine, todo, Roofline(system)), 0.0
    else:
        single, comm = estimate.campaign_seconds(todo, Roofline(system))
    return CampaignPlan(keys, todo, single, comm, finished)


def repeat_sample(source: Path, sample: int, ops: set[str]) -> list:
    """Every k-th measured key of each op of an earlier campaign (spread over its whole range), about
    `sample` in all, collectives included."""
    rows = [
        r for r in CampaignDir(source).rows() if r.get("source", "measured") == "measured" and r["op"] in ops
    ]
    if not rows:
        raise ServelabError(f"{source}: no measured rows there", field="repeat_of")
    by_op: dict[str, list] = {}
    for r in rows:
        by_op.setdefault(r["op"], []).append(key_from_row(r))
    share = max(1, sample // len(by_op))
    keys = []
    for op_keys in by_op.values():
        step = max(1, len(op_keys) // share)
        keys.extend(op_keys[::step][:share])
    return keys


def cost(plan: CampaignPlan, cfg: CampaignConfig) -> dict:
    """What the plan holds and what it will cost, in minutes (roofline-based estimates)."""
    gpus = max(1, cfg.gpus)
    todo_per_op: dict[str, int] = {}
    for key in plan.todo:
        todo_per_op[key.op] = todo_per_op.get(key.op, 0) + 1
    return {
        "system": cfg.system,
        "keys": len(plan.keys),
        "done": plan.done,
        "todo": len(plan.todo),
        "todo_per_op": todo_per_op,
        "gpus": gpus,
        "single_gpu_minutes": round(plan.single_s / 60, 2),
        "comm_gpu_minutes": round(plan.comm_s / 60, 2),
        "wall_minutes": round((plan.single_s + plan.comm_s) / gpus / 60, 2),
        "source": "roofline",
    }


def describe(plan: CampaignPlan, cfg: CampaignConfig) -> str:
    c = cost(plan, cfg)
    return (
        f"{c['keys']} keys planned, {c['done']} already done, {c['todo']} to "
        f"measure: about {c['single_gpu_minutes'] + c['comm_gpu_minutes']:.1f} GPU-minutes "
        f"({c['single_gpu_minutes']:.1f} single-GPU + {c['comm_gpu_minutes']:.1f} in collectives), about "
        f"{c['wall_minutes']:.1f} minutes on {c['gpus']} GPU(s) (roofline-based estimate)"
    )


class _Progress:
    """The keys measured so far: rich's bar on a terminal; elsewhere (a pipe, a CI log) a plain line every
    `interval_s` with the time left (servelab.progress.Steps); nothing when not `enabled` (tests, --json)."""

    def __init__(self, total: int, enabled: bool, interval_s: float = DEFAULT_INTERVAL_S):
        self.bar: Progress | None = None
        self.steps: Steps | None = None
        if enabled and total and is_terminal():
            self.bar = Progress(
                TextColumn("[bold]collect"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[op]}"),
                TextColumn("errors {task.fields[errors]}"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self.task = self.bar.add_task("collect", total=total, op="", errors=0)
            self.bar.start()
        elif enabled and total:
            self.steps = Steps("collect: keys measured", total, interval_s)
        self.errors = 0

    def advance(self, op: str, error: bool) -> None:
        self.errors += error
        if self.bar:
            self.bar.update(self.task, advance=1, op=op, errors=self.errors)
        if self.steps:
            self.steps.advance(notes=f"{self.errors} errors, last {op}")

    def stop(self) -> None:
        if self.bar:
            self.bar.stop()
        if self.steps:
            self.steps.finish()


def run(
    cfg: CampaignConfig, executor=None, suite: OpSuite | None = None, progress: bool = True, echo=print
) -> dict:
    """Run (or resume) a campaign; returns the acceptance report."""
    for var, value in NCCL_SAFE_ENV.items():
        os.environ.setdefault(var, value)
    if cfg.engine is not None:
        os.environ.update(engine_campaign.env(cfg.engine))  # what the spawned workers load and run
        # the engine's kernels, never servelab's torch ops, measure an engine campaign's keys
        ops = cases.expand_ops(list(cfg.ops) or None)
        suite = suite or engine_runtime.suite(tuple(ops), device=cfg.engine.device)
    suite = suite or gpu_suite()
    executor = executor or LocalExecutor(cfg.gpus)
    plan = plan_campaign(cfg)
    echo(describe(plan, cfg))
    store = CampaignDir(cfg.out)
    store.ensure()
    if cfg.retry_errors:
        store.drop_errors({key_id(k) for k in plan.todo})
    prov_path = Path(cfg.out) / "provenance.json"
    prov = _load_json(prov_path) or provenance.base(
        cfg.system, type(executor).__name__, {k: os.environ.get(k) for k in NCCL_SAFE_ENV}
    )
    if cfg.engine is not None:
        prov.update(engine_campaign.provenance(cfg.engine, cases.expand_ops(list(cfg.ops) or None)))
    runs = prov.setdefault("runs", [])
    this_run = {
        "command": provenance.command_line(),
        "started": provenance.base("", "", {})["date"],
        "clocks_start": provenance.nvidia_smi(),
        "backend": suite.name,
    }
    runs.append(this_run)
    store.write_json("provenance.json", prov)

    bar = _Progress(len(plan.todo), progress)
    counts = {"rows": 0, "errors": 0}

    def on_row(key, result):
        store.add_row(key, {"source": "measured"} | result)
        counts["rows"] += 1
        bar.advance(key.op, False)

    def on_error(key, error_class, message):
        store.add_error(key, error_class, message)
        counts["errors"] += 1
        bar.advance(key.op, True)

    def on_facts(facts):
        prov.update({k: v for k, v in facts.items()})
        store.write_json("provenance.json", prov)

    cb = Callbacks(lambda key: None, on_row, on_error, on_facts)
    deadline = time.monotonic() + cfg.max_minutes * 60 if cfg.max_minutes else None
    single = [k for k in plan.todo if k.op not in COMM_OPS]
    comm = [k for k in plan.todo if k.op in COMM_OPS]
    start = time.monotonic()
    try:
        if comm:  # first: they hold every GPU, and the modelled larger groups need them
            echo(f"collect: collectives: {len(comm)} keys on up to {max(k.gpus for k in comm)} GPUs")
            executor.run_comm(comm, suite, max(k.gpus for k in comm), cb, deadline)
        if single:
            echo(f"collect: single-GPU ops: {len(single)} keys on {cfg.gpus} GPU(s)")
        executor.run_single(single, suite, cb, deadline)
    finally:
        bar.stop()
        this_run.update(
            finished=provenance.base("", "", {})["date"],
            seconds=round(time.monotonic() - start, 1),
            clocks_end=provenance.nvidia_smi(),
            rows=counts["rows"],
            errors=counts["errors"],
        )
        store.write_json("provenance.json", prov)
    echo("collect: checking the tables (acceptance)")
    _add_modelled(store, cfg)
    system = load_system(cfg.system)
    models = [cases.planning_model(m, system) for m in (cfg.models or cases.default_models())]
    # a smoke run measures a handful per op: only the full plan must cover every tp of every model
    coverage = not cfg.smoke and cfg.repeat_of is None and cfg.engine is None
    report = accept.check(plan.keys, store.rows(), store.errors(), models, coverage=coverage)
    report["this_run"] = {"rows": counts["rows"], "errors": counts["errors"], "seconds": this_run["seconds"]}
    store.write_json("acceptance.json", report)
    echo(summary(report))
    return report


def _add_modelled(store: CampaignDir, cfg: CampaignConfig) -> None:
    rows = [r for op in COMM_OPS for r in store.rows(op)]
    if not rows:
        return
    have = {(r["op"], r["bytes"], r["gpus"]) for r in rows}
    for r in modelled.model_rows(rows, cfg.model_gpus, load_system(cfg.system)):
        if (r["op"], r["bytes"], r["gpus"]) not in have:
            key = Comm(r["bytes"], r["gpus"], r["op"])
            store.add_row(key, {k: v for k, v in r.items() if k not in key._fields})


def summary(report: dict) -> str:
    lines = [f"acceptance: {'ok' if report['ok'] else 'NOT ok'}"]
    lines.append(f"{'op':32} {'planned':>8} {'rows':>6} {'errors':>7} {'failed':>7} {'missing':>8}")
    for op, v in report["ops"].items():
        lines.append(
            f"{op:32} {v['planned']:>8} {v['rows']:>6} {v['errors']:>7} {v['failed']:>7} {v['missing']:>8}"
        )
    if any(v["failed"] for v in report["ops"].values()):
        lines.append(
            "failed: keys whose measurement broke (not out of memory, not unsupported); "
            "errors.jsonl says why, --retry-errors measures them again"
        )
    for p in report["heads"][:10]:
        lines.append("heads: " + p)
    for p in report["numbers"][:10]:
        lines.append("numbers: " + p)
    return "\n".join(lines)


def _load_json(path: Path):
    if path.exists():
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            return None
    return None
