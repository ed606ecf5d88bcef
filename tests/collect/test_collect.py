"""CPU tests of the collector's plumbing: case generation, resume without duplicates, error capture, worker
crashes, acceptance checks, modelled collectives, the CLI. The fake suite (fakeops.py, beside this file)
stands in for the GPU ops; GPU paths are exercised on the device (docs/collect.md)."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from clirun import servelab
from fakeops import CRASH_ENV, FAIL_ENV, SLOW_RANK0_ENV, fake_suite
from typer.testing import CliRunner

from servelab.cli import collect as collect_cli
from servelab.cli.main import app
from servelab.collect import accept, cases, modelled
from servelab.collect.campaign import CampaignConfig, plan_campaign, repeat_sample, run
from servelab.collect.campaign_dir import CampaignDir, key_from_row, key_id
from servelab.collect.executors import LocalExecutor, WorkersFailed
from servelab.collect.repeat import compare
from servelab.errors import ServelabError
from servelab.perfdb.keys import AttentionDecode, Comm, Dsv4Generation, Gemm, MlaDecode, Moe
from servelab.predict.graph import StepShape, step_ops
from servelab.specs import Parallel, load_model, load_system

H200 = load_system("h200_sxm")


def _run(tmp_path, models=("qwen3-32b",), ops=(), smoke=True, workers=2, **kw):
    cfg = CampaignConfig(out=tmp_path / "c", models=models, ops=ops, smoke=smoke, gpus=workers, **kw)
    report = run(
        cfg, executor=LocalExecutor(workers), suite=fake_suite(), progress=False, echo=lambda s: None
    )
    return cfg, report, CampaignDir(cfg.out)


def test_model_keys_are_what_the_predictor_asks_for():
    """Every key step_ops gives for a planned shape is in the plan: tp 1..8, ep and dp_attn variants."""
    model = cases.planning_model("qwen3-30b-a3b", H200)
    keys = set(cases.model_keys(model))
    for par in (Parallel(tp=1), Parallel(tp=8), Parallel(tp=4, ep=4, dp_attn=True)):
        for op in step_ops(model, par, StepShape(decode_batch=64 * par.attn_dp, decode_kv_len=4096)):
            if isinstance(op.key, (AttentionDecode, Gemm, Moe)):
                assert op.key in keys, (par, op)
    heads = {k.heads for k in keys if isinstance(k, AttentionDecode)}
    assert {32, 16, 8, 4} <= heads  # 32 heads at tp 1, 2, 4, 8
    assert any(isinstance(k, Moe) and k.ep == 8 for k in keys)
    assert any(isinstance(k, Moe) and k.distribution == "power_law" for k in keys)


def test_native_heads_times_tp_is_constant_for_mla_and_dsv4():
    for name, kind in (
        ("deepseek-v3", MlaDecode),
        ("deepseek-v4-pro", Dsv4Generation),
        ("deepseek-v4-flash", Dsv4Generation),
    ):
        model = cases.planning_model(name, H200)
        ks = [k for k in cases.model_keys(model) if isinstance(k, kind)]
        assert {k.native_heads // k.heads for k in ks} == {1, 2, 4, 8}
        assert {k.native_heads for k in ks} == {model.attention.num_heads}


def test_fp4_experts_are_planned_with_the_fp8_conversion_on_hopper():
    model = cases.planning_model("deepseek-v4-pro", H200)
    assert model.precision.experts.value == "fp8_block"
    moe = [k for k in cases.model_keys(model) if isinstance(k, Moe)]
    assert moe and {k.dtype for k in moe} == {"fp8_block"}


@pytest.mark.slow  # 1.0 s of CPU a case: a collect campaign with its spawned workers
def test_fp8_checkpoints_are_planned_in_the_precision_they_run_their_experts_in(tmp_path):
    """Qwen/Qwen3-235B-A22B-FP8 shares qwen3-235b-a22b's architecture but runs its experts in FP8 blocks: the
    default plan holds its MoE keys in fp8_block next to the bf16 model's, at every tp and ep."""
    assert "Qwen/Qwen3-235B-A22B-FP8" in cases.default_models()
    assert "qwen3-235b-a22b" in cases.default_models()
    assert "Qwen/Qwen3-235B-A22B" not in cases.default_models()  # same precision as its model: no new keys
    model = cases.planning_model("Qwen/Qwen3-235B-A22B-FP8", H200)
    fp8 = {k for k in cases.model_keys(model) if isinstance(k, Moe)}
    assert fp8 and {k.dtype for k in fp8} == {"fp8_block"}
    plan = plan_campaign(CampaignConfig(out=tmp_path / "c", ops=("moe",)))
    qwen = {
        (k.inter, k.ep, k.dtype)
        for k in plan.keys
        if (k.hidden, k.experts, k.topk)
        == (model.hidden_size, model.moe.num_experts, model.moe.experts_per_token)
    }
    for dtype in ("bf16", "fp8_block"):
        assert {(1536, 1, dtype), (192, 1, dtype), (1536, 8, dtype)} <= qwen  # tp 1; tp 8 ep 1 and ep 8


def test_fp8_gemms_get_a_dense_small_m_grid_and_bf16_gemms_do_not():
    """cuBLAS switches FP8 tile shapes at small M: every FP8 GEMM shape of an FP8 model is planned at
    FP8_SMALL_M too (scaled with the tokens of its parallel split), bf16 shapes only on TOKENS."""
    fp8 = [
        k for k in cases.model_keys(cases.planning_model("Qwen/Qwen3-32B-FP8", H200)) if isinstance(k, Gemm)
    ]
    by_shape: dict = {}
    for k in fp8:
        by_shape.setdefault((k.n, k.k, k.dtype), set()).add(k.m)
    dense = {m for m in cases.TOKENS if m <= 256} | set(cases.FP8_SMALL_M)
    fp8_shapes = [ms for (n, k, dtype), ms in by_shape.items() if dtype in cases.FP8_GEMM_DTYPES]
    assert fp8_shapes and all(dense <= ms for ms in fp8_shapes)
    bf16 = [k for k in cases.model_keys(cases.planning_model("qwen3-32b", H200)) if isinstance(k, Gemm)]
    assert bf16 and {k.m for k in bf16} <= set(cases.TOKENS)
    base: dict = {}
    for k in cases.base_keys():
        if isinstance(k, Gemm):
            base.setdefault(k.dtype, {}).setdefault((k.n, k.k), set()).add(k.m)
    assert all(set(cases.FP8_SMALL_M) <= ms for d in cases.FP8_GEMM_DTYPES for ms in base[d].values())
    assert all(ms == set(cases.TOKENS) for ms in base["bf16"].values())


def test_plan_interleaves_ops_and_smoke_is_small():
    ops = cases.expand_ops(None)
    full = cases.plan(["llama-3.1-8b"], H200, ops, (2,))
    first = {k.op for k in full[:10]}
    assert len(first) >= 3  # a campaign cut short still covers several ops
    smoke = cases.plan(["llama-3.1-8b"], H200, ops, (2,), smoke=True)
    assert 5 < len(smoke) < 60
    assert len(set(smoke)) == len(smoke)


def test_expand_ops_families_and_unknown():
    assert cases.expand_ops(["attention,comm"]) >= {
        "attention_prefill",
        "attention_decode",
        "allreduce",
        "p2p",
    }
    with pytest.raises(ServelabError, match="did you mean|unknown op"):
        cases.expand_ops(["gemmm"])


@pytest.mark.slow  # 1.6 s of CPU a case: a collect campaign with its spawned workers
def test_campaign_writes_rows_and_resumes_without_duplicates(tmp_path):
    cfg, report, store = _run(tmp_path)
    rows = store.rows()
    assert report["ok"], report
    ids = [key_id(key_from_row(r)) for r in rows]
    assert len(ids) == len(set(ids)) == len(plan_campaign(cfg._replace()).keys)
    assert all({"latency_us", "p10_us", "p90_us", "reps", "backend"} <= set(r) for r in rows)
    comm = store.rows("allreduce")
    assert comm and all(r["gpus"] == 2 for r in comm if r["source"] == "measured")
    prov = json.loads((cfg.out / "provenance.json").read_text())
    assert prov["gpu_name"] == "fake" and len(prov["runs"]) == 1
    # run again: nothing to do, nothing duplicated
    _, report2, store2 = _run(tmp_path)
    assert report2["this_run"]["rows"] == 0
    assert len(store2.rows()) == len(rows)
    assert len(json.loads((cfg.out / "provenance.json").read_text())["runs"]) == 2


@pytest.mark.slow  # 2.2 s of CPU a case: a collect campaign with its spawned workers
def test_killed_campaign_keeps_rows_and_finishes_the_rest(tmp_path):
    """A campaign stopped after a few keys (limit) resumes: the rest is measured, none twice; a line cut short
    by a kill is ignored and that key measured again."""
    cfg, _, store = _run(tmp_path, limit=4)
    assert len(store.rows()) == 4
    path = next(store.rows_dir.glob("*.jsonl"))
    with open(path, "a") as f:
        f.write('{"m": 1, "n": 2')  # a half-written line
    _, report, store = _run(tmp_path)
    ids = [key_id(key_from_row(r)) for r in store.rows()]
    assert len(ids) == len(set(ids)) == len(plan_campaign(cfg._replace(limit=None)).keys)
    assert report["ok"]


@pytest.mark.slow  # a collect campaign with its spawned workers
def test_a_rank_that_ends_first_is_not_a_crash_while_rank_0_still_reports(tmp_path, monkeypatch):
    """Rank 1 goes through the list and exits cleanly while rank 0 is still measuring the first collective
    (longer than the parent's 1 s wait): every collective is still measured, none recorded as a crash."""
    cfg = CampaignConfig(out=tmp_path / "c", models=("qwen3-32b",), ops=("allreduce",), smoke=True, gpus=2)
    first = next(k for k in plan_campaign(cfg).keys if k.op == "allreduce")
    monkeypatch.setenv(SLOW_RANK0_ENV, f"allreduce:bytes={first.bytes}")
    _, report, store = _run(tmp_path, ops=("allreduce",))
    assert report["ok"] and not store.errors(), (report, store.errors())
    assert {key_from_row(r) for r in store.rows("allreduce")} >= {first}


@pytest.mark.slow  # 2.3 s of CPU a case: a collect campaign with its spawned workers
def test_errors_are_recorded_with_their_class_and_the_campaign_goes_on(tmp_path, monkeypatch):
    cfg = CampaignConfig(out=tmp_path / "c", models=("qwen3-32b",), smoke=True, gpus=2)
    victim = next(k for k in plan_campaign(cfg).keys if isinstance(k, Gemm))
    monkeypatch.setenv(FAIL_ENV, f"gemm:m={victim.m}")
    _, report, store = _run(tmp_path)
    errors = store.errors()
    assert errors and all(e["error_class"] == "oom" for e in errors)
    assert any(key_from_row(e["key"]) == victim for e in errors)
    assert report["ops"]["gemm"]["errors"] >= 1 and report["ops"]["gemm"]["missing"] == 0
    assert len(store.rows()) > 10  # the rest was measured
    # errors are not retried by default; --retry-errors measures them again and keeps one line per key
    monkeypatch.delenv(FAIL_ENV)
    _, report, store = _run(tmp_path)
    assert report["this_run"]["rows"] == 0
    _, report, store = _run(tmp_path, retry_errors=True)
    assert not store.errors() and report["this_run"]["rows"] == len(errors)


@pytest.mark.slow  # 2.0 s of CPU a case: a collect campaign with its spawned workers
def test_a_worker_that_dies_is_replaced(tmp_path, monkeypatch):
    cfg = CampaignConfig(out=tmp_path / "c", models=("qwen3-32b",), smoke=True, gpus=2)
    victim = next(k for k in plan_campaign(cfg).keys if isinstance(k, AttentionDecode))
    monkeypatch.setenv(CRASH_ENV, f"attention_decode:batch={victim.batch}")
    _, report, store = _run(tmp_path)
    crashed = [e for e in store.errors() if e["error_class"] == "worker_crash"]
    assert crashed and all(e["key"]["op"] == "attention_decode" for e in crashed)
    assert report["ops"]["gemm"]["rows"] == report["ops"]["gemm"]["planned"]


def test_acceptance_flags_bad_numbers_and_missing_heads():
    model = load_model("qwen3-32b")
    good = {
        "batch": 1,
        "kv_len": 1024,
        "heads": 64,
        "kv_heads": 8,
        "head_dim": 128,
        "window": 0,
        "kv_dtype": "bf16",
        "op": "attention_decode",
        "latency_us": 10.0,
        "p10_us": 9.0,
        "p90_us": 11.0,
    }
    nan = dict(good, heads=32, kv_heads=4, latency_us=float("nan"))
    swapped = dict(good, heads=16, kv_heads=2, p10_us=12.0)
    report = accept.check([], [good, nan, swapped], [], [model])
    assert not report["ok"]
    assert len(report["numbers"]) == 2
    assert any("8 heads (tp 8)" in p for p in report["heads"])  # no row for tp 8
    bad_native = dict(good, op="mla_decode", heads=48, native_heads=128)
    assert any("not native" in p for p in accept.heads_across_tp([bad_native], []))


def test_modelled_collectives_say_so_and_grow_with_group_size():
    rows = []
    for b in (1 << 10, 1 << 16, 1 << 20, 1 << 26, 1 << 28, 1 << 30):
        us = 20.0 + 2 * 3 / 4 * b / 300e9 * 1e6
        rows.append(
            {
                "bytes": b,
                "gpus": 4,
                "op": "allreduce",
                "latency_us": us,
                "p10_us": us * 0.98,
                "p90_us": us * 1.02,
                "source": "measured",
            }
        )
    out = modelled.model_rows(rows, (8,), H200)
    assert len(out) == 6 and all(r["source"] == "modelled" and r["gpus"] == 8 for r in out)
    assert all("measured on 4 GPUs" in r["modelled_from"] for r in out)
    by_bytes = {r["bytes"]: r for r in out}
    small4 = rows[0]["latency_us"]
    assert by_bytes[1 << 10]["latency_us"] > small4  # more ring steps
    assert by_bytes[1 << 30]["latency_us"] == pytest.approx(2 * 7 / 8 * (1 << 30) / 300e9 * 1e6, rel=0.05)


@pytest.mark.slow  # 1.5 s of CPU a case: a collect campaign with its spawned workers
def test_repeat_sample_spans_every_op(tmp_path):
    cfg, _, _ = _run(tmp_path)
    keys = repeat_sample(cfg.out, 20, cases.expand_ops(None))
    assert {k.op for k in keys} == {r["op"] for r in CampaignDir(cfg.out).rows()}


def test_cli_dry_run_prints_the_estimate_first(tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "collect",
            "--dry-run",
            "--smoke",
            "--model",
            "llama-3.1-8b",
            "--gpus",
            "2",
            "--out",
            str(tmp_path / "c"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "GPU-minutes" in result.output and "to measure" in result.output


def test_cli_without_gpu_is_a_clean_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "servelab.cli.main", "collect", "--smoke", "--out", str(tmp_path / "c")],
        capture_output=True,
        text=True,
        env=_no_torch_env(),
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and "Traceback" not in proc.stderr


def _no_torch_env():
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def test_comm_keys_cover_every_collective():
    keys = cases.comm_keys((2, 4))
    assert {k.op for k in keys} == {"allreduce", "allgather", "reducescatter", "alltoall", "p2p"}
    assert not any(k.op == "p2p" and k.gpus == 4 for k in keys)
    assert isinstance(keys[0], Comm)


def test_store_key_roundtrip(tmp_path):
    store = CampaignDir(tmp_path)
    store.ensure()
    key = Moe(64, 2048, 768, 128, 8, 1, "bf16", "power_law")
    store.add_row(key, {"latency_us": 5.0, "p10_us": 4.0, "p90_us": 6.0, "reps": 15})
    assert key_from_row(store.rows("moe")[0]) == key
    assert store.done_ids() == {key_id(key)}


def test_cli_unknown_executor_lists_the_known_ones(tmp_path):
    result = CliRunner().invoke(app, ["collect", "--dry-run", "--executor", "rey", "--out", str(tmp_path)])
    assert isinstance(result.exception, ServelabError)
    assert "did you mean ray" in str(result.exception) and "local, ray" in str(result.exception)


@pytest.mark.slow  # 1.6 s of CPU a case: a collect campaign with its spawned workers
def test_repeat_campaign_compares_key_by_key(tmp_path):
    """A campaign measured again gives zero spread against itself; the CLI prints the same comparison."""
    cfg, _, store = _run(tmp_path)
    again = compare(cfg.out, cfg.out)
    assert again["all"]["n"] == len(store.rows()) and again["all"]["abs_median_pct"] == 0.0
    assert set(again["per_op"]) == {r["op"] for r in store.rows()}
    result = CliRunner().invoke(app, ["db", "compare-repeat", str(cfg.out), str(cfg.out), "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    assert answer == {"schema": "servelab.db.compare_repeat", "schema_version": 1} | again
    # for people, a table: an op a row, and the whole
    table = CliRunner().invoke(
        app, ["db", "compare-repeat", str(cfg.out), str(cfg.out)], env={"COLUMNS": "200"}
    )
    assert table.exit_code == 0, table.output
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in table.output.splitlines() if "│" in line]
    assert [row[:2] for row in rows] == [[op, str(s["n"])] for op, s in again["per_op"].items()] + [
        ["all", str(again["all"]["n"])]
    ]


def _no_torch_collect(tmp_path, *extra):
    args = [
        "collect",
        "--system",
        "h200_sxm",
        "--ops",
        "gemm",
        "--limit",
        "2",
        "--out",
        tmp_path / "c",
        *extra,
    ]
    return servelab(*args, env=_no_torch_env())  # in-process (tests/clirun.py)


@pytest.mark.slow  # 1.2 s of CPU a case: a collect campaign with its spawned workers
@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
@pytest.mark.parametrize("extra", [(), ("--gpus", "1")])
def test_cli_without_the_collect_extra_says_so_in_one_line(tmp_path, extra):
    proc = _no_torch_collect(tmp_path, *extra)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: servelab collect needs the collect extra (torch): pip install '.[collect]' "
        "(--dry-run prints the plan without it)"
    ]
    assert "Traceback" not in proc.stderr + proc.stdout and not (tmp_path / "c").exists()
    # planning needs no torch
    dry = _no_torch_collect(tmp_path, "--dry-run")
    assert dry.returncode == 0 and "2 to measure" in dry.stdout and "0 already done" in dry.stdout


@pytest.mark.parametrize(("ops", "hook"), [(("gemm",), "worker_init"), (("allreduce",), "comm_init")])
def test_a_worker_that_cannot_start_fails_the_run_once(tmp_path, ops, hook, capfd):
    """A broken torch/CUDA/NCCL: one message naming the reason and exit code 1, not a traceback per key."""
    suite = fake_suite()._replace(**{hook: "fakeops:no_such_init"})
    cfg = CampaignConfig(out=tmp_path / "c", models=("qwen3-32b",), ops=ops, smoke=True, gpus=2)
    with pytest.raises(WorkersFailed, match="could not start, nothing measured: AttributeError") as e:
        run(cfg, executor=LocalExecutor(2), suite=suite, progress=False, echo=lambda s: None)
    assert e.value.exit_code == 1
    assert "Traceback" not in capfd.readouterr().err
    assert not CampaignDir(cfg.out).rows()


@pytest.mark.slow  # 3.3 s of CPU a case: a collect campaign with its spawned workers
def test_keys_that_broke_fail_acceptance_while_shape_errors_do_not(tmp_path, monkeypatch):
    cfg = CampaignConfig(out=tmp_path / "c", models=("qwen3-32b",), smoke=True, gpus=2)
    victim = next(k for k in plan_campaign(cfg).keys if isinstance(k, AttentionDecode))
    monkeypatch.setenv(CRASH_ENV, f"attention_decode:batch={victim.batch}")
    _, report, _ = _run(tmp_path)
    assert not report["ok"] and report["ops"]["attention_decode"]["failed"] >= 1
    assert report["ops"]["gemm"]["failed"] == 0
    monkeypatch.delenv(CRASH_ENV)
    _, report, _ = _run(tmp_path, retry_errors=True)
    assert report["ok"], report


def test_cli_exits_1_when_every_key_of_the_run_failed(tmp_path, monkeypatch):
    report = {"ok": True, "ops": {}, "heads": [], "numbers": [], "this_run": {"rows": 0, "errors": 35}}
    monkeypatch.setattr(collect_cli, "_require_torch", lambda: None)
    monkeypatch.setattr(collect_cli, "run", lambda *a, **k: report)
    args = ["collect", "--smoke", "--gpus", "1", "--out", str(tmp_path / "c")]
    result = CliRunner().invoke(app, args, standalone_mode=False)
    assert result.return_value == 1 and "nothing was measured: all 35 keys" in result.output
    report["this_run"] = {"rows": 3, "errors": 35}
    assert CliRunner().invoke(app, args, standalone_mode=False).return_value == 0


def test_cli_dry_run_json_is_the_plan_and_its_cost(tmp_path):
    args = ["collect", "--dry-run", "--smoke", "--model", "qwen3-32b", "--gpus", "2", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    cost = json.loads(result.stdout)
    cfg = CampaignConfig(out=tmp_path, models=("qwen3-32b",), smoke=True, gpus=2)
    plan = plan_campaign(cfg)
    assert cost["keys"] == len(plan.keys) == cost["todo"] and cost["done"] == 0
    assert sum(cost["todo_per_op"].values()) == cost["todo"] and cost["source"] == "roofline"
    assert cost["wall_minutes"] == pytest.approx((plan.single_s + plan.comm_s) / 2 / 60, abs=0.01)
    text = CliRunner().invoke(app, args).stdout
    assert f"{cost['todo']} to measure" in text and f"about {cost['wall_minutes']:.1f} minutes on 2" in text


def test_cli_json_run_prints_the_acceptance_report_alone_on_stdout(tmp_path, monkeypatch):
    monkeypatch.setattr(collect_cli, "_require_torch", lambda: None)
    monkeypatch.setattr(collect_cli, "run", lambda cfg, **kw: run(cfg, suite=fake_suite(), **kw))
    out = tmp_path / "c"
    args = ["collect", "--smoke", "--model", "qwen3-32b", "--ops", "gemm", "--gpus", "2", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    stamp = {"schema": "servelab.collect.report", "schema_version": 1}
    assert report == stamp | json.loads((out / "acceptance.json").read_text())
    assert report["this_run"]["rows"] == len(CampaignDir(out).rows()) > 0
    assert "to measure" in result.stderr and "acceptance: ok" in result.stderr


@pytest.mark.slow  # 1.4 s of CPU a case: a collect campaign with its spawned workers
def test_off_a_terminal_progress_is_plain_lines_and_each_stage_is_said(tmp_path, capsys):
    cfg = CampaignConfig(out=tmp_path / "c", models=("qwen3-32b",), smoke=True, gpus=2)
    said: list[str] = []
    report = run(cfg, executor=LocalExecutor(2), suite=fake_suite(), progress=True, echo=said.append)
    keys = report["this_run"]["rows"] + report["this_run"]["errors"]
    lines = capsys.readouterr().err.splitlines()  # pytest's stderr is not a terminal: no rich bar
    assert lines[0] == f"collect: keys measured: {keys} to do"
    assert lines[-1].startswith(f"collect: keys measured: {keys}/{keys} done, 0 errors, last ")
    assert any(s.startswith("collect: collectives: ") for s in said)
    assert any(s.startswith("collect: single-GPU ops: ") for s in said)
    assert "collect: checking the tables (acceptance)" in said
