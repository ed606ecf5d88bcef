"""`servelab results import`: `vllm bench serve` result files and InferenceX result JSON into the store.

Recognised shapes (a file may also hold a list of them, as InferenceX's utils/collect_results.py writes):
- a `vllm bench serve` result (vLLM's vllm/benchmarks/serve.py; servelab bench writes the same fields): a dict
  with `completed` and `duration`; every numeric top-level field except the load settings becomes a metric,
  the config is perf-eval's run name `<label>-conc-<max_concurrency>` (`<label>-rate-<request_rate>` when
  unbounded), the run name is the model id;
- an InferenceX result (utils/process_result.py): a dict with `hw`, `framework` and `conc`; latencies are in
  seconds there (the `_ms` fields divided by 1000) and `*_intvty` is 1000 / TPOT in tokens/s per user. The run
  name is `<model prefix>-<hw>-<framework>-<precision>`, the config the parallelism, ISL/OSL and concurrency.

Entries are grouped into one run per name; the same config twice in a group becomes repetitions 0, 1, ...
A file is keyed by the SHA-256 of its bytes, so importing it again adds nothing.
"""

import hashlib
import json
import math
import shutil
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from servelab.errors import ServelabError
from servelab.results.provenance import Provenance
from servelab.results.schema import StageStatus
from servelab.results.store import Store
from servelab.userfiles import parse_json, read_bytes

EXPECTED = (
    "a `vllm bench serve` result JSON (with completed, duration) or an InferenceX result JSON (with hw, conc)"
)

# vLLM load settings and servelab's result schema version: configuration, not measurements
VLLM_SETTINGS = {
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "ramp_up_start_rps",
    "ramp_up_end_rps",
    "version",
}
INFERENCEX_SETTINGS = {
    "conc",
    "isl",
    "osl",
    "tp",
    "pp",
    "ep",
    "dcp_size",
    "pcp_size",
    "num_prefill_gpu",
    "num_decode_gpu",
    "power_metric_schema_version",
    "power_valid",
} | {
    f"{role}_{p}"
    for role in ("prefill", "decode")
    for p in ("tp", "pp", "ep", "dcp_size", "pcp_size", "num_workers")
}


@dataclass(frozen=True)
class Entry:
    """One benchmark point read from a file."""

    name: str
    config: str
    metrics: dict[str, float]
    units: dict[str, str]
    outcome: str
    started_at: str | None = None
    ended_at: str | None = None
    provenance: Provenance = field(default_factory=lambda: Provenance(servelab_version=None))
    source: str = "imported"  # "predicted" for a simulated twin's result (`servelab bench --simulate`)


@dataclass(frozen=True)
class Imported:
    path: str
    run_id: str
    name: str
    new: bool  # False: the file was imported before, as run_id
    num_metrics: int


def _numbers(data: dict, skip: set[str]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in data.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and k not in skip and math.isfinite(v)
    }


MAX_CONCURRENCY = 10_000_000  # more than any server takes (servelab bench's bound is 1 M)


class BadField(ValueError):
    """A field of a result that cannot be what it names; the message names the field."""


def _count(data: dict, key: str) -> int:
    """A positive whole number of requests (a float such as 16.0 counts)."""
    value = data[key]
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value != int(value) or not 1 <= value <= MAX_CONCURRENCY:
        raise BadField(f"{key}: {value!r} is not a whole number in 1..{MAX_CONCURRENCY}")
    return int(value)


def _name(data: dict, key: str, default: str | None = None) -> str | None:
    """A text field (a number is taken as its text); a list, a dict or a boolean is refused."""
    value = data.get(key)
    if value is None or value == "":
        return default
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise BadField(f"{key}: {json.dumps(value)[:80]} is not text")
    return str(value)


def _part(data: dict, key: str) -> str:
    """A field as a part of a config name, as written (None when absent); a list or dict is refused."""
    value = data.get(key)
    if isinstance(value, list | dict):
        raise BadField(f"{key}: {json.dumps(value)[:80]} is not a single value")
    return str(value)


def _rate(data: dict) -> str:
    value = data.get("request_rate", "inf")
    if value in ("inf", None) or (isinstance(value, float) and value == math.inf):
        return "inf"
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    if not ok:
        raise BadField(f"request_rate: {json.dumps(value)[:80]} is not a positive number or inf")
    return str(value)


def vllm_unit(name: str) -> str:
    if name.endswith("_ms"):
        return "ms"
    # InferenceX's experimental result files keep vLLM's shape but hold latencies in seconds, without `_ms`
    if name == "duration" or name.split("_")[-1] in ("ttft", "tpot", "itl", "e2el"):
        return "s"
    if name.startswith("request_"):
        return "req/s"
    if name.endswith(("_throughput", "_tokens_per_s")):
        return "tok/s"
    if name.endswith("_tokens"):
        return "tokens"
    if name in ("completed", "failed", "good_completed"):
        return "requests"
    return ""


def inferencex_unit(name: str) -> str:
    """process_result.py writes throughputs per GPU, interactivity and power (utils/aggregate_power.py);
    every other number it writes is a vLLM `_ms` field divided by 1000."""
    if name.endswith("intvty"):
        return "tok/s/user"
    if name.endswith("tput_per_gpu"):
        return "tok/s/gpu"
    if name.startswith("joules_per_"):
        return "J/query" if name.endswith("_query") else "J/token"
    if name.endswith(("_j", "_w")):
        return name[-1].upper()
    return "s"


def _vllm_date(data: dict, here: bool) -> tuple[str | None, str | None]:
    """vLLM's `date` is local time (%Y%m%d-%H%M%S) taken when the run ended; the start is date - duration.

    Measured here, the local time zone is known and the times become UTC like the store's own; an imported
    file's times stay as it wrote them, since the measuring machine's zone is unknown.
    """
    try:
        end = datetime.strptime(str(data["date"]), "%Y%m%d-%H%M%S")
        start = end - timedelta(seconds=float(data.get("duration", 0)))
    except (KeyError, ValueError, TypeError, OverflowError):
        return None, None
    if here:
        start, end = start.astimezone(UTC), end.astimezone(UTC)
    return start.isoformat(timespec="seconds"), end.isoformat(timespec="seconds")


def vllm_entry(data: dict, here: bool = False) -> Entry:
    metrics = _numbers(data, VLLM_SETTINGS)
    label = _name(data, "label") or _name(data, "backend") or "bench"
    if data.get("max_concurrency") is not None:
        config = f"{label}-conc-{_count(data, 'max_concurrency')}"
    else:
        config = f"{label}-rate-{_rate(data)}"
    started, ended = _vllm_date(data, here)
    return Entry(
        name=_name(data, "model_id", "imported") or "imported",
        config=config,
        metrics=metrics,
        units={k: vllm_unit(k) for k in metrics},
        outcome="pass" if data.get("completed") else "error",
        started_at=started,
        ended_at=ended,
        provenance=Provenance(servelab_version=_name(data, "servelab_version")),
        source="predicted" if data.get("source") == "simulated" else "imported",
    )


def _true(data: dict, key: str) -> bool:
    return str(data.get(key, "")).lower() == "true"


def _split(data: dict, side: str) -> str:
    """Pipeline, decode-context and prefill-context parallel sizes, where not 1 (absent in older results)."""
    parts = (("pp", "pp"), ("dcp", "dcp_size"), ("pcp", "pcp_size"))
    return "".join(
        f"-{short}{_part(data, side + key)}" for short, key in parts if data.get(side + key, 1) != 1
    )


def _side(data: dict, side: str) -> str:
    """One side of a disaggregated deployment: workers x (TP, EP, the other splits), DP attention, hardware
    (empty where the result predates these fields)."""
    if data.get(side + "tp") is None:
        return "-dpa" if _true(data, side + "dp_attention") else ""
    out = f"-{_part(data, side + 'num_workers')}x-tp{_part(data, side + 'tp')}-ep{_part(data, side + 'ep')}"
    out += _split(data, side) + ("-dpa" if _true(data, side + "dp_attention") else "")
    hw = _name(data, side + "hw")
    return out + (f"-{hw}" if hw else "")


def inferencex_entry(data: dict) -> Entry:
    metrics = _numbers(data, INFERENCEX_SETTINGS)
    parts = ("infmax_model_prefix", "hw", "framework", "precision")
    name = "-".join(p for k in parts if (p := _name(data, k)))
    if data.get("is_multinode"):
        # layouts of equal GPU counts differ in workers, parallelism and hardware per side (process_result.py
        # writes each), so each side's layout names the config, not only its GPU count
        shape = f"p{_part(data, 'num_prefill_gpu')}{_side(data, 'prefill_')}"
        shape += f"-d{_part(data, 'num_decode_gpu')}{_side(data, 'decode_')}"
    else:
        shape = f"tp{_part(data, 'tp')}-ep{_part(data, 'ep')}{_split(data, '')}"
        if _true(data, "dp_attention"):
            shape += "-dpa"
    spec = _part(data, "spec_decoding") if data.get("spec_decoding") is not None else "none"
    spec = "" if spec in ("none", "") else f"-{spec}"
    return Entry(
        name=name or _name(data, "model", "imported") or "imported",
        config=f"{shape}-isl{_part(data, 'isl')}-osl{_part(data, 'osl')}{spec}-conc-{_count(data, 'conc')}",
        metrics=metrics,
        units={k: inferencex_unit(k) for k in metrics},
        outcome="pass",
        provenance=Provenance(
            servelab_version=None,
            recipe_fingerprint=_name(data, "recipe_fingerprint"),
            image_digest=_name(data, "image"),
            gpu=_name(data, "hw"),
        ),
    )


def record_bench(
    store: Store, run_id: str, result: dict, *, repetition: int = 0, artifact: str | None = None
) -> str:
    """Record a `servelab bench` (or `vllm bench serve`) result dict measured in this run as its bench stage
    (config `<label>-conc-<max_concurrency>`) with one metric per numeric field; returns the config name."""
    e = vllm_entry(result, here=True)
    with store.transaction():
        store.record_stage(
            run_id,
            "bench",
            StageStatus(e.outcome),
            config=e.config,
            repetition=repetition,
            started_at=e.started_at,
            ended_at=e.ended_at,
            artifact=artifact,
        )
        store.record_metrics(
            run_id, "bench", e.metrics, config=e.config, repetition=repetition, units=e.units
        )
    return e.config


def _entry(data, path: Path) -> Entry:
    if isinstance(data, dict) and {"hw", "framework", "conc"} <= data.keys():
        reader = inferencex_entry
    elif isinstance(data, dict) and {"completed", "duration"} <= data.keys():
        reader = vllm_entry
    else:
        raise ServelabError(f"{path}: not a known result file; expected {EXPECTED}")
    try:
        return reader(data)
    except (TypeError, ValueError, OverflowError) as e:
        raise ServelabError(f"{path}: malformed result ({e}); expected {EXPECTED}") from e


def read_file(path: Path) -> tuple[bytes, list[Entry]]:
    """The file's bytes and its entries; a ServelabError naming the file when it is not a known result."""
    raw = read_bytes(path)  # a FIFO or a device is refused: it would never end
    data = parse_json(raw, str(path), EXPECTED)
    items = data if isinstance(data, list) else [data]
    if not items:
        raise ServelabError(f"{path}: an empty list; expected {EXPECTED}")
    return raw, [_entry(item, path) for item in items]


def _write_run(store: Store, path: Path, key: str, name: str, entries: list[Entry]) -> str:
    first = entries[0]
    with store.transaction():
        run_id = store.start_run(
            name,
            first.provenance,
            started_at=first.started_at,
            outcome="pass" if all(e.outcome == "pass" for e in entries) else "error",
            ended_at=max((e.ended_at or "" for e in entries), default="") or None,
            source_path=str(path.resolve()),
            source_sha256=key,
        )
        run_dir = store.run_dir(run_id)
        shutil.copyfile(path, run_dir / path.name)
        artifact = str((run_dir / path.name).relative_to(store.root))
        repetitions: Counter[str] = Counter()
        for e in entries:
            rep = repetitions[e.config]
            repetitions[e.config] += 1
            store.record_stage(
                run_id,
                "bench",
                StageStatus(e.outcome),
                config=e.config,
                repetition=rep,
                started_at=e.started_at,
                ended_at=e.ended_at,
                artifact=artifact,
            )
            store.record_metrics(
                run_id, "bench", e.metrics, config=e.config, repetition=rep, units=e.units, source=e.source
            )
    return run_id


def import_files(store: Store, paths: list[Path], name: str | None = None) -> list[Imported]:
    """Import every file (all are read and checked first, so a bad one imports none); one run per name."""
    read = [(path, *read_file(path)) for path in paths]
    out = []
    for path, raw, entries in read:
        digest = hashlib.sha256(raw).hexdigest()
        groups: dict[str, list[Entry]] = {}
        for e in entries:
            groups.setdefault(name or e.name, []).append(e)
        for i, (run_name, group) in enumerate(groups.items()):
            key = digest if len(groups) == 1 else f"{digest}#{i}"
            with (
                store.transaction()
            ):  # the check and the write under one lock: concurrent imports add it once
                known = store.find_import(key)
                if known:
                    out.append(Imported(str(path), known.id, known.name, False, 0))
                    continue
                run_id = _write_run(store, path, key, run_name, group)
            out.append(Imported(str(path), run_id, run_name, True, sum(len(e.metrics) for e in group)))
    return out
