"""The streamed merge and result (merge.RecordSet, tally.Tally) against the in-memory ones they replace, on a
fixed set of records: three workers' files in completion order, a torn last line, a record a worker kept in
memory (a full disk) that its file also holds in part, failures and never-sent requests.

The in-memory merge is written out below as it was (a dict by (worker, index), sorted by send time then
index); the in-memory result is `summarize` and `distribution_ms` over every derived request."""

import json
import random
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import pytest

from servelab.bench.config import BenchConfig
from servelab.bench.datasets import Dataset
from servelab.bench.evaluate import compute_result
from servelab.bench.measured import derive
from servelab.bench.merge import RecordSet
from servelab.bench.records import CHUNKS_KEY, decoded, encode_chunks, read_jsonl, record_line
from servelab.bench.tally import reason_key, resolve_output_len
from servelab.metrics import distribution_ms, summarize

NUM = 900
SUMMARIES = [
    {
        "loop": "uvloop",
        "cpu_s": 1.0,
        "wall_s": 4.0,
        "content_events": 100,
        "loop_lag_s": [0.001],
        "connections_opened": 4,
        "abort_reason": None,
    }
]


def record(i: int, rng: random.Random) -> dict:
    w = i % 3
    sched = i * 0.004
    if i >= NUM - 40:
        return {"i": i, "w": w, "ok": False, "err": "not sent: interrupted (Ctrl-C or SIGTERM)",
                "sched": sched, "sent": None, "end": None, "chunks": [], "in": 20, "in_src": "dataset",
                "out": None, "conn": False}  # fmt: skip
    sent = sched + rng.random() * 0.002
    tokens = rng.choice([1, 4, 16])
    chunks, t = [], rng.randint(2_000, 30_000)
    for _ in range(tokens):
        chunks.append(t)
        t += 0 if i % 13 == 0 else rng.randint(500, 3_000)
    rec = {"i": i, "w": w, "ok": True, "err": None, "sched": sched, "slot": sched + 0.0001, "sent": sent,
           "end": sent + chunks[-1] / 1e6 + 0.0002, "chunks": chunks, "in": 20 + i % 7,
           "in_src": "usage", "out": tokens, "conn": i < 8}  # fmt: skip
    if i % 17 == 0:
        rec.update(ok=False, err=f"timeout: no complete response after 5 s ({tokens} content events)")
    elif i % 29 == 0:
        rec.update(out=None, text=" tok" * tokens, in_src="dataset")  # no usage: counted otherwise
    return rec


def file_form(rec: dict, encoded: bool) -> dict:
    """A record as a worker writes it: its chunk times encoded (records.py), or as the list itself (files
    written before that, which are read the same)."""
    if not encoded:
        return rec
    return {
        (CHUNKS_KEY if k == "chunks" else k): (encode_chunks(v) if k == "chunks" else v)
        for k, v in rec.items()
    }


@pytest.fixture(params=["encoded", "list"])
def run(tmp_path: Path, request) -> tuple[list[Path], list[dict]]:
    encoded = request.param == "encoded"
    rng = random.Random(3)
    records = [record(i, rng) for i in range(NUM)]
    paths = [tmp_path / f"worker-{w}.jsonl" for w in range(3)]
    for w, path in enumerate(paths):  # each file in the order its requests ended
        mine = sorted((r for r in records if r["w"] == w), key=lambda r: r["end"] or 1e9)
        path.write_text("".join(record_line(file_form(r, encoded)) for r in mine))
    with open(paths[1], "a") as f:
        f.write('{"i": 901, "w": 1, "ok": tr')  # a worker killed mid-write
    kept = dict(records[302], end=records[302]["end"] + 1.0)  # the whole copy a full disk left in memory
    with open(paths[2], "a") as f:
        f.write(record_line(file_form(dict(records[302], end=0.0), encoded)))  # its part copy
    return paths, [file_form(kept, encoded)]


def in_memory_merge(paths: list[Path], kept: list[dict]) -> list[dict]:
    by_key = {(r.get("w"), r["i"]): r for p in paths if p.exists() for r in read_jsonl(p)}
    by_key.update({(r.get("w"), r["i"]): decoded(dict(r)) for r in kept})
    records = list(by_key.values())
    records.sort(key=lambda r: (r.get("sent") if r.get("sent") is not None else float("inf"), r["i"]))
    return records


def test_the_merged_records_are_the_in_memory_merge(run, tmp_path):
    paths, kept = run
    merged = RecordSet(paths, kept)
    expected = in_memory_merge(paths, kept)
    assert len(merged) == len(expected) == NUM
    assert list(merged) == expected
    assert list(merged) == expected  # read again, the same
    assert [r for r in merged if r["i"] == 302] == [decoded(dict(kept[0]))]  # the memory's whole copy
    merged.write(tmp_path / "merged.jsonl")
    assert list(read_jsonl(tmp_path / "merged.jsonl")) == expected
    encoded = CHUNKS_KEY in kept[0]
    lines = (tmp_path / "merged.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [file_form(r, encoded) for r in expected]  # in their form


@pytest.mark.parametrize("cool_down", [0.0, 0.5])
def test_the_streamed_result_is_the_in_memory_result(run, cool_down):
    paths, kept = run
    metrics, pcts, slos = ["ttft", "tpot", "itl", "e2el"], [50.0, 90.0, 99.0], {"ttft": 20.0}
    cfg = BenchConfig(
        model="m",
        num_prompts=NUM,
        max_concurrency=8,
        percentile_metrics=metrics,
        metric_percentiles=pcts,
        goodput=slos,
        cool_down_s=cool_down,
    )
    ours = compute_result(
        cfg, RecordSet(paths, kept), SUMMARIES, [{}], Dataset([], "d"), None, "m", "D", True
    )

    records = in_memory_merge(paths, kept)
    sent = [r for r in records if r["sent"] is not None]
    duration = max(r["end"] for r in sent)
    if cool_down:
        duration = duration - cool_down
        sent = [r for r in sent if not r["ok"] or r["end"] <= duration]
        assert ours.cool_down == {
            "seconds": cool_down,
            "excluded_requests": len(records) - 40 - len(sent),
            "measured_until_s": duration,
        }
    lens = [resolve_output_len(r, None)[0] if r["ok"] else 0 for r in sent]
    reqs = [derive(r, n) for r, n in zip(sent, lens, strict=True)]
    theirs = summarize(reqs, duration, metrics, pcts, slos)
    ok = [r for r in reqs if r.ok]

    def exact(fields: dict) -> dict:
        return {k: v for k, v in fields.items() if not k.startswith(("mean_", "std_"))}

    assert exact(ours.summary.fields()) == exact(theirs.fields())
    for k, v in theirs.fields().items():
        assert ours.summary.fields()[k] == pytest.approx(v, rel=1e-12), k
    lag = distribution_ms([r.client_lag_s for r in ok], [*pcts])
    assert ours.client_latency_ms["client_send_lag"].percentiles == lag.percentiles
    assert ours.client_latency_ms["client_send_lag"].max == lag.max
    assert ours.not_sent == 40
    assert ours.failure_reasons == dict(
        Counter(reason_key(r["err"]) for r in records if not r["ok"]).most_common()
    )
    assert ours.token_count_source.startswith("mixed: usage x")
    multi = [r for r in ok if r.output_len > 1]
    assert ours.one_read_requests == sum(1 for r in multi if not any(r.itl_s)) > 0
    order = sorted(range(len(sent)), key=lambda k: sent[k]["i"])
    assert ours.details is not None
    details = asdict(ours.details)
    assert details["ttfts"] == [reqs[k].ttft_s for k in order]
    assert details["itls"] == [reqs[k].itl_s for k in order]
    assert details["output_lens"] == [lens[k] for k in order]
    assert details["errors"] == [sent[k]["err"] or "" for k in order]


def test_without_details_the_result_keeps_no_per_request_lists(run):
    paths, kept = run
    cfg = BenchConfig(model="m", num_prompts=NUM)
    result = compute_result(cfg, RecordSet(paths, kept), SUMMARIES, [{}], Dataset([], "d"), None, "m", "D")
    assert result.details is None
    assert "ttfts" not in result.dump() and result.dump()["completed"] > 0
