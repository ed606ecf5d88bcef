"""Table files: merge, provenance, strict loading, and bad files never taking a query down."""

import json
import logging
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import synth

from servelab.errors import ServelabError
from servelab.perfdb import keys
from servelab.perfdb import tables as tables_mod
from servelab.perfdb.db import PerfDB
from servelab.perfdb.families import ACCURACY_TARGETS, BY_NAME
from servelab.perfdb.merge import merge
from servelab.perfdb.table_files import read_meta, read_table, table_from_rows, write_table
from servelab.perfdb.tables import load_tables


def test_merge_writes_one_parquet_per_family_with_provenance_and_accuracy(table_dir):
    names = sorted(p.name for p in table_dir.glob("*.parquet"))
    assert names == [
        "attention_decode.parquet",
        "attention_prefill.parquet",
        "comm.parquet",
        "dsv4_generation.parquet",
        "gemm.parquet",
    ]
    meta = read_meta(table_dir / "gemm.parquet")
    prov = meta["provenance"][0]
    for field in ("gpu_name", "driver", "cuda", "torch", "date", "clocks", "command"):
        assert field in prov
    assert prov["collector_errors"] == 2
    assert (meta["system"], meta["backend"], meta["version"]) == ("h200_sxm", "torch", "2.11")
    acc = meta["accuracy"]["interpolated"]
    assert acc["n"] > 20 and 0 <= acc["median"] <= acc["p90"]
    assert len(read_table(table_dir / "gemm.parquet")) == len(synth.gemm_rows())


def test_stored_leave_one_out_meets_targets_on_smooth_synthetic_data(table_dir):
    for name, (median, p90) in ACCURACY_TARGETS.items():
        acc = read_meta(table_dir / f"{name}.parquet")["accuracy"]["interpolated"]
        assert acc["median"] <= median and acc["p90"] <= p90, (name, acc)


def test_dedup_keeps_the_newest_campaign_and_says_so(tmp_path, h200):
    old_rows = synth.gemm_rows(nks=[(4096, 4096)])
    new_rows = [
        dict(r, latency_us=r["latency_us"] * 2, p10_us=r["p10_us"] * 2, p90_us=r["p90_us"] * 2)
        for r in old_rows[:3]
    ]
    # the newer campaign is given first on the command line: dates decide, not argument order
    new = synth.write_campaign(tmp_path / "new", new_rows, synth.provenance("2025-12-01T00:00:00Z"))
    old = synth.write_campaign(tmp_path / "old", old_rows, synth.provenance("2025-11-01T00:00:00Z"))
    into = tmp_path / "h200_sxm" / "torch" / "2.11"
    report = merge([new, old], into)
    assert report["tables"]["gemm"]["replaced_by_newer"] == 3
    tables = load_tables(into, h200)
    first = old_rows[0]
    lat = tables.lookup(keys.Gemm(first["m"], 4096, 4096))
    assert lat.us == pytest.approx(2 * first["latency_us"])
    # merging again into existing tables keeps the old rows and their provenance
    newest = synth.write_campaign(
        tmp_path / "newest", synth.comm_rows(), synth.provenance("2025-12-02T00:00:00Z")
    )
    merge([newest], into)
    assert len(read_meta(into / "gemm.parquet")["provenance"]) == 3
    assert tables.lookup(keys.Gemm(first["m"], 4096, 4096)).source == "measured"


def test_merge_rejects_bad_rows_with_a_clear_message_unless_dropped(tmp_path):
    rows = synth.prefill_rows()[:5]
    rows.append(dict(rows[0], seq=12345, heads=30, kv_heads=8))  # 30 heads over 8 kv heads
    camp = synth.write_campaign(tmp_path / "c", rows)
    into = tmp_path / "h200_sxm" / "torch" / "2.11"
    with pytest.raises(ServelabError, match="heads must be a multiple of kv_heads.*drop_bad"):
        merge([camp], into)
    report = merge([camp], into, drop_bad=True)
    assert report["tables"]["attention_prefill"]["rows"] == 5 and len(report["dropped"]) == 1
    assert "attention_prefill.jsonl line 6" in report["dropped"][0]


def test_merge_refuses_another_gpu(tmp_path):
    camp = synth.write_campaign(
        tmp_path / "c", synth.comm_rows(), synth.provenance(gpu="NVIDIA H100 80GB HBM3")
    )
    with pytest.raises(ServelabError, match="does not match h200_sxm"):
        merge([camp], tmp_path / "h200_sxm" / "torch" / "2.11")


def test_merge_needs_provenance_fields(tmp_path):
    prov = synth.provenance()
    del prov["clocks"]
    camp = synth.write_campaign(tmp_path / "c", synth.comm_rows(), prov)
    with pytest.raises(ServelabError, match="missing clocks"):
        merge([camp], tmp_path / "h200_sxm" / "torch" / "2.11")


def _write(path, rows, family="dsv4_generation", **meta_extra):
    meta = {"provenance": [synth.provenance()], **meta_extra}
    write_table(path / f"{family}.parquet", table_from_rows(BY_NAME[family], rows, meta))


def test_strict_loader_rejects_heads_times_tp_not_constant_per_model(tmp_path):
    rows = synth.dsv4_rows(64, tps=(1, 2))
    rows[-1] = dict(rows[-1], heads=16)  # tp 2 of a 64-head model must have 32 heads, not 16
    _write(tmp_path, rows)
    with pytest.raises(ServelabError, match=r"heads x tp = 32 for v4-64.*must be constant per model"):
        read_table(tmp_path / "dsv4_generation.parquet")


@pytest.mark.parametrize(
    "change,message",
    [
        ({"heads": 48}, "heads must divide native_heads"),
        ({"p10_us": 1e9}, "p10_us <= latency_us <= p90_us"),
        ({"latency_us": float("nan")}, "latency_us must be finite"),
        ({"batch": 0}, "batch must be >= 1"),
    ],
)
def test_strict_loader_names_the_row_and_rule(tmp_path, change, message):
    rows = synth.dsv4_rows(64, tps=(1,))
    rows[3] = dict(rows[3], **change)
    _write(tmp_path, rows)
    with pytest.raises(ServelabError, match="row 3 .*" + message.replace("(", r"\(").replace(")", r"\)")):
        read_table(tmp_path / "dsv4_generation.parquet")


def test_strict_loader_rejects_duplicate_keys(tmp_path):
    rows = synth.comm_rows()
    rows.append(dict(rows[0]))
    _write(tmp_path, rows, family="comm")
    with pytest.raises(ServelabError, match="repeat the key"):
        read_table(tmp_path / "comm.parquet")


def test_corrupt_and_malformed_files_are_skipped_and_the_roofline_answers(tmp_path, h200, caplog):
    d = tmp_path / "h200_sxm" / "torch" / "2.11"
    d.mkdir(parents=True)
    (d / "gemm.parquet").write_bytes(b"PAR1 this is not a parquet file")
    rows = synth.comm_rows()
    rows[0] = dict(rows[0], gpus=1)
    _write(d, rows, family="comm")
    _write(d, synth.decode_rows(), family="attention_decode")
    tables = load_tables(d, h200)
    db = PerfDB(h200, tables=tables)
    with caplog.at_level(logging.WARNING, logger="servelab.perfdb"):
        g = db.query(keys.Gemm(100, 4096, 4096))
        c = db.query(keys.Comm(1 << 20, 8))
    assert g.source == "roofline" and "gemm.parquet skipped" in g.note and "not a readable Parquet" in g.note
    assert c.source == "roofline" and "gpus >= 2" in c.note
    assert "gemm.parquet" in caplog.text and "comm.parquet" in caplog.text
    # the good table in the same directory still answers
    assert db.query(keys.AttentionDecode(8, 4096, 32, 8, 128)).source == "measured"


def test_table_without_servelab_metadata_is_rejected(tmp_path):
    pq.write_table(pa.table({"m": [1]}), tmp_path / "gemm.parquet")
    with pytest.raises(ServelabError, match="no servelab metadata"):
        read_table(tmp_path / "gemm.parquet")


def test_default_tables_come_from_the_search_path(table_dir, h200, monkeypatch):
    root = table_dir.parents[2]
    monkeypatch.setenv(tables_mod.ENV_PATH, str(root))
    ts = tables_mod.load_default_tables(h200)
    assert ts is not None and ts.dir == table_dir
    assert ts.lookup(keys.Gemm(512, 4096, 4096)).source == "measured"


def test_a_backend_is_priced_from_its_own_tables_only(table_dir, h200, monkeypatch, tmp_path, request):
    """The synthetic tables sit under torch/: the torch backend reads them, an engine backend only where it
    runs torch's own kernel (vLLM's bf16 linear layers call F.linear, cuBLAS: its TORCH_LINEAR kernel choice);
    SGLang's GEMMs stay on the roofline until GEMM tables collected with it exist."""
    key = keys.Gemm(512, 4096, 4096)
    PerfDB.clear_shared()  # the per-process cache; this test changes the search path
    request.addfinalizer(PerfDB.clear_shared)
    monkeypatch.setenv(tables_mod.ENV_PATH, str(table_dir.parents[2]))
    assert tables_mod.load_default_tables(h200, "torch").dir == table_dir
    assert PerfDB(h200, backend="torch").query(key).source == "measured"
    vllm = PerfDB(h200, backend="vllm").query(key)
    assert vllm.source == "measured" and "h200_sxm/torch/" in vllm.note  # the kernel vLLM calls
    sglang = PerfDB(h200, backend="sglang")
    assert sglang.tables is None and sglang.query(key).source == "roofline"

    engine_dir = tmp_path / h200.name / "vllm" / "0.11"
    engine_dir.mkdir(parents=True)
    for f in table_dir.glob("*.parquet"):
        (engine_dir / f.name).write_bytes(f.read_bytes())
    monkeypatch.setenv(tables_mod.ENV_PATH, str(tmp_path))
    PerfDB.clear_shared()
    assert tables_mod.load_default_tables(h200, "vllm").dir == engine_dir
    assert PerfDB(h200, backend="vllm").query(key).source == "measured"


def test_campaign_rows_with_extras_round_trip(tmp_path):
    rows = synth.prefill_rows()[:4]
    for r in rows:
        r["backend"] = "cudnn"
    camp = synth.write_campaign(tmp_path / "c", rows)
    into = tmp_path / "h200_sxm" / "torch" / "2.11"
    merge([camp], into)
    data = read_table(into / "attention_prefill.parquet")
    assert json.loads(data.extra[0]) == {"backend": "cudnn"}


def test_tables_load_lazily(table_dir):
    """Listing the table directory reads no file; pyarrow comes in on the first query of a family, and only
    that family's file is read."""
    code = f"""
import sys
from servelab.specs import load_system
from servelab.perfdb.tables import load_tables
from servelab.perfdb import keys
ts = load_tables({str(table_dir)!r}, load_system("h200_sxm"))
assert "pyarrow" not in sys.modules, "pyarrow imported before any query"
ts.lookup(keys.Gemm(100, 4096, 4096))
assert "pyarrow.dataset" not in sys.modules, "pyarrow.dataset costs ~150 ms of startup"
assert ts.read_families == {{"gemm"}}, ts.read_families
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_rows_the_collector_modelled_never_pass_for_measured(tmp_path, h200):
    rows = synth.comm_rows()
    modelled = [
        dict(r, gpus=16, source="modelled", reps=0, modelled_from="allreduce measured on 8 GPUs")
        for r in rows
        if r["gpus"] == 8
    ]
    camp = synth.write_campaign(tmp_path / "c", [dict(r, source="measured") for r in rows] + modelled)
    into = tmp_path / "h200_sxm" / "torch" / "2.11"
    report = merge([camp], into)
    tables = load_tables(into, h200)
    hit = tables.lookup(keys.Comm(1 << 20, 16))
    assert hit.source == "extrapolated" and "modelled, not measured" in hit.note and "8 GPUs" in hit.note
    between = tables.lookup(keys.Comm(3 << 20, 16))
    assert between.source == "extrapolated" and "modelled" in between.note
    assert tables.lookup(keys.Comm(1 << 20, 8)).source == "measured"
    # modelled rows are never the truth that leave-one-out scores against
    n_measured_groups = 3
    assert report["tables"]["comm"]["accuracy"]["interpolated"]["n"] == n_measured_groups * 9


def test_merging_the_same_campaign_again_is_idempotent(tmp_path):
    camp = synth.write_campaign(tmp_path / "c", synth.comm_rows() + synth.gemm_rows(nks=[(4096, 4096)]))
    into = tmp_path / "h200_sxm" / "torch" / "2.11"
    merge([camp], into)
    report = merge([camp], into)
    assert report["campaigns"][0]["merged_before"] is True
    assert report["tables"]["gemm"]["replaced_by_newer"] == 0
    assert len(read_meta(into / "gemm.parquet")["provenance"]) == 1
    assert len(read_table(into / "comm.parquet")) == len(synth.comm_rows())
