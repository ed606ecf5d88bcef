"""`servelab collect --engine`: one campaign per table backend, planned from the engine's catalogue, with
the engine's files found (a wheel, extracted on the way, or a folder extracted earlier) and checked."""

import time
from pathlib import Path

from servelab.collect import campaign, cases
from servelab.collect.campaign import CampaignConfig
from servelab.collect.engines import campaign as ec
from servelab.collect.engines import catalogue, loader
from servelab.collect.engines.campaign import EngineRun
from servelab.errors import ServelabError


def prepare_files(
    engine: str, files: Path | None, extract_to: Path | None, ops: set[str], kernels: tuple[str, ...]
) -> loader.EngineFiles | None:
    """The engine's files the selected entries need: from a wheel (extracted into `extract_to`, or beside
    the wheel) or from a folder with a manifest; None when no files were given (a plan without them)."""
    cat = catalogue(engine)
    if files is None:
        if extract_to is not None:
            raise ServelabError("--extract-to needs --engine-files WHEEL", field="extract_to")
        return None
    files = Path(files)
    if files.is_file():
        _, version = loader.wheel_version(files)
        needed = ec.files_needed(cat, ops, version, kernels)
        if extract_to is not None:
            return loader.extract(files, needed, Path(extract_to), cat.engine.value)
        return loader.open_files(files, needed, cat.engine.value)
    if extract_to is not None:
        raise ServelabError(f"--extract-to: {files} is a folder, not a wheel to extract", field="extract_to")
    found = loader.read_manifest(files)
    return loader.verify(found, ec.files_needed(cat, ops, found.version, kernels))


def configs(base: CampaignConfig, engine: str, found, kernels: tuple[str, ...]) -> list[CampaignConfig]:
    """One campaign config per table backend, each in its own folder under base.out."""
    ops = cases.expand_ops(list(base.ops) or None)
    cat = catalogue(engine)
    version = found.version if found else None
    return [
        base._replace(
            out=Path(base.out) / backend,
            engine=EngineRun(cat.engine.value, backend, found.root if found else None, kernels),
            # a repeat of an engine campaign samples the same backend's folder
            repeat_of=Path(base.repeat_of) / backend
            if base.repeat_of is not None and (Path(base.repeat_of) / backend).is_dir()
            else base.repeat_of,
        )
        for backend in ec.backends(cat, ops, version, kernels)
    ]


def dry_run(cfgs: list[CampaignConfig], found) -> dict:
    """The plan of every backend: entries, keys, cost, and the files to carry."""
    out: dict = {
        "engine": cfgs[0].engine.engine if cfgs and cfgs[0].engine else None,
        "version": found.version if found else None,
        "files": _file_sizes(found),
        "backends": {},
    }
    for cfg in cfgs:
        assert cfg.engine is not None
        plan = campaign.plan_campaign(cfg)
        ops = cases.expand_ops(list(cfg.ops) or None)
        out["backends"][cfg.engine.backend] = {
            **campaign.cost(plan, cfg),
            "out": str(cfg.out),
            "entries": {
                e.name: {
                    "ops": list(e.ops),
                    "kernel": e.kernel,
                    "stand_ins": e.stand_ins,
                    "pending": e.pending,
                }
                for e in ec.entries(cfg.engine, ops)
            },
            "plan": [k._asdict() for k in plan.todo],
        }
    return out


def _file_sizes(found) -> dict:
    if found is None:
        return {}
    return {
        m: {"bytes": (found.root / m).stat().st_size, "sha256": h} for m, h in sorted(found.files.items())
    }


def describe(plan: dict) -> str:
    lines = [f"engine {plan['engine']} {plan['version'] or '(version: no files given)'}"]
    total = 0
    for m, f in plan["files"].items():
        total += f["bytes"]
        lines.append(f"  file {m}: {f['bytes'] / 2**20:.1f} MiB, sha256 {f['sha256'][:16]}...")
    if plan["files"]:
        lines.append(f"  files in all: {total / 2**20:.1f} MiB")
    for backend, b in plan["backends"].items():
        lines.append(
            f"backend {backend} -> {b['out']}: {b['keys']} keys planned, {b['done']} done, "
            f"{b['todo']} to measure, about {b['single_gpu_minutes']:.1f} GPU-minutes; "
            f"per op {', '.join(f'{op} {n}' for op, n in b['todo_per_op'].items())}"
        )
        for name, e in b["entries"].items():
            state = f"PENDING ({e['pending']})" if e["pending"] else "runs"
            lines.append(f"  {name} [{state}]: {e['kernel'][:160]}")
    return "\n".join(lines)


def run_all(cfgs: list[CampaignConfig], make_executor, progress: bool, echo) -> list[dict]:
    """Run (or resume) each backend's campaign in turn; --max-minutes spans them all."""
    reports = []
    start = time.monotonic()
    for cfg in cfgs:
        if cfg.max_minutes is not None:
            left = cfg.max_minutes - (time.monotonic() - start) / 60
            if left <= 0:
                echo(f"{cfg.out}: not started, --max-minutes spent (run the command again to resume)")
                continue
            cfg = cfg._replace(max_minutes=left)
        assert cfg.engine is not None
        here = ec.entries(cfg.engine, cases.expand_ops(list(cfg.ops) or None))
        if all(e.pending for e in here):
            why = "; ".join(f"{e.name}: {e.pending}" for e in here)
            echo(f"backend {cfg.engine.backend}: skipped, {why}")
            continue
        echo(f"backend {cfg.engine.backend} -> {cfg.out}")
        reports.append(campaign.run(cfg, executor=make_executor(), progress=progress, echo=echo))
    return reports
