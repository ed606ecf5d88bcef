"""The measured rows a calibration fits, gathered from any combination of sources: AIConfigurator's
silicon_sample.csv (the pinned package's, or a local copy), InferenceX result files, and the results store.
Each source is recorded with a SHA-256 of what was read and the rows it gave or lost (by reason)."""

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from servelab.calibrate import aic, inferencex_rows, store_rows
from servelab.calibrate.closed_loop import EVIDENCE_ONLY_MODELS
from servelab.calibrate.document import SourceRecord
from servelab.calibrate.rows import Case, build_cases, read_rows
from servelab.results.location import server_url, shown
from servelab.userfiles import check_regular


@dataclass(frozen=True)
class Sources:
    """Where the rows come from; with none named, AIConfigurator's pinned silicon_sample.csv."""

    aic_sample: bool = False  # the silicon_sample.csv of the pinned aiconfigurator-core package
    csv: Path | None = None  # a local silicon_sample.csv instead of the package's
    aic_python: Path | None = None  # the python of an environment with AIConfigurator (else the [aic] extra)
    store: Path | str | None = None  # an SQLite file, or a PostgreSQL store's URL
    inferencex: tuple[Path, ...] = ()

    def with_default(self) -> "Sources":
        if self.csv or self.store or self.inferencex:
            return self
        return Sources(aic_sample=True, aic_python=self.aic_python)


@dataclass
class Gathered:
    cases: list[Case]
    skipped: dict[str, int]
    sources: list[SourceRecord]
    silicon_rows: list[dict] = field(default_factory=list)  # the CSV's rows (AIConfigurator's own estimate)
    aic_python: aic.AicPython | None = None  # the python whose aiconfigurator-core gave the sample
    rows_read: int = 0


def file_sha256(path: Path) -> str:
    check_regular(path)  # a FIFO would be waited on forever
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _record(
    kind: str, path: Path | str, sha256: str, read: int, cases: list[Case], skipped: dict
) -> SourceRecord:
    return SourceRecord(
        kind=kind,
        path=str(path),
        sha256=sha256,
        rows_read=read,
        rows_used=len(cases),
        rows_skipped=dict(sorted(skipped.items(), key=lambda kv: -kv[1])),
        # the rows used, by their tie to an InferenceX run: identified, agreed, ambiguous, none
        inferencex_runs=dict(Counter(c.run.split(" ")[0] for c in cases if c.run)),
    )


def _on_system(cases: list[Case], system: str, skipped: dict[str, int]) -> list[Case]:
    kept = []
    for case in cases:
        if case.system != system:
            reason = f"measured on {case.system}, not {system}"
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        kept.append(case)
    return kept


def read_silicon(path: Path, kind: str, system: str) -> tuple[list[dict], list[Case], SourceRecord]:
    rows = read_rows(path)
    held = [r for r in rows if r.get("system") == system and _evidence_only(r)]
    cases, skipped = build_cases([r for r in rows if not _evidence_only(r)], system)
    if held:
        skipped["pinned as closed-loop evidence (calibrate/closed_loop.py EVIDENCE_ONLY_MODELS)"] = len(held)
    others = sum(r.get("system") != system for r in rows)
    if others:
        skipped[f"measured on another system than {system}"] = others
    return rows, cases, _record(kind, path, file_sha256(path), len(rows), cases, skipped)


def _evidence_only(row: dict) -> bool:
    return (row.get("model_path") or "").strip().lower() in EVIDENCE_ONLY_MODELS


def _inferencex(path: Path, system: str) -> tuple[list[Case], SourceRecord]:
    files = inferencex_rows.result_files(path)
    cases: list[Case] = []
    skipped: dict[str, int] = {}
    digest = hashlib.sha256()
    read = 0
    for file in files:
        digest.update(
            f"{file.relative_to(path) if path.is_dir() else file.name} {file_sha256(file)}\n".encode()
        )
        for i, item in enumerate(inferencex_rows.read_items(file)):
            read += 1
            try:
                cases.append(inferencex_rows.to_case(item, f"{file.name}#{i}", f"InferenceX {file.name}"))
            except ValueError as e:
                skipped[str(e)] = skipped.get(str(e), 0) + 1
    cases = _on_system(cases, system, skipped)
    return cases, _record("InferenceX result files", path, digest.hexdigest(), read, cases, skipped)


def _store(path: Path | str, system: str) -> tuple[list[Case], SourceRecord]:
    cases, skipped, sha = store_rows.store_cases(path)
    read = len(cases) + sum(skipped.values())
    cases = _on_system(cases, system, skipped)
    url = server_url(path, "from_store")
    where = shown(url) if url else path  # a URL's credentials never reach the calibration file
    return cases, _record("results store (rows used)", where, sha, read, cases, skipped)


def gather(sources: Sources, system: str) -> Gathered:
    """The rows of every source measured on `system`, a row seen in two sources counted once."""
    sources = sources.with_default()
    out = Gathered([], {}, [])
    parts: list[tuple[list[Case], SourceRecord]] = []
    if sources.csv or sources.aic_sample:
        if sources.csv:
            path, version = sources.csv, "local file"
        else:
            path, version, out.aic_python = aic.aic_csv(sources.aic_python)
        kind = f"AIConfigurator systems/silicon_sample.csv ({aic.AIC_PACKAGE} {version})"
        out.silicon_rows, cases, record = read_silicon(path, kind, system)
        parts.append((cases, record))
    for path in sources.inferencex:
        parts.append(_inferencex(path, system))
    if sources.store:
        parts.append(_store(sources.store, system))
    seen: set[tuple] = set()
    for cases, record in parts:
        out.rows_read += record.rows_read
        out.sources.append(record)
        for reason, n in record.rows_skipped.items():
            out.skipped[reason] = out.skipped.get(reason, 0) + n
        for case in cases:
            same = case.measurement()
            if same in seen:
                why = "duplicate of another row (same deployment, load and measured values)"
                out.skipped[why] = out.skipped.get(why, 0) + 1
                continue
            seen.add(same)
            out.cases.append(case)
    return out
