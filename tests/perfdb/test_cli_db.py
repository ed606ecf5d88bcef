"""`servelab db` end to end, through the real entry point (exit codes and one-line errors included)."""

import json
import os
import subprocess
import sys

import pytest
import synth
from clirun import servelab as run_cli

from servelab.cli.main import main
from servelab.perfdb.table_files import read_meta, read_table


def run(*args, env_extra=None):
    return run_cli("db", *args, env=dict(os.environ, **(env_extra or {})))


def test_query_one_op_as_json(table_dir):
    r = run(
        "query", "gemm", "--m", "3000", "--n", "4096", "--k", "4096", "--tables", str(table_dir), "--json"
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["source"] == "interpolated"
    assert out["latency_us_low"] <= out["latency_us"] <= out["latency_us_high"]
    assert abs(out["latency_us"] / synth.gemm_us(3000, 4096, 4096) - 1) < 0.05


def test_query_batch_size_flag_and_text_output(table_dir):
    r = run(
        "query",
        "attention_decode",
        "--batch",
        "8",
        "--kv-len",
        "4096",
        "--heads",
        "32",
        "--kv-heads",
        "8",
        "--head-dim",
        "128",
        "--tables",
        str(table_dir),
    )
    assert r.returncode == 0, r.stderr
    assert "measured" in r.stdout and "us [" in r.stdout


def test_query_batch_file(table_dir, tmp_path):
    lines = [
        {"op": "gemm", "m": 7, "n": 4096, "k": 4096},
        {"op": "attention_prefill", "batch": 2, "seq": 1000, "heads": 32, "kv_heads": 8, "head_dim": 128},
        {"op": "allreduce", "bytes": 3 << 20, "gpus": 8},
        {
            "op": "moe",
            "tokens": 256,
            "hidden": 7168,
            "inter": 2048,
            "experts": 256,
            "topk": 8,
            "ep": 8,
            "dtype": "fp8",
        },
        {"op": "mla_decode", "batch": 4, "kv_len": 4096, "heads": 16, "native_heads": 128},
        {"op": "dsv4_csa_context_module", "native_heads": 128, "heads": 16, "batch": 1, "seq": 4096},
    ]
    f = tmp_path / "q.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = run("query", "--batch", str(f), "--tables", str(table_dir), "--json")
    assert r.returncode == 0, r.stderr
    out = [json.loads(x) for x in r.stdout.splitlines()]
    assert [o["source"] for o in out] == [
        "interpolated",
        "interpolated",
        "interpolated",
        "roofline",
        "roofline",
        "roofline",
    ]
    for o in out:
        assert set(o) >= {"latency_us", "latency_us_low", "latency_us_high", "source", "note"}


def test_batch_file_bad_lines_get_error_objects_and_exit_2(table_dir, tmp_path):
    f = tmp_path / "q.jsonl"
    f.write_text('{"op": "gemm", "m": 7, "n": 4096, "k": 4096}\n{"op": "gemmm", "m": 1}\nnot json\n')
    r = run("query", "--batch", str(f), "--tables", str(table_dir), "--json")
    assert r.returncode == 2
    out = [json.loads(x) for x in r.stdout.splitlines()]
    assert "latency_us" in out[0]
    assert "did you mean gemm" in out[1]["error"] and "not valid JSON" in out[2]["error"]
    assert r.stderr.startswith("error: 2 line(s)")


def test_every_bad_batch_line_gets_its_own_record_and_the_rest_are_answered(table_dir, tmp_path):
    """Numbers that are not positive integers are refused, never truncated (m: 1.5 or m: true is not m=1), and
    a line that cannot be answered never stops the lines after it."""
    good = '{"op": "gemm", "m": 7, "n": 4096, "k": 4096}'
    bad = [
        ('{"op": "gemm", "m": 1e400, "n": 4096, "k": 4096}', "m", "got inf (not finite)"),
        ('{"op": "gemm", "m": 1.5, "n": 4096, "k": 4096}', "m", "got 1.5 (a float)"),
        ('{"op": "gemm", "m": true, "n": 4096, "k": 4096}', "m", "got true (a bool)"),
        ('{"op": "gemm", "m": 4096.0, "n": 4096, "k": 4096}', "m", "got 4096.0 (a float)"),
        ('{"op": "gemm", "m": NaN, "n": 4096, "k": 4096}', "m", "got nan (not finite)"),
        ('{"op": "gemm", "m": "7", "n": 4096, "k": 4096}', "m", "got '7' (a string)"),
        ('{"op": "gemm", "m": null, "n": 4096, "k": 4096}', "m", "got null"),
        ('{"op": "gemm", "m": -7, "n": 4096, "k": 4096}', "m", "must be >= 1"),
        ('{"op": "gemm", "m": 7, "n": 4096, "k": 1e30}', "k", "got 1e+30 (a float)"),
        ('{"op": "gemm", "m": 7, "n": 4096, "k": 100000000000000000000}', "k", "outside the supported range"),
        ('{"op": "gemm", "m": 7, "n": 4096, "k": 4096, "dtype": 8}', "dtype", "expected a name"),
        ('{"op": "allreduce", "bytes": 1024, "gpus": false}', "gpus", "got false (a bool)"),
        ('{"op": null, "m": 7}', "op", "expected the op's name"),
        ('{"op": "gemm", "m": 7, "n": 4096}', "k", "missing"),
    ]
    lines = [good] + [line for line, _, _ in bad] + ["[" * 100_000, good]
    f = tmp_path / "q.jsonl"
    f.write_text("\n".join(lines) + "\n")
    r = run("query", "--batch", str(f), "--tables", str(table_dir), "--json")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    out = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(out) == len(lines)
    assert "latency_us" in out[0] and "latency_us" in out[-1]
    for n, (record, (_, field, expected)) in enumerate(zip(out[1:], bad, strict=False), 2):
        assert record["line"] == n and record["field"] == field, record
        assert f"line {n}: {field}: " in record["error"] and expected in record["error"], record
    stamp = {"schema": "servelab.db.query", "schema_version": 1}
    assert out[-2] == stamp | {"line": len(lines) - 1, "error": f"{f} line {len(lines) - 1}: not valid JSON"}
    assert r.stderr.startswith(f"error: {len(bad) + 1} line(s)")


def test_unknown_op_and_out_of_range_shapes_are_clear_errors():
    r = run("query", "gemmm", "--m", "1")
    assert (
        r.returncode == 2
        and "unknown op 'gemmm' (did you mean gemm" in r.stderr
        and "Traceback" not in r.stderr
    )
    r = run("query", "gemm", "--m", "1", "--n", "4096", "--k", str(1 << 30))
    assert r.returncode == 2 and "--k: 1073741824 is outside the supported range" in r.stderr
    r = run(
        "query",
        "attention_prefill",
        "--batch",
        "1",
        "--seq",
        "10",
        "--heads",
        "7",
        "--kv-heads",
        "2",
        "--head-dim",
        "128",
    )
    assert r.returncode == 2 and "heads=7 must be a multiple of kv_heads=2" in r.stderr
    r = run("query", "gemm", "--m", "4", "--n", "4", "--k", "4", "--dtype", "int3")
    assert r.returncode == 2 and "unknown dtype 'int3'" in r.stderr
    r = run("query", "gemm", "--m", "4", "--n", "4", "--seq", "4")
    assert r.returncode == 2 and "unknown field(s) seq" in r.stderr


def test_status_accuracy_and_validate(table_dir, tmp_path):
    env = {"SERVELAB_PERFDB_PATH": str(table_dir.parents[2])}
    r = run("status", "--system", "h200_sxm", env_extra=env)
    assert r.returncode == 0 and "(in use)" in r.stdout and "gemm" in r.stdout and "NVIDIA H200" in r.stdout
    r = run("accuracy", "--tables", str(table_dir), "--check", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)["tables"]
    assert report[0]["tables"]["gemm"]["passes"] is True
    r = run("validate", str(table_dir))
    assert r.returncode == 0 and r.stdout.count("ok ") == 5
    (tmp_path / "gemm.parquet").write_bytes(b"garbage")
    r = run("validate", str(tmp_path))
    assert r.returncode == 2 and "FAIL" in r.stdout and "not a readable Parquet file" in r.stdout
    r = run("validate", str(tmp_path), "--json")
    (checked,) = json.loads(r.stdout)["files"]
    assert r.returncode == 2 and checked["ok"] is False
    assert "not a readable Parquet file" in checked["problem"]


def test_merge_command(tmp_path):
    camp = synth.write_campaign(tmp_path / "c", synth.comm_rows() + synth.gemm_rows(nks=[(4096, 4096)]))
    into = tmp_path / "h200_sxm" / "torch" / "2.11"
    r = run("merge", str(camp), "--into", str(into))
    assert r.returncode == 0, r.stderr
    assert "gemm" in r.stdout and "comm" in r.stdout and (into / "gemm.parquet").exists()
    r = run("validate", str(camp))
    assert r.returncode == 0 and "ok" in r.stdout


@pytest.mark.slow  # two CLI processes merging at once (5-25 s); quick: test_merge_command (the merge itself)
def test_merges_into_one_directory_at_once_keep_every_campaign(tmp_path):
    """Four `db merge` processes started together into one table directory, each with its own campaign of the
    same families: the directory lock serialises their read-merge-write, so none overwrites another's rows."""
    nks = synth.GEMM_NK[:4]
    comm = synth.comm_rows()
    camps = [
        synth.write_campaign(
            tmp_path / f"c{i}",
            synth.gemm_rows(nks=[nk]) + comm[i::4],
            synth.provenance(date=f"2025-11-2{i}T10:00:00Z"),
        )
        for i, nk in enumerate(nks)
    ]
    into = tmp_path / "h200_sxm" / "torch" / "2.11"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "servelab.cli.main", "db", "merge", str(camp), "--into", str(into)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for camp in camps
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    gemm = read_table(into / "gemm.parquet")
    got = set(zip(gemm.cols["n"].tolist(), gemm.cols["k"].tolist(), strict=True))
    assert got == set(nks) and len(gemm) == len(nks) * len(synth.GEMM_M)
    assert len(read_table(into / "comm.parquet")) == len(comm)
    assert len(read_meta(into / "gemm.parquet")["provenance"]) == len(camps)
    # no temporary file left behind; the lock file stays, outside the loader's *.parquet glob
    assert sorted(p.name for p in into.iterdir()) == [".lock", "comm.parquet", "gemm.parquet"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("validate", "{empty}"), "no table files (*.parquet) and no provenance.json"),
        (("validate", "{tmp}/missing"), "no such file or directory"),
        (("query", "gemm", "--m", "1", "--n", "1", "--k", "1", "--tables", "{empty}"), "--tables: "),
        (("query", "gemm", "--m", "1", "--n", "1", "--k", "1", "--tables", "{tmp}/missing"), "no such table"),
        (("query", "--batch", "{empty}"), "--batch: "),
        (("query", "--batch", "{tmp}/binary.jsonl"), "--batch: "),
        (("status", "--system", ""), "unknown system ''"),
        (("accuracy", "--system", ""), "unknown system ''"),
        (("accuracy", "--tables", "{empty}"), "--tables: "),
        (("compare-repeat", "{empty}", "{empty}"), "not a collector campaign directory"),
        (("merge", "{empty}", "--into", "{tmp}/h200_sxm/torch/1"), "no provenance.json"),
        (("merge", "{campaign}", "--into", "{tmp}/file/h200_sxm/torch/1"), "cannot open for writing"),
        (("query", "gemm", "--m", "0", "--n", "1", "--k", "1"), "--m: must be >= 1, got 0"),
        (("query", "gemm", "--m", "1", "--n", "1", "--k", "1", "--dtype", ""), "--dtype: unknown dtype ''"),
    ],
)
def test_hostile_db_options_are_one_line_errors(tmp_path, capsys, monkeypatch, args, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "binary.jsonl").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "file").write_text("not a directory")
    campaign = synth.write_campaign(tmp_path / "c", synth.comm_rows())
    args = tuple(a.format(tmp=tmp_path, empty=tmp_path / "empty", campaign=campaign) for a in args)
    monkeypatch.setattr(sys, "argv", ["servelab", "db", *args])
    with pytest.raises(SystemExit) as done:
        main()
    out = capsys.readouterr()
    assert done.value.code == 2 and message in out.err + out.out, out
    assert out.err.startswith("error: ") and out.err.count("\n") == 1, out.err
