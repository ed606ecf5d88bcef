"""Prices kept across processes (servelab.perfdb.price_cache): a plan answered from them is the plan computed
afresh, its JSON byte for byte; they are keyed by their inputs (a table's bytes), a corrupt file is ignored
and rewritten, two processes writing at once lose nothing, and the cache is bounded and can be turned off."""

import json
import marshal
import multiprocessing
import os
import shutil
import time

import pytest

import servelab.predict.step as step_mod
from servelab.perfdb import price_cache
from servelab.perfdb.db import PerfDB
from servelab.perfdb.keys import Comm, Gemm, Moe
from servelab.perfdb.latency import OpLatency
from servelab.perfdb.ops import OpName
from servelab.perfdb.tables import ENV_PATH, data_root
from servelab.predict.plan import PlanRequest, make_plan

QUESTION = PlanRequest(model="qwen3-32b", system="h100_sxm", gpus=4, mode="agg")


def plan_json() -> str:
    """The plan of QUESTION as the CLI prints it, less the time it took; asked of new PerfDBs."""
    PerfDB.clear_shared()
    data = make_plan(QUESTION).model_dump(mode="json")
    data.pop("wall_ms")
    return json.dumps(data)


@pytest.mark.slow  # 1.4 s of CPU a case: plans priced again, some in processes
def test_a_plan_from_kept_prices_is_the_plan_computed_afresh(prices, monkeypatch):
    monkeypatch.setenv(price_cache.ENV_SWITCH, "0")
    afresh = plan_json()
    assert not prices.exists()
    monkeypatch.setenv(price_cache.ENV_SWITCH, "1")
    assert plan_json() == afresh  # cold: prices computed, then kept
    price_cache.save_all()
    (store,) = [p for p in prices.iterdir() if p.is_dir()]  # one PerfDB: one store
    names = {p.stem.split("-")[0] for p in store.glob("*.prices")}
    assert names == {"ops", "part", "step", "sim"}
    assert all(marshal.loads(p.read_bytes())["entries"] for p in store.glob("*.prices"))

    def fail(*args):
        raise AssertionError("computed again")

    # warm: no key resolved, no step part built from its ops, no step assembled, and the same plan
    monkeypatch.setattr(PerfDB, "_resolve", fail)
    monkeypatch.setattr(step_mod, "step_ops", fail)
    monkeypatch.setattr(step_mod, "_price_step", fail)
    assert plan_json() == afresh


def test_an_answer_comes_back_with_its_types(prices):
    keys = [
        Gemm(128, 4096, 4096, "fp8_block"),
        Moe(64, 7168, 2048, 256, 8, 32, "fp8_block", "power_law"),
        Comm(1 << 20, 4, OpName.allgather),
    ]
    store = price_cache.PriceStore(prices / "some")
    for i, key in enumerate(keys):
        store.add_op(key, OpLatency(1.5 + i, 1.25, 2.0e-3, "interpolated", f"note {i}"))
    store.save()
    back = price_cache.PriceStore(prices / "some").ops()
    assert list(back) == keys
    for key, got in zip(keys, back, strict=True):
        assert [type(f) for f in got] == [type(f) for f in key]  # the op an OpName again
        assert type(back[key].us) is float and back[key].note.startswith("note")


def test_the_key_changes_with_a_tables_bytes(prices, tmp_path, monkeypatch):
    root = tmp_path / "tables"
    shutil.copytree(data_root() / "h100_sxm", root / "h100_sxm")
    monkeypatch.setenv(ENV_PATH, str(root))
    first = price_cache.store_for("h100")
    assert first is not None and price_cache.store_for("h100").path == first.path  # type: ignore[union-attr]
    gemm = root / "h100_sxm" / "torch" / "2.11.0" / "gemm.parquet"
    gemm.write_bytes(gemm.read_bytes() + b"\0")
    price_cache.forget()  # as PerfDB.clear_shared does
    changed = price_cache.store_for("h100")
    assert changed is not None and changed.path != first.path
    assert price_cache.store_for("h200").path != changed.path  # type: ignore[union-attr]  # the PerfDB's own


@pytest.mark.slow  # 2.6 s of CPU a case: plans priced again, some in processes
def test_a_corrupt_file_is_ignored_and_written_anew(prices):
    afresh = plan_json()
    price_cache.save_all()
    files = sorted(prices.rglob("*.prices"))
    whole = {p: p.read_bytes() for p in files}
    for p in files:
        p.write_bytes(whole[p][: len(whole[p]) // 2])  # cut short
    assert plan_json() == afresh
    price_cache.save_all()
    for p in files:  # written anew, as they were
        assert marshal.loads(p.read_bytes()) == marshal.loads(whole[p])
    # entries of another layout are left out (and priced again), and so is a file of another layout
    for p in files:
        entries = marshal.loads(whole[p])["entries"]
        if p.stem == "ops":
            entries = {("gemm",): (1.0,), (1, 2, 3, "bf16", "nosuchop"): (1.0, 1.0, 1.0, "measured", "")}
        else:
            entries = {tag: ("x",) for tag in entries}
        p.write_bytes(marshal.dumps({"format": price_cache.FORMAT, "entries": entries}))
    assert plan_json() == afresh
    for p in files:
        p.write_bytes(marshal.dumps(["not", "a", "dict"]))
    assert plan_json() == afresh


def _write_many(path, first: int, count: int, rounds: int) -> None:
    for r in range(rounds):
        store = price_cache.PriceStore(path)
        for m in range(first + r * count, first + (r + 1) * count):
            store.add_op(Gemm(m, 1024, 1024), OpLatency(float(m), 1.0, 2.0, "measured"))
        store.save()


@pytest.mark.slow  # 1.4 s of CPU a case: plans priced again, some in processes
def test_two_processes_writing_at_once_lose_nothing(prices):
    path = prices / "shared"
    spawn = multiprocessing.get_context("spawn")
    writers = [spawn.Process(target=_write_many, args=(path, first, 50, 20)) for first in (0, 100_000)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
        assert w.exitcode == 0
    ms = {key.m for key in price_cache.PriceStore(path).ops()}
    assert ms == set(range(1000)) | set(range(100_000, 101_000))


def test_bounded_in_entries_and_files(prices, monkeypatch):
    monkeypatch.setattr(price_cache, "MAX_ENTRIES", 30)
    _write_many(prices / "a", 0, 20, 3)
    assert len(price_cache.PriceStore(prices / "a").ops()) == 30
    monkeypatch.setattr(price_cache, "MAX_BYTES", 3 * (prices / "a" / "ops.prices").stat().st_size)
    for name in "bcd":
        _write_many(prices / name, 0, 30, 1)  # as large as a's (30 answers of the same shapes)
        newer = time.time_ns() + 1_000_000
        os.utime(prices / name / "ops.prices", ns=(newer, newer))
    assert sorted(p.parent.name for p in prices.rglob("*.prices")) == ["b", "c", "d"]


def test_turned_off_nothing_is_kept(prices, monkeypatch):
    monkeypatch.setenv(price_cache.ENV_SWITCH, "off")
    assert price_cache.store_for("anything") is None
    plan_json()
    price_cache.save_all()
    assert not prices.exists()
