"""The per-request record's file form (records.py): chunk times written as base64 of little-endian int64, read
back as the list of integers they were, and files of the earlier form (the list itself under `chunks`) read
to the same records and the same result.

The earlier form is made here from a run's file by an independent decoder (struct), so the comparison does not
lean on the code under test."""

import base64
import json
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest
from clirun import servelab

from servelab.bench.config import BenchConfig
from servelab.bench.datasets import Dataset
from servelab.bench.evaluate import compute_result
from servelab.bench.merge import RecordSet
from servelab.bench.records import CHUNKS_KEY, RecordWriter, decode_chunks, encode_chunks, read_jsonl
from servelab.results.report import result_points


@pytest.mark.parametrize(
    "chunks", [[], [0], [12_345, 12_345, 99_000], [2**31 + 7, 2**40], list(range(0, 1_280_000, 10_000))]
)
def test_chunk_times_come_back_as_written(chunks):
    text = encode_chunks(chunks)
    assert text.isascii() and json.loads(json.dumps(text)) == text
    assert decode_chunks(text) == chunks
    assert list(struct.unpack(f"<{len(chunks)}q", base64.b64decode(text))) == chunks


@dataclass
class Item:
    key: int
    prompt_len: int


class Finished:
    """A finished request as the client leaves it (the fields RecordWriter reads)."""

    def __init__(self, key: int, error: str | None, chunks: list[int]) -> None:
        self.item = Item(key, 20)
        self.usage = {"prompt_tokens": 21, "completion_tokens": len(chunks)} if error is None else None
        self.error, self.chunks, self.sse, self.new_conn = error, chunks, True, key == 0
        self.sched, self.slot, self.sent, self.end = 10.0 + key, 10.5 + key, 10.75 + key, 12.0 + key


def test_the_writer_writes_json_lines_that_read_back_as_the_records(tmp_path):
    path = tmp_path / "w.jsonl"
    with open(path, "w") as out:
        writer = RecordWriter(out, worker=3, keep_text=False)
        writer.t0 = 10.0
        rec, chunks = writer.request(Finished(0, None, [5_000, 15_000, 25_000]))
        writer.request(Finished(1, 'HTTP 500: {"message": "ü \\"quoted\\"\\n"}', []))
        writer.not_sent(2, 20, 13.0, "interrupted")
    assert chunks == [5_000, 15_000, 25_000] and rec[CHUNKS_KEY] == encode_chunks(chunks)
    lines = path.read_text().splitlines()
    assert all(CHUNKS_KEY in json.loads(line) and "chunks" not in json.loads(line) for line in lines)
    first, failed, unsent = read_jsonl(path)
    assert first == {"i": 0, "w": 3, "ok": True, "err": None, "sched": 0.0, "slot": 0.5, "sent": 0.75,
                     "end": 2.0, "chunks": [5_000, 15_000, 25_000], "in": 21, "in_src": "usage", "out": 3,
                     "conn": True}  # fmt: skip
    assert failed["err"] == 'HTTP 500: {"message": "ü \\"quoted\\"\\n"}' and failed["chunks"] == []
    assert unsent["sent"] is None and unsent["chunks"] == [] and unsent["err"] == "not sent: interrupted"


def test_a_line_whose_chunk_times_do_not_decode_is_skipped_as_a_torn_line_is(tmp_path):
    path = tmp_path / "bad.jsonl"
    good = {"i": 0, "ok": True, CHUNKS_KEY: encode_chunks([7, 8])}
    lines = [good, {"i": 1, "ok": True, CHUNKS_KEY: "!!not base64"}, {"i": 2, "ok": True, CHUNKS_KEY: "AAAA"}]
    path.write_text("".join(json.dumps(rec) + "\n" for rec in lines) + '{"i": 3, "ok": tr')
    assert list(read_jsonl(path)) == [{"i": 0, "ok": True, "chunks": [7, 8]}]


def earlier_form(line: str) -> str:
    """A record line as servelab wrote it before: the chunk times as a JSON list under `chunks`."""
    rec = json.loads(line)
    raw = base64.b64decode(rec.pop(CHUNKS_KEY))
    rec["chunks"] = list(struct.unpack(f"<{len(raw) // 8}q", raw))
    return json.dumps(rec, separators=(",", ":"))


def test_a_run_reads_the_same_from_either_form_of_its_records(mock_server, tmp_path):
    s = mock_server("--token-delay-ms", "2")
    name = tmp_path / "r.json"
    cmd = ["bench", "--base-url", s.url, "--model", "mock",
           "--random-input-len", "16", "--random-output-len", "12", "--num-prompts", "24",
           "--max-concurrency", "6", "--save-result", "--save-detailed", "--result-dir", str(tmp_path),
           "--result-filename", name.name, "--percentile-metrics", "ttft,tpot,itl,e2el", "--num-workers",
           "2"]  # fmt: skip
    p = servelab(*cmd)  # in-process (tests/clirun.py); its load workers are processes
    assert p.returncode == 0, p.stderr
    saved = json.loads(name.read_text())
    new = Path(saved["records_file"])
    old_dir = tmp_path / "old"
    old_dir.mkdir()
    old = old_dir / "r.requests.jsonl"
    old.write_text("".join(earlier_form(line) + "\n" for line in new.read_text().splitlines()))
    (old_dir / "r.json").write_text(name.read_text())

    assert list(read_jsonl(new)) == list(read_jsonl(old))
    assert [len(r["chunks"]) for r in read_jsonl(new)] == [12] * 24  # one event per token

    cfg = BenchConfig(model="mock", num_prompts=24, max_concurrency=6, percentile_metrics=["ttft", "itl"])
    results = [
        compute_result(cfg, RecordSet([f]), [], [{}], Dataset([], "d"), None, "mock", "D", True).dump()
        for f in (new, old)
    ]
    assert results[0] == results[1]
    assert results[0]["ttfts"] == saved["ttfts"] and results[0]["itls"] == saved["itls"]  # the run's own
    points = [result_points(d / "r.json")[0] for d in (tmp_path, old_dir)]
    assert points[0].samples_ms == points[1].samples_ms and len(points[0].samples_ms["itl"]) == 24 * 11
