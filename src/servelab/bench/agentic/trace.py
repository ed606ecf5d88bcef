"""Agentic traces in InferenceX's format (the "weka" trace of utils/agentic/datasets/proxy_to_weka.py, which
its AIPerf replays), read into a compact replay plan.

A trace is one recorded coding session: `{"id", "block_size", "hash_id_scope", "requests": [...]}`. Each
request of the main agent is `{"t", "type": "n"|"s", "in", "out", "hash_ids", "api_time", ...}`: its start
time in seconds from the session's start, its prompt and output tokens, the hash ids of the prompt's
`block_size`-token blocks (the whole prompt: a later turn repeats the ids of the history it carries, so the
shared prefix shows as shared leading ids) and how long the recorded call took. A `{"type": "subagent",
"requests": [...]}` entry is a subagent's own stream of requests, started by the main agent.

The plan keeps, per request, only what differs from the previous request of its stream: how many leading
blocks it keeps (`keep`) and the ids after them (`new_ids`), so a corpus whose prompts grow to a million
tokens fits in memory. Timing follows the recording end to start: a request waits, after the one before it
in its stream ended, as long as the recording waited (its `t` minus the previous request's `t + api_time`),
capped at `max_gap_s` (InferenceX caps idle gaps at 300 s). A subagent stream starts that long after the
main-agent request it follows; the main agent's next request waits for the subagent streams that had ended
before it started in the recording (the others ran in the background). Without `t`, a request waits its
`think_time` (or nothing) and subagents are joined by the next main-agent request.
"""

from __future__ import annotations

import hashlib
import json
import math
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from servelab.errors import ServelabError
from servelab.userfiles import check_regular

FIELD = "dataset_path"
DEFAULT_BLOCK_SIZE = 64  # InferenceX's traces: Anthropic's 64-token prompt-cache blocks
MAX_BLOCK_SIZE = 1 << 16
MAX_TOKENS = 1 << 24  # past every model's context: a larger count is a broken trace
JOIN_EPS_S = 1e-6  # recorded times are millisecond-rounded: an end equal to a start counts as before it


class _Request(BaseModel):
    """One request as a trace writes it (main agent or a subagent's inner request)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    t: float | None = Field(None, ge=0, allow_inf_nan=False)
    type: str = "n"
    input_tokens: int = Field(0, alias="in", ge=0, le=MAX_TOKENS)
    output_tokens: int = Field(0, alias="out", ge=0, le=MAX_TOKENS)
    hash_ids: list[int] = Field(default_factory=list)
    api_time: float = Field(0.0, ge=0, allow_inf_nan=False)
    think_time: float | None = Field(None, ge=0, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: object) -> object:
        # AIPerf's trace models name the lengths input_length / output_length; InferenceX's files `in` / `out`
        if isinstance(data, dict):
            data = dict(data)
            for short, long in (("in", "input_length"), ("out", "output_length")):
                if short not in data and long in data:
                    data[short] = data[long]
        return data


class _Entry(_Request):
    requests: list[_Request] | None = None  # a subagent's requests

    @model_validator(mode="after")
    def _subagent(self) -> _Entry:
        if self.type == "subagent" and not self.requests:
            raise ValueError("a subagent entry needs its requests")
        return self


class _Trace(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str | int = ""
    block_size: int = Field(DEFAULT_BLOCK_SIZE, ge=1, le=MAX_BLOCK_SIZE)
    hash_id_scope: str = "local"
    requests: list[_Entry] = Field(min_length=1)


@dataclass(slots=True)
class TraceRequest:
    """One request of the plan. `index` is its place in the trace's file order (the record key's low part)."""

    index: int
    stream: int  # 0: the main agent; 1...: a subagent
    turn: int  # its place in its stream
    input_tokens: int
    output_tokens: int
    blocks: int  # hash ids of its prompt
    keep: int  # leading blocks equal to the previous request of its stream
    new_ids: array  # the ids after those
    delay_s: float  # waited after what it follows (see the module docstring), capped
    cached_blocks: int  # leading blocks an earlier request of the session sent (an unbounded prefix cache)
    waits_for: tuple[int, ...] = ()  # subagent streams that end before it starts (main agent only)
    spawns: tuple[int, ...] = ()  # subagent streams that start after it ends


@dataclass(slots=True)
class Trace:
    trace_id: str
    block_size: int
    shared_ids: bool  # hash_id_scope "global": the same id is the same text in every trace
    requests: list[TraceRequest]
    streams: list[list[int]]  # request indices of each stream in order; 0: the main agent (may be empty)
    start_spawns: tuple[int, ...] = ()  # subagent streams that start with the session

    @property
    def num_requests(self) -> int:
        return len(self.requests)


@dataclass
class TraceFile:
    """A trace file read whole: its traces in order and what identifies it."""

    path: str
    sha256: str
    traces: list[Trace]

    @property
    def num_requests(self) -> int:
        return sum(t.num_requests for t in self.traces)


def read_trace_file(path: str, max_gap_s: float = math.inf) -> TraceFile:
    """Every trace of a JSONL file (one per line), of a JSON file (one trace, or a list) or of a folder of
    such files (in name order); one line naming the file, line and field otherwise."""
    p = Path(path)
    if not p.exists():
        raise ServelabError(f"trace {path}: no such file or directory", field=FIELD)
    files = sorted(f for f in p.iterdir() if f.suffix in (".json", ".jsonl")) if p.is_dir() else [p]
    if not files:
        raise ServelabError(f"trace {path}: a folder without .json or .jsonl files", field=FIELD)
    digest = hashlib.sha256()
    traces = []
    for f in files:
        check_regular(f, FIELD)
        for where, raw in _documents(f, digest):
            traces.append(_plan(_validated(raw, where), max_gap_s))
    if not traces:
        raise ServelabError(f"trace {path}: no trace in it", field=FIELD)
    return TraceFile(str(path), digest.hexdigest(), traces)


def _documents(f: Path, digest) -> Iterator[tuple[str, object]]:
    """(where, parsed JSON) of each trace in the file: a line of JSON Lines (read line by line: a corpus of
    gigabytes is never held whole), or the whole file's object or list."""
    try:
        with f.open("rb") as stream:
            first = _first_object(stream)
            stream.seek(0)
            if first is None:  # not JSON Lines: one JSON document
                data = stream.read()
                digest.update(data)
                yield from _whole(f, data)
                return
            for n, line in enumerate(stream, 1):
                digest.update(line)
                if not line.strip():
                    continue
                try:
                    yield f"{f}:{n}", json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError) as e:
                    raise ServelabError(f"trace {f}:{n}: not JSON ({e})", field=FIELD) from None
    except OSError as e:
        raise ServelabError(f"trace {f}: {e.strerror or e}", field=FIELD) from None


def _first_object(stream) -> dict | None:
    """The first non-empty line as a JSON object, or None when it is not one (a pretty-printed document)."""
    for line in stream:
        if line.strip():
            try:
                obj = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                return None
            return obj if isinstance(obj, dict) else None
    return None


def _whole(f: Path, data: bytes) -> Iterator[tuple[str, object]]:
    if not data.strip():
        return
    try:
        whole = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ServelabError(f"trace {f}: neither JSON Lines nor JSON ({e})", field=FIELD) from None
    if isinstance(whole, list):
        for k, item in enumerate(whole):
            yield f"{f}[{k}]", item
    else:
        yield str(f), whole


def _validated(raw: object, where: str) -> _Trace:
    if not isinstance(raw, dict):
        raise ServelabError(f"trace {where}: expected a trace object, got {type(raw).__name__}", field=FIELD)
    try:
        return _Trace.model_validate(raw)
    except ValidationError as e:
        raise ServelabError(str(ServelabError.from_validation(e, f"trace {where}")), field=FIELD) from None


@dataclass(slots=True)
class _Raw:
    """A request while the plan is built: its recorded times beside its plan entry."""

    req: _Request
    stream: int
    turn: int
    index: int


def _plan(tr: _Trace, max_gap_s: float) -> Trace:
    flat: list[_Raw] = []
    streams: list[list[int]] = [[]]
    start_spawns: list[int] = []
    spawns: dict[int, list[int]] = {}  # main-agent request index -> streams it starts
    spawned_after: dict[
        int, int | None
    ] = {}  # stream -> the main-agent request index it follows (None: start)
    for entry in tr.requests:
        if entry.type == "subagent":
            sid = len(streams)
            streams.append([])
            after = streams[0][-1] if streams[0] else None
            spawned_after[sid] = after
            (start_spawns if after is None else spawns.setdefault(after, [])).append(sid)
            for k, inner in enumerate(entry.requests or []):
                streams[sid].append(len(flat))
                flat.append(_Raw(inner, sid, k, len(flat)))
        else:
            streams[0].append(len(flat))
            flat.append(_Raw(entry, 0, len(streams[0]) - 1, len(flat)))
    timed = all(r.req.t is not None for r in flat)
    origin = min((r.req.t or 0.0 for r in flat), default=0.0) if timed else 0.0
    waits = _joins(flat, streams, spawned_after, timed)
    requests = []
    seen: set[int] = set()
    previous_ids: dict[int, list[int]] = {}
    for r in flat:
        ids = r.req.hash_ids
        prev = previous_ids.get(r.stream, [])
        keep = _common_prefix(prev, ids)
        cached = _common_prefix_in(ids, seen)
        seen.update(ids)
        previous_ids[r.stream] = ids
        delay = _delay(r, flat, streams, spawned_after, waits.get(r.index, []), timed, origin)
        requests.append(
            TraceRequest(
                index=r.index,
                stream=r.stream,
                turn=r.turn,
                input_tokens=r.req.input_tokens,
                output_tokens=r.req.output_tokens,
                blocks=len(ids),
                keep=keep,
                new_ids=array("q", ids[keep:]),
                delay_s=min(delay, max_gap_s),
                cached_blocks=cached,
                waits_for=tuple(waits.get(r.index, ())),
                spawns=tuple(spawns.get(r.index, ())),
            )
        )
    return Trace(
        trace_id=str(tr.id),
        block_size=tr.block_size,
        shared_ids=tr.hash_id_scope == "global",
        requests=requests,
        streams=streams,
        start_spawns=tuple(start_spawns),
    )


def _end(r: _Raw) -> float:
    return (r.req.t or 0.0) + r.req.api_time


def _joins(
    flat: list[_Raw], streams: list[list[int]], spawned_after: dict[int, int | None], timed: bool
) -> dict[int, list[int]]:
    """Main-agent request index -> the subagent streams it waits for: those started before it, not joined
    yet, that ended before it started in the recording (untimed traces: all of them)."""
    out: dict[int, list[int]] = {}
    open_streams: list[int] = []
    by_after: dict[int | None, list[int]] = {}
    for sid, after in spawned_after.items():
        by_after.setdefault(after, []).append(sid)
    open_streams.extend(by_after.get(None, []))
    for idx in streams[0]:
        r = flat[idx]
        start = r.req.t or 0.0
        joined = [
            s
            for s in open_streams
            if not timed or max(_end(flat[i]) for i in streams[s]) <= start + JOIN_EPS_S
        ]
        if joined:
            out[idx] = joined
            open_streams = [s for s in open_streams if s not in joined]
        open_streams.extend(by_after.get(idx, []))
    return out


def _delay(
    r: _Raw,
    flat: list[_Raw],
    streams: list[list[int]],
    spawned_after: dict[int, int | None],
    waits_for: list[int],
    timed: bool,
    origin: float,
) -> float:
    """How long the request waits after what it follows, as the recording waited (never negative)."""
    if not timed:
        first = r.turn == 0 and r.stream == 0
        return 0.0 if first else (r.req.think_time or 0.0)
    start = r.req.t or 0.0
    if r.turn > 0:
        before = _end(flat[streams[r.stream][r.turn - 1]])
    elif r.stream > 0:
        after = spawned_after[r.stream]
        before = origin if after is None else _end(flat[after])
    else:
        before = origin
    for s in waits_for if r.stream == 0 else ():
        before = max(before, max(_end(flat[i]) for i in streams[s]))
    return max(0.0, start - before)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k


def _common_prefix_in(ids: list[int], seen: set[int]) -> int:
    k = 0
    for h in ids:
        if h not in seen:
            break
        k += 1
    return k
