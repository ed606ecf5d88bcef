"""`servelab collect`: measure per-op latency tables on this machine's GPUs."""

import importlib.util
import math
from pathlib import Path

import typer

from servelab.cli._common import JsonOpt, print_json
from servelab.collect.campaign import CampaignConfig, cost, describe, plan_campaign, run
from servelab.collect.cases import expand_ops
from servelab.collect.engines import session
from servelab.collect.executors import EXECUTORS
from servelab.errors import ServelabError
from servelab.specs import load_system


def collect(
    system: str = typer.Option(
        "h200_sxm", "--system", help="the system these tables describe (h200_sxm, ...)"
    ),
    ops: list[str] = typer.Option(
        None,
        "--ops",
        help="op families or ops, comma separated: gemm, attention, mla, "
        "dsv4, moe, elementwise, comm, or single ops (default: all)",
    ),
    model: list[str] = typer.Option(
        None,
        "--model",
        help="models or checkpoints to derive keys from (repeat; default: every embedded model and every "
        "checkpoint with its own precision)",
    ),
    smoke: bool = typer.Option(False, "--smoke", help="a handful of keys per op"),
    out: Path = typer.Option(
        Path("collect-out"), "--out", help="campaign directory (resumed when it exists)"
    ),
    gpus: int = typer.Option(0, "--gpus", min=0, max=4096, help="GPUs to use (default: all visible)"),
    comm_gpus: str = typer.Option(
        "", "--comm-gpus", help="collective group sizes, e.g. 2,4 (default: 2..gpus)"
    ),
    executor: str = typer.Option("local", "--executor", help="local (one process per GPU) or ray"),
    ray_address: str = typer.Option(
        None, "--ray-address", help="Ray cluster address (default: a local cluster)"
    ),
    max_minutes: float = typer.Option(
        None, "--max-minutes", help="start no new key after this long; resume later"
    ),
    limit: int = typer.Option(None, "--limit", min=1, help="measure at most this many keys"),
    retry_errors: bool = typer.Option(False, "--retry-errors", help="measure keys that failed before again"),
    repeat_of: Path = typer.Option(
        None,
        "--repeat-of",
        help="measure again a sample of this campaign's keys "
        "(repeatability; compare with `servelab db compare-repeat`)",
    ),
    sample: int = typer.Option(300, "--sample", min=1, help="keys in the --repeat-of sample"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the plan and its cost, measure nothing"),
    engine: str = typer.Option(
        None,
        "--engine",
        help="time this engine's kernels (vllm, sglang, trtllm) instead of servelab's torch ops: one "
        "campaign per table backend under --out (docs/collect.md, Engine kernels)",
    ),
    engine_files: Path = typer.Option(
        None,
        "--engine-files",
        help="the engine's wheel, or a folder extracted from it (--extract-to) with its manifest.json",
    ),
    extract_to: Path = typer.Option(
        None, "--extract-to", help="with --engine-files WHEEL: extract the files the entries need here"
    ),
    kernels: str = typer.Option(
        "", "--kernels", help="with --engine: catalogue entries to run, comma separated (default: all)"
    ),
    as_json: bool = JsonOpt,
) -> int:
    """Measure op latencies (GEMM, attention, MLA, DeepSeek-V4 modules, MoE, collectives) into
    DIR/rows/*.jsonl. With --json: the plan's cost (--dry-run) or the acceptance report on stdout, progress
    on stderr."""
    load_system(system)  # a bad name fails before anything starts
    if max_minutes is not None and not (math.isfinite(max_minutes) and max_minutes > 0):
        raise ServelabError(f"--max-minutes {max_minutes}: expected a positive number of minutes")
    try:
        sizes = tuple(int(s) for s in comm_gpus.split(",") if s.strip())
    except ValueError:
        raise ServelabError(f"--comm-gpus: expected sizes like 2,4, got {comm_gpus!r}") from None
    try:
        make_executor = EXECUTORS.get(executor)
    except ServelabError as e:
        raise ServelabError(f"--executor: {e}") from None
    if not dry_run and engine is None:
        _require_torch()
    n = gpus or (0 if dry_run or engine is not None else _visible_gpus())
    cfg = CampaignConfig(
        out=out,
        system=system,
        models=tuple(model or ()),
        ops=tuple(ops or ()),
        smoke=smoke,
        gpus=max(n, 1),
        comm_gpus=sizes,
        retry_errors=retry_errors,
        max_minutes=max_minutes,
        limit=limit,
        repeat_of=repeat_of,
        sample=sample,
    )
    if engine is not None:
        return _engine(
            cfg, engine, engine_files, extract_to, kernels, dry_run, as_json, make_executor, ray_address, gpus
        )
    if engine_files is not None or extract_to is not None or kernels:
        raise ServelabError("--engine-files, --extract-to and --kernels go with --engine", field="engine")
    if dry_run:
        plan = plan_campaign(cfg)
        if as_json:
            print_json("servelab.collect.plan", cost(plan, cfg))
        else:
            typer.echo(describe(plan, cfg))
        return 0
    if n == 0:
        raise ServelabError(
            "servelab collect needs a CUDA GPU; torch sees none here (--dry-run prints the plan without one)"
        )
    report = run(
        cfg,
        executor=make_executor(cfg.gpus, ray_address),
        progress=not as_json,
        echo=lambda line: typer.echo(line, err=as_json),
    )
    if as_json:
        print_json("servelab.collect.report", report)
    elif not report["ok"]:
        typer.echo(f"see {out / 'acceptance.json'} and {out / 'errors.jsonl'}")
    this_run = report["this_run"]
    if this_run["errors"] and not this_run["rows"]:
        typer.echo(f"nothing was measured: all {this_run['errors']} keys of this run failed", err=True)
        return 1
    return 0


def _engine(
    cfg, engine, engine_files, extract_to, kernels, dry_run, as_json, make_executor, ray_address, gpus_given
) -> int:
    names = tuple(k.strip() for k in kernels.split(",") if k.strip())
    ops = expand_ops(list(cfg.ops) or None)
    found = session.prepare_files(engine, engine_files, extract_to, ops, names)
    cfgs = session.configs(cfg, engine, found, names)
    if dry_run:
        plan = session.dry_run(cfgs, found)
        if as_json:
            print_json("servelab.collect.engine_plan", plan)
        else:
            typer.echo(session.describe(plan))
        return 0
    if found is None:
        raise ServelabError("--engine needs --engine-files (the wheel, or a folder extracted from it)")
    _require_torch()
    gpus = gpus_given or _visible_gpus()
    if gpus < 1:
        raise ServelabError("servelab collect needs a CUDA GPU; torch sees none here")
    cfgs = [c._replace(gpus=gpus) for c in cfgs]
    reports = session.run_all(
        cfgs,
        lambda: make_executor(gpus, ray_address),
        progress=not as_json,
        echo=lambda line: typer.echo(line, err=as_json),
    )
    if as_json:
        print_json("servelab.collect.engine_reports", {"reports": reports})
    runs = [r["this_run"] for r in reports]
    if runs and all(r["errors"] and not r["rows"] for r in runs):
        typer.echo("nothing was measured: every key of this run failed", err=True)
        return 1
    return 0


def _require_torch() -> None:
    """Without torch (the collect extra) stop before any worker starts: each would fail on its import."""
    if importlib.util.find_spec("torch") is None:
        raise ServelabError(
            "servelab collect needs the collect extra (torch): pip install '.[collect]' "
            "(--dry-run prints the plan without it)"
        )


def _visible_gpus() -> int:
    import torch  # noqa: PLC0415 - torch is an optional extra (the core install has none) and slow to import

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
