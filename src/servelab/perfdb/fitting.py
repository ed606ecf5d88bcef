"""Fitting the two corrections that carry measured rows beyond their own tables (`servelab db fit`): each
engine's torch-to-engine ratio per op family (perfdb.ratios) and each pair of systems' transfer efficiency
per op family (perfdb.transfer). Both are fitted on keys measured by both sides, from the tables on the
search path, and written as package data beside the tables."""

from __future__ import annotations

import json
from pathlib import Path

from servelab.engines import MODELLED, Engine, kernel_choices
from servelab.perfdb.db import TableStack, table_stack
from servelab.perfdb.families import BY_NAME
from servelab.perfdb.ratios import FamilyRatio, RatioFile, fit_family
from servelab.perfdb.roofline import Roofline
from servelab.perfdb.tables import DEFAULT_BACKEND, tables_with_data
from servelab.perfdb.transfer import TransferFile, TransferFit, fit_pairs
from servelab.specs import SystemSpec, load_system


def _rows(stack: TableStack):
    """(family, key, measured us) of every measured row of a stack's tables, a key measured by several
    releases taken from the newest."""
    seen = set()
    for tables in stack.sets:
        for name in tables.files:
            idx = tables.index(name)
            if idx is None:
                continue
            fam, data = BY_NAME[name], idx.data
            for i in range(len(data)):
                key = fam.key_type(*data.row_key(i))
                if data.is_measured(i) and key not in seen:
                    seen.add(key)
                    yield name, key, float(data.latency_us[i])


def engine_stacks(system: SystemSpec, engine: Engine) -> dict[str, TableStack]:
    """The engine's own tables and those of the kernels it picks, on one system, by kernel table name."""
    backends = [engine.value, *(c.table for c in kernel_choices(engine))]
    return {b: s for b in backends if (s := table_stack(system, b)) is not None}


def fit_ratios(engine: Engine, systems: list[SystemSpec]) -> RatioFile:
    """The engine's torch-to-engine ratio per family over every system that has both kinds of tables."""
    pairs: dict[tuple[str, str], tuple[list[float], list[float], set[str]]] = {}
    for system in systems:
        torch = table_stack(system, DEFAULT_BACKEND)
        if torch is None:
            continue
        for kernel, stack in engine_stacks(system, engine).items():
            for family, key, us in _rows(stack):
                found = torch.lookup(key, borrow=False)
                if found is None or found.source != "measured":  # both measured the very key
                    continue
                eng, tor, where = pairs.setdefault((kernel, family), ([], [], set()))
                eng.append(us)
                tor.append(found.us)
                where.add(system.name)
    kernels: dict[str, dict[str, FamilyRatio]] = {}
    for (kernel, family), (eng, tor, where) in sorted(pairs.items()):
        fit = fit_family(eng, tor)
        if fit is not None:
            ratio, lo, hi = fit
            kernels.setdefault(kernel, {})[family] = FamilyRatio(
                ratio=ratio, lo=lo, hi=hi, rows=len(eng), systems=sorted(where)
            )
    return RatioFile(
        backend=engine.value,
        provenance=f"servelab db fit: {engine.value} rows against torch rows of the same keys on the same "
        "system, in the tables beside this file (perfdb/ratios.py)",
        kernels=kernels,
    )


def fit_transfers(backends: list[str], systems: list[SystemSpec]) -> TransferFile:
    """Per ordered pair of systems and family, the efficiency that carries one's rows to the other's, over
    the keys both measured with the same backend."""
    fits = []
    for backend in backends:
        stacks = {s.name: (s, table_stack(s, backend)) for s in systems}
        have = {n: v for n, v in stacks.items() if v[1] is not None}
        for target_name, (target, target_stack) in sorted(have.items()):
            for source_name, (source, source_stack) in sorted(have.items()):
                if source_name == target_name:
                    continue
                assert target_stack is not None and source_stack is not None
                fits += _pair_fits(source, source_stack, target, target_stack, backend)
    return TransferFile(
        provenance="servelab db fit: rows of the same keys measured on two systems with the same backend, in "
        "the tables beside this file (perfdb/transfer.py)",
        fits=fits,
    )


def _pair_fits(
    source: SystemSpec, source_stack: TableStack, target: SystemSpec, target_stack: TableStack, backend: str
) -> list[TransferFit]:
    # both rooflines with the source's efficiencies, as PerfDB carries rows (db.PerfDB._carrying_roofline)
    src_roof = Roofline(source, backend=backend)
    dst_roof = Roofline(target, backend=backend, efficiencies_of=src_roof.eff)
    pairs: dict[str, tuple[list[float], ...]] = {}
    for family, key, us in _rows(target_stack):
        found = source_stack.lookup(key, borrow=False)
        if found is None or found.source != "measured":  # both measured the very key
            continue
        cols = pairs.setdefault(family, ([], [], [], []))
        for col, value in zip(
            cols, (found.us, src_roof.latency(key).us, us, dst_roof.latency(key).us), strict=True
        ):
            col.append(value)
    out = []
    for family, (s_us, s_roof, t_us, t_roof) in sorted(pairs.items()):
        fit = fit_pairs(s_us, s_roof, t_us, t_roof)
        if fit is not None:
            eff, lo, hi = fit
            out.append(
                TransferFit(
                    source=source.name,
                    target=target.name,
                    backend=backend,
                    family=family,
                    efficiency=eff,
                    lo=lo,
                    hi=hi,
                    rows=len(t_us),
                )  # fmt: skip
            )
    return out


def fit_all(into: Path) -> dict:
    """Fit and write every ratio and transfer file the tables on the search path support; a report."""
    systems = [load_system(n) for n in tables_with_data()]
    (into / "ratios").mkdir(parents=True, exist_ok=True)
    report: dict = {"ratios": {}, "transfer": []}
    for engine in MODELLED:
        ratios = fit_ratios(engine, systems)
        path = into / "ratios" / f"{engine.value}.json"
        if ratios.kernels:
            path.write_text(json.dumps(ratios.model_dump(mode="json"), indent=1, sort_keys=True) + "\n")
        elif path.exists():
            path.unlink()
        report["ratios"][engine.value] = {
            kernel: {f: r.model_dump() for f, r in fams.items()} for kernel, fams in ratios.kernels.items()
        }
    backends = [DEFAULT_BACKEND, *(e.value for e in MODELLED)]
    transfer = fit_transfers(backends, systems)
    (into / "transfer.json").write_text(
        json.dumps(transfer.model_dump(mode="json"), indent=1, sort_keys=True) + "\n"
    )
    report["transfer"] = [f.model_dump() for f in transfer.fits]
    return report
