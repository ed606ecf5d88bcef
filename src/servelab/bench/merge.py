"""The workers' records as one run, in request order, read back from their files as they are iterated.

A worker writes its records as its requests end (records.py), so each file is in order of completion. The
merge never holds the records: it keeps an index, for each record where it lies (file, offset, length) and
its sort key, about 40 bytes a request, and reads the records back in order each time it is iterated (the
result reads them once, or twice with --cool-down; writing the merged file copies their lines).

The rules are the in-memory merge's of before: records in order of their send time, the never-sent last,
then of their index; a torn line (a worker killed mid-write) is skipped; a record held both by a file and by a
worker's memory (a full disk: written in part before the disk filled) is one, the memory's copy.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from servelab.bench.records import decoded, record_line


class RecordSet:
    """The merged records of one run: iterable (again and again) in merged order, and writable as one
    JSONL file. `kept`: records workers could not write to their files, handed over in memory."""

    def __init__(self, paths: Sequence[Path], kept: Sequence[dict] = ()) -> None:
        self.paths = [Path(p) for p in paths]
        self.kept = list(kept)
        src, offset, size = array("q"), array("q"), array("q")
        sent, index, worker = array("d"), array("q"), array("q")

        def add(s: int, at: int, n: int, rec: dict) -> None:
            src.append(s)
            offset.append(at)
            size.append(n)
            sent.append(rec["sent"] if rec.get("sent") is not None else float("inf"))
            index.append(rec["i"])
            worker.append(rec["w"] if rec.get("w") is not None else -1)

        for s, path in enumerate(self.paths):
            if path.exists():
                for at, n, rec in _scan(path):
                    add(s, at, n, rec)
        for k, rec in enumerate(self.kept):
            add(len(self.paths), k, 0, rec)
        order = _merged_order(
            np.frombuffer(sent), np.frombuffer(index, np.int64), np.frombuffer(worker, np.int64)
        )
        self.src = np.frombuffer(src, np.int64)[order]
        self.offset = np.frombuffer(offset, np.int64)[order]
        self.size = np.frombuffer(size, np.int64)[order]

    def __len__(self) -> int:
        return len(self.src)

    def __iter__(self) -> Iterator[dict]:
        """Each record in merged order, decoded (records.decoded: `chunks` a list)."""
        for line in self._lines():
            yield decoded(dict(line) if isinstance(line, dict) else json.loads(line))

    def write(self, out: Path) -> None:
        """Write the merged records to `out`, one JSON object a line (the lines the workers wrote, copied)."""
        with open(out, "wb") as f:
            for line in self._lines():
                if isinstance(line, dict):
                    f.write(record_line(line).encode())
                else:
                    f.write(line if line.endswith(b"\n") else line + b"\n")

    def _lines(self) -> Iterator[bytes | dict]:
        """Each record in merged order: its line as written, or the kept record itself."""
        files = [open(p, "rb") if p.exists() else None for p in self.paths]  # noqa: SIM115  # closed below
        try:
            for s, at, n in zip(self.src.tolist(), self.offset.tolist(), self.size.tolist(), strict=True):
                f = files[s] if s < len(files) else None
                if f is None:
                    yield self.kept[at]
                    continue
                f.seek(at)
                yield f.read(n)
        finally:
            for f in files:
                if f is not None:
                    f.close()


def merge_records(paths: Sequence[Path], kept: Sequence[dict] = ()) -> RecordSet:
    """All workers' records in merged order (RecordSet)."""
    return RecordSet(paths, kept)


def _scan(path: Path) -> Iterator[tuple[int, int, dict]]:
    """(offset, length, record) of each whole record of a file; torn or foreign lines are skipped."""
    with open(path, "rb") as f:
        at = 0
        for line in f:
            n = len(line)
            body = line.strip()
            if body:
                try:
                    rec = json.loads(body)
                except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                    rec = None
                if isinstance(rec, dict) and isinstance(rec.get("i"), int):
                    yield at, n, rec
            at += n


def _merged_order(sent: np.ndarray, index: np.ndarray, worker: np.ndarray) -> np.ndarray:
    """Positions of the records to keep, in merged order: of the records sharing (worker, index) the last
    one read, placed where the first one was (a dict updated in reading order), then sorted by (send time,
    index), stably."""
    n = len(sent)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    seq = np.arange(n)
    by_key = np.lexsort((seq, index, worker))  # grouped by (worker, index), in reading order within
    w, i = worker[by_key], index[by_key]
    starts = np.ones(n, dtype=bool)
    starts[1:] = (w[1:] != w[:-1]) | (i[1:] != i[:-1])
    ends = np.roll(starts, -1)
    first_seen = by_key[starts]
    last_read = by_key[ends]
    placed = np.argsort(first_seen, kind="stable")
    survivors = last_read[placed]
    return survivors[np.lexsort((index[survivors], sent[survivors]))]
