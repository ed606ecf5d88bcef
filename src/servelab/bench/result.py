"""The result of one benchmark point (BenchResult) and its file: vLLM's field names with vLLM's meanings, plus
servelab's self-describing extras (a schema version, package/python versions and the full config, so a saved
file describes itself)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from pathlib import Path

import servelab
from servelab.errors import ServelabError
from servelab.metrics import Distribution, ServingSummary
from servelab.metrics.summary import distribution_fields

RESULT_VERSION = 1


@dataclass
class ClientReport:
    """The `client` section: how busy the load generator was, to tell a client bottleneck from the server."""

    num_workers: int
    event_loop: str
    cpu_seconds: float
    cpu_util_per_worker_pct: list[float]
    cpu_us_per_content_event: float
    event_loop_lag_mean_ms: float
    event_loop_lag_p99_ms: float
    event_loop_lag_max_ms: float
    event_loop_lag_note: str
    connections_opened: int
    warmup_failed: int
    abort_reasons: list[str]
    # the machine the load generator ran on: a server on the same host (servelab run) shares its CPU, and an
    # API server's and an eager step's costs follow a host's CPU (docs/accuracy.md)
    host_cpu: str
    host_cores: int


@dataclass
class RequestDetails:
    """Per-request lists in request order, saved only with --save-detailed (vLLM's detail fields; seconds).
    A measured run keeps them only when they will be written (--save-detailed, --json): they grow with it."""

    input_lens: list[int]
    output_lens: list[int]
    ttfts: list[float]
    itls: list[list[float]]
    latencies: list[float]
    start_times: list[float]
    generated_texts: list[str]
    errors: list[str]


@dataclass
class BenchResult:
    """One benchmark point. `dump()` gives the result file's fields, in the file's order."""

    header: dict  # header_fields(): vLLM's leading fields and the --metadata keys
    summary: ServingSummary
    client_latency_ms: dict[str, Distribution]  # ttft_from_scheduled, client_send_lag, ... (measured.py)
    not_sent: int
    failure_reasons: dict[str, int]
    token_count_source: str
    prompt_len_source: str
    client: ClientReport
    client_bottleneck_warning: str | None
    one_read_requests: int
    one_read_warning: str | None
    provenance: dict  # provenance(): schema version, package / python / platform versions
    config: dict  # every flag (BenchConfig.public_dump: no secrets)
    details: RequestDetails | None  # None when not kept (see RequestDetails)
    interrupted: bool = False
    records_file: str | None = None  # set when the per-request records were saved
    # --cool-down: {"seconds", "excluded_requests", "measured_until_s"}; None (not written) without one
    cool_down: dict | None = None
    # a trace replay's sessions, turns and prefix cache (servelab.bench.agentic.report); None: not written
    agentic: dict | None = None
    # wall-clock time (Unix seconds) of the run's start; None (not written) for a run that never started or
    # was simulated
    start_unix: float | None = None
    spec_decode: dict = field(default_factory=dict)  # vLLM's spec_decode_* fields, when the server has them

    @property
    def failed(self) -> int:
        return self.summary.failed

    def dump(self) -> dict:
        out = dict(self.header)
        for name, value in self.summary.fields().items():
            out[name] = value
            if name == "duration" and self.start_unix is not None:
                # the measured window on the wall clock, named as InferenceX's client names it (its power
                # validation, utils/aggregate_power.py, integrates GPU power over it)
                out["benchmark_start_time_unix"] = self.start_unix
                out["benchmark_end_time_unix"] = self.start_unix + self.summary.duration
        out.update(self.spec_decode)  # where vLLM writes them: after its metrics
        for name, d in self.client_latency_ms.items():
            out.update(distribution_fields(name, d, with_max=True))
        out.update(
            not_sent=self.not_sent,
            failure_reasons=self.failure_reasons,
            token_count_source=self.token_count_source,
            prompt_len_source=self.prompt_len_source,
            client=asdict(self.client),
            client_bottleneck_warning=self.client_bottleneck_warning,
            one_read_requests=self.one_read_requests,
            one_read_warning=self.one_read_warning,
        )
        if self.cool_down is not None:
            out["cool_down"] = self.cool_down
        if self.agentic is not None:
            out["agentic"] = self.agentic
        out.update(self.provenance)
        out["config"] = self.config
        if self.details is not None:
            out.update(asdict(self.details))
        out["interrupted"] = self.interrupted
        if self.records_file is not None:
            out["records_file"] = self.records_file
        return out


def header_fields(cfg, model_id: str, date: str) -> dict:
    """vLLM's leading fields (same order), then --metadata keys as top-level fields like vLLM."""
    out = {
        "date": date,
        "endpoint_type": cfg.backend,
        "backend": cfg.backend,
        "label": cfg.label or cfg.backend,
        "model_id": model_id,
        "tokenizer_id": cfg.tokenizer or model_id,
        "num_prompts": cfg.num_prompts,
    }
    out.update(cfg.metadata)
    out["request_rate"] = "inf" if math.isinf(cfg.request_rate) else cfg.request_rate
    out["burstiness"] = "inf" if math.isinf(cfg.burstiness) else cfg.burstiness
    out["max_concurrency"] = cfg.max_concurrency
    if cfg.ramp_up_strategy is not None:
        out["ramp_up_strategy"] = cfg.ramp_up_strategy
        out["ramp_up_start_rps"] = cfg.ramp_up_start_rps
        out["ramp_up_end_rps"] = cfg.ramp_up_end_rps
    return out


def provenance() -> dict:
    versions = {"servelab": servelab.__version__}
    for name in ("numpy", "pydantic", "uvloop", "tokenizers", "transformers"):
        mod = sys.modules.get(name)
        if mod is not None:
            versions[name] = getattr(mod, "__version__", "?")
    return {
        "version": RESULT_VERSION,
        "servelab_version": servelab.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "packages": versions,
    }


def default_filename(cfg, model_id: str, date: str) -> str:
    """vLLM's compute_result_filename, made a name every file system takes: the label and the model's last
    path part with separators, NUL and control characters replaced, and each shortened (with a digest of
    what it was, so two long names stay apart) when the whole name would pass NAME_MAX."""
    base = str(model_id).split("/")[-1]
    conc = f"-concurrency{cfg.max_concurrency}" if cfg.max_concurrency is not None else ""
    label = cfg.label or cfg.backend
    if cfg.ramp_up_strategy is not None:
        ramp = f"{cfg.ramp_up_strategy}-{cfg.ramp_up_start_rps}qps-{cfg.ramp_up_end_rps}qps"
        middle = f"-ramp-up-{ramp}{conc}-"
    else:
        rate = "inf" if math.isinf(cfg.request_rate) else cfg.request_rate
        middle = f"-{rate}qps{conc}-"
    label, base = _name_part(label), _name_part(base)
    name = f"{label}{middle}{base}-{date}.json"
    if len(name.encode()) > NAME_MAX - NAME_RESERVE:
        label, base = _shortened(label), _shortened(base)
        name = f"{label}{middle}{base}-{date}.json"
    return name


NAME_MAX = 255  # bytes in one file name on Linux and macOS file systems
# what a suffix (-1 .. -999) and the records file beside the result add to a name
NAME_RESERVE = len("-999") + len(".requests.jsonl") - len(".json")
PART_MAX = 64  # bytes of a label or model name kept in a file name that would be too long


def _name_part(text: str) -> str:
    """A label or model name as one file-name part: path separators, NUL and other unprintable characters
    become `_` (the result file keeps the name as it was)."""
    return "".join(c if c.isprintable() and c not in "/\\" else "_" for c in text) or "_"


def _shortened(part: str) -> str:
    raw = part.encode()
    if len(raw) <= PART_MAX:
        return part
    digest = hashlib.sha256(raw).hexdigest()[:8]
    return raw[: PART_MAX - 9].decode(errors="ignore") + "-" + digest


def now_stamp() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S")


def check_path(result_dir: Path, filename: str | None, append: bool = False) -> None:
    """Make the result folder, and refuse before a run a result path that cannot take its result: servelab
    never overwrites one (with `append`, vLLM's --append-result, an existing file takes one more line)."""
    if result_dir.exists() and not result_dir.is_dir():
        raise ServelabError(f"--result-dir {result_dir} is not a directory")
    try:
        result_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ServelabError(f"--result-dir {result_dir}: {e.strerror}") from None
    if not os.access(result_dir, os.W_OK | os.X_OK):
        raise ServelabError(f"--result-dir {result_dir}: not writable")
    if filename is None:
        return
    path = result_dir / filename
    if path.is_dir():
        raise ServelabError(f"--result-filename {path} is a directory; give a file name")
    if path.exists() and not (append and path.is_file()):
        raise ServelabError(
            f"--result-filename {path} exists; servelab never overwrites a result (remove it or pick another)"
        )
    check_name(path, "--result-filename")


def check_name(path: Path, flag: str) -> None:
    """Refuse, before any request is sent, a result path the file system would refuse after the benchmark
    (a NUL, a name past NAME_MAX with the room a suffix and the records file need, a missing folder): the
    file is created and removed again."""
    if "\x00" in str(path):
        raise ServelabError(f"{flag} {str(path)!r}: a file name holds no NUL character")
    if len(path.name.encode()) > NAME_MAX - NAME_RESERVE:
        raise ServelabError(
            f"{flag} {path.name[:40]}...: {len(path.name.encode())} bytes; a result file name takes at most "
            f"{NAME_MAX - NAME_RESERVE} (room for a suffix and the .requests.jsonl file beside it)"
        )
    if path.exists():
        return  # claim picks a free name beside it
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return
    except OSError as e:
        raise ServelabError(f"{flag} {path}: cannot be written ({e.strerror})") from None
    path.unlink()


def claim(path: Path, taken: Callable[[Path], Path]) -> Path:
    """Create the result file exclusively (empty until `save` replaces it) and return it: `path`, or `path`
    with -1, -2, ... before the suffix when it (or its companion `taken(path)`) exists, e.g. when an identical
    run finished in the same second."""
    for k in range(1000):
        p = path if k == 0 else path.with_name(f"{path.stem}-{k}{path.suffix}")
        if taken(p).exists():
            continue
        try:
            os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except (FileExistsError, IsADirectoryError):
            continue
        return p
    raise ServelabError(f"no free result file name next to {path}")


def save(result: BenchResult, path: Path, detailed: bool) -> None:
    """Write the result file atomically (a temporary file in the same folder, then a rename); the per-request
    detail lists only when `detailed`."""
    detail_fields = {f.name for f in fields(RequestDetails)}
    data = {k: v for k, v in result.dump().items() if detailed or k not in detail_fields}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(data, indent=2, default=_jsonable))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def append(result: BenchResult, path: Path, detailed: bool) -> None:
    """vLLM's --append-result: the result as one JSON line added to `path` (made when missing), after a
    newline when the file is not empty; earlier results in it are kept as they are."""
    detail_fields = {f.name for f in fields(RequestDetails)}
    data = {k: v for k, v in result.dump().items() if detailed or k not in detail_fields}
    line = json.dumps(data, default=_jsonable)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(("\n" if f.tell() else "") + line)


def _jsonable(v):
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return str(v)
