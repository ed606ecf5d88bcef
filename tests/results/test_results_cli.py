"""`servelab results` as a user runs it: import, list, show, compare, export; bad input: one line, exit 2."""

import csv
import io
import json
import sys

import pytest
from clirun import servelab as run_cli

from servelab.errors import ServelabError
from servelab.results import export


def servelab(*args, store):
    return run_cli("results", *args, "--store", str(store))


def ok(r):
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_import_list_show_compare_export(tmp_path, write_json, vllm_result):
    store = tmp_path / "r.db"
    base = [write_json(f"base{i}.json", vllm_result(median_ttft_ms=100.0 + i)) for i in range(3)]
    new = [
        write_json(f"new{i}.json", vllm_result(median_ttft_ms=80.0 + i, date=f"2026113{i}-101500"))
        for i in range(3)
    ]
    assert "imported" in ok(servelab("import", *base, "--name", "base", store=store))
    imported = json.loads(ok(servelab("import", *new, "--name", "new", "--json", store=store)))["imported"]
    assert [i["new"] for i in imported] == [True] * 3
    assert "skipped" in ok(servelab("import", base[0], store=store))

    runs = json.loads(ok(servelab("list", "--json", store=store)))["runs"]
    assert len(runs) == 6 and {r["name"] for r in runs} == {"base", "new"} and runs[0]["num_metrics"] == 14
    assert "base" in ok(servelab("list", "--name", "base", store=store))
    listed = list(csv.DictReader(io.StringIO(ok(servelab("list", "--csv", store=store)))))
    assert [row["run"] for row in listed] == [r["id"] for r in runs] and listed[0]["metrics"] == "14"

    shown = json.loads(ok(servelab("show", runs[0]["id"], "--json", store=store)))
    assert shown["stages"][0]["config"] == "vllm-conc-16" and len(shown["metrics"]) == 14
    assert "median_ttft_ms" in ok(servelab("show", runs[0]["id"], store=store))

    cmp = json.loads(
        ok(servelab("compare", "base", "new", "--metric", "median_ttft_ms", "--json", store=store))
    )
    [row] = cmp["rows"]
    assert (row["median_a"], row["median_b"]) == (101.0, 81.0) and row["p_value"] < 0.01
    assert row["change_pct"] == pytest.approx(-19.8, abs=0.01)
    table = ok(servelab("compare", "base", "new", "-m", "*ttft*", store=store))
    assert "median_ttft_ms" in table and "-19.8" in table

    rows = list(csv.DictReader(io.StringIO(ok(servelab("export", "--format", "csv", store=store)))))
    assert len(rows) == 6 * 14 and set(rows[0]) == set(export.ROW_FIELDS)
    records = json.loads(ok(servelab("export", "new", "--format", "json", store=store)))
    assert len(records) == 3 and {"provenance", "stages", "metrics"} <= records[0].keys()
    out = tmp_path / "all.parquet"
    summary = json.loads(ok(servelab("export", "-f", "parquet", "-o", str(out), "--json", store=store)))
    stamp = {"schema": "servelab.results.export", "schema_version": 1}
    assert summary == stamp | {"output": str(out), "format": "parquet", "runs": 6, "rows": 6 * 14}
    pq = pytest.importorskip("pyarrow.parquet")
    assert pq.read_table(out).num_rows == 6 * 14


def test_bad_input_is_one_line_and_exit_code_2(tmp_path):
    store = tmp_path / "r.db"
    bad = tmp_path / "bad.json"
    bad.write_text('{"model_id": "m"}')
    for args, message in [
        (("import", str(bad)), f"{bad}: not a known result file"),
        (("import", str(tmp_path / "missing.json")), "missing.json: cannot read"),
        (("show", "nope"), "no run 'nope'"),
        (("compare", "nope", "nope"), "no run 'nope'"),
        (("export", "--format", "xlsx"), "--format 'xlsx': expected one of csv, json, parquet"),
        (("export", "--format", "parquet"), "give --output"),
    ]:
        r = servelab(*args, store=store)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: ") and message in r.stderr, r.stderr


def test_parquet_without_pyarrow_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now raises ImportError
    with pytest.raises(ServelabError, match="Parquet export needs pyarrow"):
        export.write_parquet([], tmp_path / "x.parquet")
