"""Where calibration rows come from (servelab.calibrate.sources): InferenceX result files (a pinned upstream
sample), the results store, and the deployment read from a server's command line; and that a calibration
fitted on store rows recovers the parameters that made them."""

import json
import math
import shutil
from pathlib import Path

import pytest
from clirun import servelab

from servelab.calibrate import inferencex_rows
from servelab.calibrate.document import CalibrationDocument
from servelab.calibrate.engines import EngineFitOptions, calibrate_engines
from servelab.calibrate.price import Pricer
from servelab.calibrate.rows import Case
from servelab.calibrate.sources import Sources, gather
from servelab.errors import ServelabError
from servelab.predict.deployment import (
    engine_of_argv,
    model_of_argv,
    parallel_of_argv,
    system_of_gpu,
)
from servelab.predict.engines import engine_profile
from servelab.results.importers import import_files
from servelab.results.provenance import Provenance
from servelab.results.store import Store
from servelab.specs import Parallel, load_model, load_system
from servelab.specs.families import family_of

SAMPLE = Path(__file__).parents[1] / "data" / "inferencex" / "results" / "agg_benchmark_result.json"


def test_families_group_sizes_of_one_model():
    assert family_of("llama-3.1-8b") == family_of("llama-3.1-70b") == "llama"
    assert family_of("deepseek-r1") == family_of("deepseek-v4-flash") == "deepseek"
    assert family_of("qwen3-235b-a22b") == "qwen" and family_of("gpt-oss-120b") == "gpt-oss"
    assert family_of("some-new-model") == "some-new-model"


def test_inferencex_upstream_sample():
    """The pinned file is upstream process_result.py's own output: its deployment is read; its runner (MI300X)
    has no servelab system, so it is refused by name, and the same row on an H200 runner is a Case."""
    (item,) = inferencex_rows.read_items(SAMPLE)
    with pytest.raises(ValueError, match="GPU mi300x has no servelab system"):
        inferencex_rows.to_case(item, "r", "test")
    case = inferencex_rows.to_case(dict(item, hw="h200-nv"), "r", "test")
    assert (case.engine, case.model_name, case.family, case.system) == (
        "sglang",
        "deepseek-r1",
        "deepseek",
        "h200_sxm",
    )
    assert case.parallel == Parallel(tp=8) and (case.concurrency, case.isl, case.osl) == (64, 1024, 1024)
    # latencies are seconds in the file: ttft_p50 0.1505 s, tpot_p50 0.025 s
    assert case.ttft_ms == pytest.approx(150.5) and case.tpot_ms == pytest.approx(25.0)


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"is_multinode": True}, "multinode or disaggregated"),
        ({"spec_decoding": "mtp"}, "speculative decoding mtp"),
        ({"model": "org/unknown-model"}, "model org/unknown-model is not embedded"),
        ({"framework": "atom"}, "framework atom"),
        ({"dcp_size": 2}, "context parallelism"),
    ],
)
def test_inferencex_rows_refused_with_a_reason(change, reason):
    (item,) = inferencex_rows.read_items(SAMPLE)
    with pytest.raises(ValueError, match=reason):
        inferencex_rows.to_case(dict(item, hw="h200", **change), "r", "test")


def test_inferencex_prefix_only_rows_and_dp_attention():
    (item,) = inferencex_rows.read_items(SAMPLE)
    row = {k: v for k, v in item.items() if k != "model"}
    row.update(hw="h200", tp=8, ep=8, dp_attention=True, median_ttft=0.2, median_tpot=0.03)
    case = inferencex_rows.to_case(row, "r", "test")
    assert case.model_name == "deepseek-r1" and case.parallel == Parallel(tp=8, ep=8, dp_attn=True)
    assert case.ttft_ms == pytest.approx(200.0)  # median_ttft wins over ttft_p50


def test_gather_inferencex_folder_records_hash_and_skips(tmp_path):
    (item,) = inferencex_rows.read_items(SAMPLE)
    (tmp_path / "a").mkdir()
    shutil.copy(SAMPLE, tmp_path / "a" / SAMPLE.name)  # MI300X: skipped
    rows = [dict(item, hw="h200", conc=c) for c in (4, 8)] + [dict(item, hw="b200", conc=4)]
    (tmp_path / "agg_bmk.json").write_text(json.dumps(rows))  # collect_results.py's list
    got = gather(Sources(inferencex=(tmp_path,)), "h200_sxm")
    assert sorted(c.concurrency for c in got.cases) == [4, 8]
    (record,) = got.sources
    assert record.rows_read == 4 and record.rows_used == 2 and len(record.sha256) == 64
    assert got.skipped == {"GPU mi300x has no servelab system": 1, "measured on b200_sxm, not h200_sxm": 1}
    again = gather(Sources(inferencex=(tmp_path,)), "h200_sxm")
    assert again.sources[0].sha256 == record.sha256
    (tmp_path / "agg_bmk.json").write_text(json.dumps(rows[:1]))
    assert gather(Sources(inferencex=(tmp_path,)), "h200_sxm").sources[0].sha256 != record.sha256


def test_gather_refuses_a_missing_path(tmp_path):
    with pytest.raises(ServelabError, match="no such file or directory"):
        gather(Sources(inferencex=(tmp_path / "missing",)), "h200_sxm")
    with pytest.raises(ServelabError, match="no such results store"):
        gather(Sources(store=tmp_path / "missing.db"), "h200_sxm")


@pytest.mark.parametrize(
    "argv, engine, model, parallel",
    [
        (
            ["vllm", "serve", "Qwen/Qwen3-30B-A3B", "--tensor-parallel-size", "2", "--max-num-seqs=64"],
            "vllm",
            "Qwen/Qwen3-30B-A3B",
            Parallel(tp=2),
        ),
        (
            ["vllm", "serve", "Qwen/Qwen3-30B-A3B", "-tp", "1", "-dp", "4", "--enable-expert-parallel"],
            "vllm",
            "Qwen/Qwen3-30B-A3B",
            Parallel(tp=4, ep=4, dp_attn=True),
        ),
        (
            ["python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-30B-A3B", "--tp", "8"]
            + ["--ep-size", "8", "--enable-dp-attention"],
            "sglang",
            "Qwen/Qwen3-30B-A3B",
            Parallel(tp=8, ep=8, dp_attn=True),
        ),
        (
            ["trtllm-serve", "Qwen/Qwen3-30B-A3B", "--tp_size", "4", "--ep_size", "2"],
            "trtllm",
            "Qwen/Qwen3-30B-A3B",
            Parallel(tp=4, ep=2),
        ),
    ],
)
def test_deployment_from_server_argv(argv, engine, model, parallel):
    assert engine_of_argv(argv) == engine
    assert model_of_argv(argv, engine) == model
    assert parallel_of_argv(argv, engine, is_moe=True) == parallel


def test_deployment_refusals_and_gpu_names():
    with pytest.raises(ValueError, match="not vllm serve"):
        engine_of_argv(["python", "server.py"])
    with pytest.raises(ValueError, match="replicas"):
        parallel_of_argv(["vllm", "serve", "m", "-dp", "2"], "vllm", is_moe=False)
    assert system_of_gpu("8x NVIDIA H200") == "h200_sxm"
    assert system_of_gpu("gb200-nv") == "gb200" and system_of_gpu("b200-dgxc") == "b200_sxm"
    with pytest.raises(ValueError, match="no servelab system"):
        system_of_gpu(None)


TRUTH = {
    "step_overhead_us": 2500.0,
    "per_seq_overhead_us": 30.0,
    "kernel_gap_us": 1.0,
    "eager_launch_us": 6.0,
}
CHECKPOINTS = {"meta-llama/Llama-3.1-8B-Instruct": 1, "Qwen/Qwen3-32B": 2}  # checkpoint -> tp


def synthetic_store(path: Path) -> None:
    """A store of measured vLLM bench runs on an H200 whose 'measurements' are servelab's own static
    predictions at TRUTH, plus rows a calibration must not use."""
    price = Pricer(load_system("h200_sxm"), "static")
    with Store.open(path) as store:
        for checkpoint, tp in CHECKPOINTS.items():
            argv = ["vllm", "serve", checkpoint, "--tensor-parallel-size", str(tp), "--api-key", "x"]
            run = store.start_run(checkpoint, Provenance(server_argv=argv, gpu=f"{tp}x NVIDIA H200"))
            model = load_model(checkpoint)
            for conc in (1, 4, 16, 64):
                for isl, osl in ((1024, 1024), (8192, 256)):
                    # priced, not compared: a measurement stands in (a Case holds positive times only)
                    case = Case("x", "x", "vllm", "?", model, Parallel(tp=tp), conc, isl, osl, 1.0, 1.0)
                    ttft, tpot = price(case, TRUTH)
                    config = f"random-{isl}-{osl}-conc-{conc}"
                    store.record_stage(run, "bench", "pass", config=config)
                    values = {"median_ttft_ms": ttft, "median_tpot_ms": tpot, "completed": 10.0}
                    values |= {"total_input_tokens": 10.0 * isl, "total_output_tokens": 10.0 * osl}
                    store.record_metrics(run, "bench", values, config=config)
            store.finish_run(run, "pass")
        twin = store.start_run("twin", Provenance(server_argv=argv, gpu="1x NVIDIA H200"))
        store.record_metrics(twin, "bench", {"median_ttft_ms": 1.0}, config="x-conc-1", source="predicted")
        bare = store.start_run("no argv", Provenance(gpu="1x NVIDIA H200"))
        store.record_metrics(bare, "bench", {"median_ttft_ms": 1.0}, config="x-conc-1")


def test_store_rows(tmp_path):
    synthetic_store(tmp_path / "results.db")
    got = gather(Sources(store=tmp_path / "results.db"), "h200_sxm")
    assert len(got.cases) == 16 and {c.family for c in got.cases} == {"llama", "qwen"}
    qwen = next(c for c in got.cases if c.family == "qwen" and c.concurrency == 16 and c.isl == 8192)
    assert qwen.parallel == Parallel(tp=2) and qwen.osl == 256 and qwen.system == "h200_sxm"
    assert got.skipped == {
        "predicted by servelab (a simulated twin), not measured": 1,
        "no server command recorded (the deployment is unknown)": 1,
    }


def test_store_reads_imported_inferencex_runs(tmp_path):
    (item,) = inferencex_rows.read_items(SAMPLE)
    file = tmp_path / "agg_h200.json"
    file.write_text(json.dumps(dict(item, hw="h200")))
    with Store.open(tmp_path / "results.db") as store:
        import_files(store, [file])
    got = gather(Sources(store=tmp_path / "results.db"), "h200_sxm")
    (case,) = got.cases
    assert case.engine == "sglang" and case.tpot_ms == pytest.approx(25.0)
    # the same row from the file and from the store counts once
    both = gather(Sources(store=tmp_path / "results.db", inferencex=(file,)), "h200_sxm")
    assert len(both.cases) == 1 and sum(both.skipped.values()) == 1


def test_calibration_from_store_recovers_the_parameters(tmp_path):
    """Rows made by the predictor at known engine parameters: the fit finds them again, cross-validates by
    family, writes a file with its sources, and that file prices estimates."""
    synthetic_store(tmp_path / "results.db")
    out = tmp_path / "cal.json"
    opts = EngineFitOptions(
        sources=Sources(store=tmp_path / "results.db"),
        mode="static",
        iters=150,
        out=out,
        argv=("--x",),
        aic=True,  # AIConfigurator has nothing to answer about store rows: said, not run
    )
    lines: list[str] = []
    doc = calibrate_engines(opts, echo=lines.append)
    assert any("nothing to ask AIConfigurator about" in line for line in lines)
    assert doc.aiconfigurator_same_rows is None
    fitted = (doc.engines | doc.fitted_not_kept)["vllm"].params
    assert math.isclose(fitted["step_overhead_us"], TRUTH["step_overhead_us"], rel_tol=0.1)
    assert doc.verdicts["vllm"].kept  # both families share the engine: the fit transfers
    assert set(doc.cv_by_family) == {"vllm/llama", "vllm/qwen"}
    assert doc.errors["fitted, leave one family out"].tpot.median < 0.05
    assert out.read_text() == doc.text()  # the file is the document, and reads back as it
    assert CalibrationDocument.read(out) == doc
    written = json.loads(out.read_text())
    assert written["calibration_format"] == 2
    (source,) = written["provenance"]["sources"]
    assert source["rows_used"] == 16 and len(source["sha256"]) == 64
    assert {"servelab_version", "git_sha", "date", "command"} <= set(written["provenance"])
    profile = engine_profile("vllm", calibration=out)
    assert profile.step_overhead_us == pytest.approx(fitted["step_overhead_us"])
    assert "cal.json" in profile.source and "results store" in profile.source


def test_calibrate_cli_json_and_out(tmp_path):
    synthetic_store(tmp_path / "results.db")
    out = tmp_path / "cal.json"
    args = ("calibrate", "engines", "--from-store", str(tmp_path / "results.db"), "--mode", "static")
    r = servelab(*args, "--iters", "40", "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout)  # stdout is the answer alone; progress went to stderr
    assert list(answer) == ["schema", "schema_version", "calibration"]
    doc = answer["calibration"]  # the document --out wrote
    assert doc["calibration_format"] == 2 and "fitted vllm on 16 rows" in r.stderr
    assert json.loads(out.read_text())["provenance"]["command"].endswith("--json")
    assert "--from-store" in doc["provenance"]["command"]


def test_calibrate_cli_without_usable_rows_is_one_line():
    r = servelab("calibrate", "engines", "--from-inferencex", str(SAMPLE), "--dry-run")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "no usable h200_sxm rows" in r.stderr and "mi300x" in r.stderr
