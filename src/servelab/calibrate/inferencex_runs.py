"""Which InferenceX run measured a calibration row.

InferenceX runs a sweep when a commit adds entries to its perf-changelog.yaml, and the `measured=` time of
an InferenceX row in silicon_sample.csv is that commit's time plus a few seconds. data/inferencex_runs.json
(made by scripts/inferencex_runs.py from InferenceX's history; its `_provenance` names the commit) lists those
runs with, per config key, the deployment and whether the key decodes speculatively (MTP); it is read
through its model (RunTable). A row is tied to a
run by its deployment (engine, hardware, model, precision), its load (a run measured only the sequence lengths
and concurrencies of its keys' search space) and its time:
- an exact time names the run that started within a minute before it;
- a date-only row (`...T00:00:00.000Z`, as the later exports write) is decided by an exact row holding the
  same measurement when there is one, else by that day's runs of the deployment when they all agree on
  speculative decoding; otherwise it is ambiguous.
"""

import json
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import cache
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from servelab.errors import ServelabError
from servelab.predict.deployment import engine_of_framework, system_of_gpu

RUNS_FILE = Path(str(resources.files("servelab.calibrate") / "data" / "inferencex_runs.json"))
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

# the run starts at the commit; its rows carry a time a few seconds later
WINDOW = timedelta(minutes=1)
# checkpoint suffixes that name a quantization or revision of the same model
_VARIANT = re.compile(r"(-(fp8|fp4|nvfp4|mxfp4|int4|0528|v2))+$")
# a database dump names InferenceX's DeepSeek-R1 runs DeepSeek-V3 (InferenceX ran no DeepSeek-V3 key)
_SAME_MODEL = {"deepseek-v3": "deepseek-r1"}
_PRECISION = {"nvfp4": "fp4", "mxfp4": "fp4"}


@dataclass(frozen=True)
class KeyRun:
    """One config key one changelog commit ran."""

    commit: str
    time: datetime
    key: str
    spec_decoding: str  # mtp, none, or mixed (the key's search space has both)
    search_space: tuple[tuple, ...] = ()  # (isl, osl, lowest conc, highest conc, spec decoding) per entry

    def at_load(self, load: tuple[int, int, int] | None) -> "KeyRun | None":
        """The run as it measured an (isl, osl, concurrency) point: its speculative decoding there, or None
        where its search space does not hold the point (no load: the run as a whole)."""
        if load is None or not self.search_space:
            return self
        isl, osl, conc = load
        specs = {p[4] for p in self.search_space if (p[0], p[1]) == (isl, osl) and p[2] <= conc <= p[3]}
        if not specs:
            return None
        return replace(self, spec_decoding=specs.pop() if len(specs) == 1 else "mixed")


@dataclass(frozen=True)
class Tie:
    """What a row is tied to: `identified` (one run), `agreed` (several runs of its day, all decoding
    alike), `ambiguous`, or `none` (no run of its deployment at that time: a scheduled or manual run, or a
    row with no time)."""

    status: str
    runs: tuple[KeyRun, ...] = ()

    @property
    def spec_decoding(self) -> str | None:
        """The speculative decoding where the tie decides it (mtp, none, InferenceX's others), or None."""
        if self.status not in ("identified", "agreed"):
            return None
        return self.runs[0].spec_decoding

    @property
    def commits(self) -> str:
        return ", ".join(dict.fromkeys(r.commit[:9] for r in self.runs))


def model_key(checkpoint: str) -> str:
    """A checkpoint's model, without organisation or quantization/revision suffix
    (`nvidia/DeepSeek-R1-0528-FP4-V2` -> `deepseek-r1`)."""
    base = _VARIANT.sub("", checkpoint.strip().rsplit("/", 1)[-1].lower())
    return _SAME_MODEL.get(base, base)


def _precision(text: str) -> str:
    text = text.strip().lower()
    return _PRECISION.get(text, text)


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KeyFacts(_Data):
    """A config key as the run's master config had it (InferenceX's field values, servelab's names)."""

    framework: str
    runner: str
    model: str
    model_prefix: str
    precision: str
    spec_decoding: str
    image: str
    # (isl, osl, lowest conc, highest conc, spec decoding) per search-space entry
    search_space: list[tuple[int, int, int, int, str]] | None = None


class ChangelogRun(_Data):
    commit: str
    time: datetime
    subject: str
    keys: dict[str, KeyFacts]

    @field_validator("time", mode="before")
    @classmethod
    def _utc(cls, v: object) -> object:
        # the generator writes UTC as ...Z, to the second
        return datetime.strptime(v, TIME_FORMAT).replace(tzinfo=UTC) if isinstance(v, str) else v


class RunTableProvenance(_Data):
    source: str
    commit: str
    since: str
    until: str
    runners: str


class RunTable(_Data):
    provenance: RunTableProvenance = Field(alias="_provenance")
    runs: list[ChangelogRun]


def read_run_table(path: Path = RUNS_FILE) -> RunTable:
    """The pinned table of runs; one line naming the file and the field where it is not what
    scripts/inferencex_runs.py writes."""
    try:
        return RunTable.model_validate(json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError) as e:
        raise ServelabError(f"{path}: cannot read the run table ({e})") from None
    except ValidationError as e:
        raise ServelabError.from_validation(e, str(path)) from None


@cache
def run_table() -> tuple[tuple[tuple, KeyRun], ...]:
    """((engine, system, model, precision), KeyRun) for every key of every run in the pinned table;
    keys of frameworks or runners servelab has no engine or system for are left out."""
    table = []
    for run in read_run_table().runs:
        for key, facts in run.keys.items():
            try:
                deployment = (
                    engine_of_framework(facts.framework),
                    system_of_gpu(facts.runner),
                    model_key(facts.model),
                    _precision(facts.precision),
                )
            except ValueError:
                continue
            points = tuple(facts.search_space or ())
            table.append((deployment, KeyRun(run.commit, run.time, key, facts.spec_decoding, points)))
    return tuple(table)


def parse_measured(text: str) -> tuple[datetime | None, str]:
    """(exact time or None, UTC date or "") of a `measured=` value; a date-only value is written as midnight
    with milliseconds (`2026-01-14T00:00:00.000Z`) or as a bare date."""
    text = text.strip()
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}(T00:00:00\.000Z)?", text):
        return None, text[:10]
    m = re.fullmatch(r"(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(\.\d+)?Z", text)
    if not m:
        return None, ""
    return datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}+00:00"), m.group(1)


def _decided(runs: list[KeyRun]) -> Tie:
    if not runs:
        return Tie("none")
    if len({r.spec_decoding for r in runs}) > 1 or runs[0].spec_decoding == "mixed":
        return Tie("ambiguous", tuple(runs))
    return Tie("identified" if len({r.commit for r in runs}) == 1 else "agreed", tuple(runs))


def find_run(
    engine: str,
    system: str,
    model: str,
    precision: str,
    measured: str,
    duplicate_measured: str = "",
    load: tuple[int, int, int] | None = None,
) -> Tie:
    """The run a row measured at `measured` was taken in; `duplicate_measured` is the exact time of another
    row holding the same measurement, which decides a date-only row; `load` (isl, osl, concurrency) keeps the
    runs whose search space holds it."""
    want = (engine, system, model_key(model), _precision(precision))
    found = (run.at_load(load) for deployment, run in run_table() if deployment == want)
    runs = [run for run in found if run is not None]
    at, day = parse_measured(measured)
    if at is None and duplicate_measured:
        exact, dup_day = parse_measured(duplicate_measured)
        if exact is not None and dup_day == day:
            at = exact
    if at is not None:
        return _decided([r for r in runs if timedelta(0) <= at - r.time <= WINDOW])
    if not day:
        return Tie("none")
    return _decided([r for r in runs if r.time.strftime("%Y-%m-%d") == day])


def measured_of(row: dict) -> str:
    """A silicon_sample.csv row's `measured=` value, as written (or "")."""
    m = re.search(r"measured=([^;\s]+)", row.get("silicon_data_source", ""))
    return m.group(1) if m else ""


def _load(row: dict) -> tuple[int, int, int] | None:
    """(isl, osl, concurrency) of a row, or None where it does not say."""
    conc = re.search(r"silicon_concurrency=(\d+)", row.get("silicon_data_source", ""))
    try:
        return int(row["isl"]), int(row["osl"]), int(conc.group(1) if conc else row["batch_size"])
    except (KeyError, TypeError, ValueError):
        return None


def _same_measurement(row: dict) -> tuple:
    return (
        row.get("backend"),
        row.get("system"),
        _load(row),
        round(float(row.get("silicon_ttft_ms") or "nan"), 6),
        round(float(row.get("silicon_tpot_ms") or "nan"), 6),
    )


def tie_rows(rows: list[dict]) -> dict[str, Tie]:
    """The tie of every silicon_sample.csv row (by row id); a date-only row is decided by an exact-time row
    of the same measurement (same engine, system, load and measured values) when one exists."""
    exact: dict[tuple, str] = {}
    for row in rows:
        if parse_measured(measured_of(row))[0] is not None:
            exact.setdefault(_same_measurement(row), measured_of(row))
    return {
        row["id"]: find_run(
            row.get("backend", ""),
            row.get("system", ""),
            row.get("model_path", ""),
            row.get("precision", ""),
            measured_of(row),
            exact.get(_same_measurement(row), ""),
            _load(row),
        )
        for row in rows
    }
