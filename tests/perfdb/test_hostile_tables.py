"""Table files of the wrong shape: valid Parquet and valid JSON metadata, but a list where an object
belongs, a string for a number, a missing key, a null, a column of the wrong type. The loader rejects each
naming the file and the field; queries skip the table with a warning (the roofline answers its ops);
`db validate` fails it."""

import json
import logging
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import synth

from servelab.errors import ServelabError
from servelab.perfdb import keys
from servelab.perfdb.db import PerfDB
from servelab.perfdb.merge import merge
from servelab.perfdb.table_files import read_table
from servelab.perfdb.tables import load_tables


def _set(path: list, value):
    def change(meta):
        obj = meta
        for p in path[:-1]:
            obj = obj[p]
        obj[path[-1]] = value
        return meta

    return change


def _drop(path: list):
    def change(meta):
        obj = meta
        for p in path[:-1]:
            obj = obj[p]
        del obj[path[-1]]
        return meta

    return change


META_CASES = {
    "metadata a list": (lambda meta: [meta], "metadata must be a JSON object, found list"),
    "metadata null": (lambda meta: None, "metadata must be a JSON object, found NoneType"),
    "accuracy a list": (_set(["accuracy"], []), "metadata: accuracy: "),
    "accuracy a string": (_set(["accuracy"], "good"), "metadata: accuracy: "),
    "a kind a list": (_set(["accuracy", "interpolated"], [1]), "metadata: accuracy.interpolated: "),
    "n a string": (_set(["accuracy", "interpolated", "n"], "many"), "accuracy.interpolated.n: "),
    "n a float": (_set(["accuracy", "interpolated", "n"], 5.5), "accuracy.interpolated.n: "),
    "lo a string": (_set(["accuracy", "interpolated", "lo"], "x"), "accuracy.interpolated.lo: "),
    "lo missing": (_drop(["accuracy", "interpolated", "lo"]), "accuracy.interpolated: n=.* needs lo"),
    "median null": (_set(["accuracy", "interpolated", "median"], None), "needs median"),
    "merged a list": (_set(["merged"], [1]), "metadata: merged: "),
    "rows a string": (_set(["merged", "rows"], "10"), "metadata: merged.rows: "),
    "provenance null": (_set(["provenance"], None), "metadata: provenance: "),
    "provenance an object": (_set(["provenance"], {"gpu_name": "x"}), "metadata: provenance: "),
    "provenance empty": (_set(["provenance"], []), "metadata: provenance: "),
    "provenance entry a string": (_set(["provenance", 0], "x"), "metadata: provenance.0: "),
    "gpu_name a number": (_set(["provenance", 0, "gpu_name"], 5), "metadata: provenance.0.gpu_name: "),
    "date a list": (_set(["provenance", 0, "date"], [1]), "metadata: provenance.0.date: "),
    "clocks missing": (_drop(["provenance", 0, "clocks"]), "metadata: provenance.0.clocks: "),
    "clocks null": (_set(["provenance", 0, "clocks"], None), "metadata: provenance.0.clocks: "),
    "family a number": (_set(["family"], 3), "metadata: family: "),
    "format a string": (_set(["format"], "1"), "table format '1'"),
    "format true": (_set(["format"], True), "table format True"),
    "system a list": (_set(["system"], ["h200"]), "metadata: system: "),
}


def _rewrite(path, meta_change=None, column=None):
    table = pq.ParquetFile(path).read()
    meta = json.loads(table.schema.metadata[b"servelab"])
    if meta_change is not None:
        meta = meta_change(meta)
    if column is not None:
        name, values = column
        arr = values(table.num_rows)
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, arr)
        else:
            table = table.append_column(name, arr)
    pq.write_table(table.replace_schema_metadata({b"servelab": json.dumps(meta)}), path)


@pytest.fixture()
def bad_dir(table_dir, tmp_path):
    d = tmp_path / "h200_sxm" / "torch" / "2.11"
    shutil.copytree(table_dir, d)
    return d


@pytest.mark.parametrize("case", list(META_CASES))
def test_metadata_of_the_wrong_shape_is_rejected_naming_file_and_field(bad_dir, h200, case, caplog):
    change, message = META_CASES[case]
    path = bad_dir / "gemm.parquet"
    _rewrite(path, change)
    with pytest.raises(ServelabError, match=message) as err:
        read_table(path)
    assert str(err.value).startswith(f"{path}: ") and "\n" not in str(err.value)
    # a query skips the table with a warning naming it; the roofline answers, the other tables still do
    db = PerfDB(h200, tables=load_tables(bad_dir, h200))
    with caplog.at_level(logging.WARNING, logger="servelab.perfdb"):
        g = db.query(keys.Gemm(100, 4096, 4096))
    assert g.source == "roofline" and "gemm.parquet skipped" in g.note
    assert str(path) in caplog.text
    assert db.query(keys.AttentionDecode(8, 4096, 32, 8, 128)).source == "measured"


COLUMN_CASES = {
    "latency_us strings": (("latency_us", lambda n: pa.array(["x"] * n)), "column 'latency_us' must hold"),
    "latency_us nulls": (
        ("latency_us", lambda n: pa.array([None] * n, pa.float64())),
        "latency_us hold empty",
    ),
    "reps floats": (("reps", lambda n: pa.array([1.5] * n)), "column 'reps' must hold integers"),
    "campaign a null": (
        ("campaign", lambda n: pa.array([None] + [0] * (n - 1), pa.int64())),
        "campaign hold empty",
    ),
    "m strings": (("m", lambda n: pa.array(["1"] * n)), "column 'm' must hold integers"),
    "dtype integers": (("dtype", lambda n: pa.array([1] * n)), "column 'dtype' must hold strings"),
    "dtype nulls": (("dtype", lambda n: pa.array([None] * n, pa.string())), "dtype hold empty"),
    "extra integers": (("extra", lambda n: pa.array([1] * n)), "column 'extra' must hold JSON strings"),
    "extra a JSON list": (("extra", lambda n: pa.array(["[1]"] * n)), "extra must be a JSON object"),
    "measured strings": (("measured", lambda n: pa.array(["yes"] * n)), "column 'measured' must hold"),
}


@pytest.mark.parametrize("case", list(COLUMN_CASES))
def test_columns_of_the_wrong_type_are_rejected_naming_file_and_column(bad_dir, case):
    column, message = COLUMN_CASES[case]
    path = bad_dir / "gemm.parquet"
    _rewrite(path, column=column)
    with pytest.raises(ServelabError, match=message) as err:
        read_table(path)
    assert str(err.value).startswith(f"{path}: ")


def test_extra_tp_that_is_not_a_positive_integer_is_a_row_problem(bad_dir):
    path = bad_dir / "attention_decode.parquet"
    _rewrite(path, column=("extra", lambda n: pa.array(['{"tp": 1e400, "model": "x"}'] * n)))
    with pytest.raises(ServelabError, match="extra tp inf must be a positive integer"):
        read_table(path)


def _cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "servelab.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.slow  # 1.4 s of CPU a case: a `servelab db validate` process
def test_db_validate_fails_a_table_with_wrong_metadata_and_query_falls_back(bad_dir):
    path = bad_dir / "gemm.parquet"
    _rewrite(path, _set(["accuracy", "interpolated", "n"], "many"))
    r = _cli("db", "validate", str(path))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"FAIL {path}" in r.stdout and "accuracy.interpolated.n" in r.stdout
    r = _cli("db", "query", "gemm", "--m", "100", "--n", "4096", "--k", "4096", "--tables", str(bad_dir))
    assert r.returncode == 0 and "Traceback" not in r.stderr
    assert "roofline" in r.stdout and f"perf table {path} skipped" in r.stderr


def test_merge_holds_campaign_provenance_to_the_loader_checks(tmp_path):
    prov = dict(synth.provenance(), date=["2025-11-29"])
    camp = synth.write_campaign(tmp_path / "c", synth.comm_rows(), prov)
    with pytest.raises(ServelabError, match=r"provenance.json: date: Input should be a valid string"):
        merge([camp], tmp_path / "h200_sxm" / "torch" / "2.11")
    assert not (tmp_path / "h200_sxm").exists()


def test_campaign_rows_with_out_of_range_or_fractional_integers_are_bad_rows(tmp_path):
    rows = synth.comm_rows()[:3]
    rows[0] = dict(rows[0], bytes=10**23)  # beyond the table's 64-bit integers
    rows[1] = dict(rows[1], reps=1.5)  # never truncated to 1
    camp = synth.write_campaign(tmp_path / "c", rows)
    into = tmp_path / "h200_sxm" / "torch" / "2.11"
    with pytest.raises(
        ServelabError, match=r"2 unreadable row\(s\).*line 1: bytes must be.*line 2: reps must"
    ):
        merge([camp], into)
    report = merge([camp], into, drop_bad=True)
    assert report["tables"]["comm"]["rows"] == 1 and len(report["dropped"]) == 2
