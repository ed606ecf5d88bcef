"""The per-request record: raw timestamps only; metrics are derived from them in measured.py.

One JSON object per line, written by each worker as requests finish, so a crash keeps what was done.
Times are seconds from the run start (T0, perf_counter on the shared monotonic clock); chunk arrival
times are integer microseconds after `sent` (1 us resolution is plenty for ms metrics), written as the base64
of their little-endian int64 bytes (`chunks_b64`): a record is written as its request ends, when the next
request goes out, and a JSON list of 128 integers cost 3.5x the rest of the line to write (issue 33). Readers
take records through `read_jsonl` / `decoded`, which give `chunks` as a list of integers, from files of
either form (files written before had the list itself under `chunks`).

Keys:
  i        request index in the dataset order (multiturn: conversation index * 1000 + turn)
  w        worker index
  ok       success
  err      failure reason (None when ok)
  sched    scheduled send time: arrival time (open loop) or the moment the slot became free (closed loop)
  slot     when a concurrency slot was available (>= sched; queueing = slot - sched)
  sent     right before the request was written (vLLM's start time; connects count after it)
  chunks   arrival of each content event, us after sent (first = TTFT); events read together share a time.
           In the file: `chunks_b64` (see above); `chunks` once read.
           A content event is one with a choice (vLLM's rule: the chat API's first, the role, counts); with
           --ttft-at first-content, one whose choice carries text (content, reasoning or a tool call):
  lead     (--ttft-at first-content only) the events with a choice but no text before the first with
           text (the chat API's role event), left out of chunks
  in       prompt tokens (usage when the server sent it, else the dataset's count); in_src says which
  out      completion tokens from usage, or None (the parent tokenizes `text` then)
  out_src  'usage' | None
  text     generated text, kept only when needed (no usage, --save-detailed, multiturn)
  end      when the request finished or failed (last byte / error), seconds from T0
  conn     True when a new connection was opened for this request
"""

from __future__ import annotations

import binascii
import json
import sys
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from servelab.bench.client import RequestState

NOT_SENT = "not sent: "  # the error prefix of a request the run never sent
CHUNKS_KEY = "chunks_b64"  # the chunk times in the file: base64 of little-endian int64
_BIG_ENDIAN = sys.byteorder == "big"
# one encoder for every line (json.dumps with separators builds one each call)
_ENCODE = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode


def encode_chunks(chunks_us: list[int]) -> str:
    """Chunk times (integer us) as the base64 of their little-endian int64 bytes."""
    values = array("q", chunks_us)
    if _BIG_ENDIAN:
        values.byteswap()
    return binascii.b2a_base64(values.tobytes(), newline=False).decode("ascii")


def decode_chunks(text: str) -> list[int]:
    """The chunk times of `encode_chunks`' text."""
    values = array("q", binascii.a2b_base64(text))
    if _BIG_ENDIAN:
        values.byteswap()
    return values.tolist()


def decoded(rec: dict) -> dict:
    """A record as read from a file, with `chunks` as a list of integers (files of either form)."""
    text = rec.pop(CHUNKS_KEY, None)
    if text is not None:
        rec["chunks"] = decode_chunks(text)
    return rec


def record_line(rec: dict, chunks_b64: str | None = None) -> str:
    """A record's JSON line (newline included). `chunks_b64`, when given, goes in as the last key, spliced:
    base64 has nothing to escape, and the JSON encoder's scan of its string cost more than the rest of the
    line."""
    if chunks_b64 is None:
        return _ENCODE(rec) + "\n"
    return f'{_ENCODE(rec)[:-1]},"{CHUNKS_KEY}":"{chunks_b64}"}}\n'


def read_jsonl(path: Path) -> Iterator[dict]:
    """Records of one file, decoded; a line that does not read as a record (a torn last line of a worker
    killed mid-write, chunk times that are not base64 of int64) is skipped, not fatal."""
    with open(path, "rb") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:  # json's and base64's errors, and a byte count that is no whole int64, are ValueErrors
                rec = json.loads(line)
                rec = decoded(rec) if isinstance(rec, dict) else rec
            except ValueError:
                continue
            yield rec


def merge_records(paths: list[Path], kept: Iterable[dict] = ()) -> list[dict]:
    """All workers' records in request order: those of their files and those a worker kept in memory when
    its file could not be written (a record both hold, written in part before the disk filled, is one)."""
    by_key = {(r.get("w"), r["i"]): r for p in paths if p.exists() for r in read_jsonl(p)}
    by_key.update({(r.get("w"), r["i"]): r for r in kept})
    records = list(by_key.values())
    records.sort(key=lambda r: (r.get("sent") if r.get("sent") is not None else float("inf"), r["i"]))
    return records


def write_jsonl(records: list[dict], out: Path) -> None:
    with open(out, "w") as f:
        for r in records:
            f.write(json.dumps(r, separators=(",", ":")))
            f.write("\n")


class RecordWriter:
    """Writes one worker's records to its open JSONL file (buffered; flushed by the worker's tick and at the
    end). Times are given on the worker's perf_counter clock and written relative to T0."""

    def __init__(self, out: IO[str], worker: int, keep_text: bool, first_content: bool = False) -> None:
        self.out = out
        self.worker = worker
        self.keep_text = keep_text
        self.first_content = first_content  # --ttft-at first-content: chunks start at the first text
        self.t0 = 0.0
        self.unflushed: list[dict] = []  # written since the last flush that reached the file
        # once the file cannot be written (a full disk): every record since the last good flush, kept here
        # and sent to the parent with the worker's summary, so the run neither stalls nor loses them
        self.kept: list[dict] | None = None
        self.error: str | None = None

    def request(self, st: RequestState) -> tuple[dict, list[int]]:
        """The record of a finished (or failed) request (as written: chunk times encoded) and its chunk
        times."""
        item = st.item
        usage = st.usage or {}
        ok = st.error is None
        error = st.error
        chunks, lead = st.chunks, None
        if self.first_content and ok and st.sse:
            lead = st.leading_events_without_text()
            chunks = chunks[lead:]
            if not chunks:
                ok, error = False, "no event with text (--ttft-at first-content cannot take TTFT)"
        out_tokens = usage.get("completion_tokens") if ok else None
        rec = {
            "i": item.key,
            "w": self.worker,
            "ok": ok,
            "err": error,
            "sched": st.sched - self.t0,
            "slot": st.slot - self.t0,
            "sent": st.sent - self.t0,
            "end": st.end - self.t0,
            "in": usage.get("prompt_tokens") or item.prompt_len,
            "in_src": "usage" if usage.get("prompt_tokens") else "dataset",
            "out": out_tokens,
            "conn": st.new_conn,
        }
        if lead is not None:
            rec["lead"] = lead
        if ok and (out_tokens is None or self.keep_text):
            rec["text"] = st.generated_text()
        chunks_b64 = encode_chunks(chunks)
        line = record_line(rec, chunks_b64)
        rec[CHUNKS_KEY] = chunks_b64  # last, as in the line
        self._write(rec, line)
        return rec, chunks

    def not_sent(self, key: int, prompt_len: int, sched: float, reason: str) -> None:
        """The record of a request the run never sent (aborted or stopped)."""
        rec = {
            "i": key,
            "w": self.worker,
            "ok": False,
            "err": NOT_SENT + reason,
            "sched": sched - self.t0,
            "sent": None,
            "end": None,
            CHUNKS_KEY: "",
            "in": prompt_len,
            "in_src": "dataset",
            "out": None,
            "conn": False,
        }
        self._write(rec, record_line(rec))

    def _write(self, rec: dict, line: str) -> None:
        if self.kept is not None:
            self.kept.append(rec)
            return
        self.unflushed.append(rec)
        try:
            self.out.write(line)
        except OSError as e:
            self._failed(e)

    def flush(self) -> None:
        if self.kept is not None:
            return
        try:
            self.out.flush()
        except OSError as e:
            self._failed(e)
            return
        self.unflushed.clear()

    def _failed(self, e: OSError) -> None:
        self.error = f"{getattr(self.out, 'name', 'records file')}: {e.strerror or e}"
        self.kept, self.unflushed = self.unflushed, []

    def leftover(self) -> dict:
        """What the worker's summary carries when its file could not be written: the records kept in memory
        and why."""
        if self.kept is None:
            return {}
        return {"records_kept": self.kept, "records_error": self.error}
