"""Importing `vllm bench serve` and InferenceX result files: metrics with units, run names, no duplicates."""

from pathlib import Path

import pytest

from servelab.errors import ServelabError
from servelab.results.importers import import_files, inferencex_unit, record_bench
from servelab.results.store import Store


def test_vllm_result_becomes_a_run_with_its_metrics(tmp_path, write_json, vllm_result):
    path = write_json("vllm-inf-qps-concurrency16.json", vllm_result())
    with Store.open(tmp_path / "db" / "r.db") as store:
        [imp] = import_files(store, [Path(path)])
        assert imp.new and imp.name == "Qwen/Qwen3-0.6B"
        run = store.get_run(imp.run_id)
        assert run.outcome == "pass" and run.source_sha256 and run.provenance.servelab_version is None
        assert (run.started_at, run.ended_at) == ("2026-11-30T10:14:40", "2026-11-30T10:15:00")
        [stage] = store.stages(run.id)
        assert (stage.stage, stage.config, stage.repetition) == ("bench", "vllm-conc-16", 0)
        assert (tmp_path / "db" / stage.artifact).read_text() == Path(path).read_text()
        metrics = {m.name: (m.value, m.unit, m.source) for m in store.metrics(run.id)}
    assert metrics["median_ttft_ms"] == (110.0, "ms", "imported")
    assert metrics["output_throughput"] == (400.0, "tok/s", "imported")
    assert metrics["request_throughput"][1] == "req/s" and metrics["duration"][1] == "s"
    assert metrics["completed"] == (64.0, "requests", "imported")
    assert not {"max_concurrency", "num_prompts", "burstiness", "ttfts"} & metrics.keys()


def test_same_file_twice_adds_nothing(tmp_path, write_json, vllm_result):
    path = Path(write_json("a.json", vllm_result()))
    copy = tmp_path / "copy-of-a.json"
    copy.write_bytes(path.read_bytes())
    with Store.open(tmp_path / "r.db") as store:
        [first] = import_files(store, [path])
        [again, same_bytes] = import_files(store, [path, copy])
        assert not again.new and not same_bytes.new and again.run_id == same_bytes.run_id == first.run_id
        assert len(store.list_runs()) == 1


def test_unbounded_concurrency_and_a_name_given(tmp_path, write_json, vllm_result):
    path = write_json("a.json", vllm_result(max_concurrency=None, request_rate=4.0))
    with Store.open(tmp_path / "r.db") as store:
        [imp] = import_files(store, [Path(path)], name="baseline")
        assert imp.name == "baseline"
        assert store.stages(imp.run_id)[0].config == "vllm-rate-4.0"


def test_inferencex_result_and_collected_list(tmp_path, write_json, inferencex_result):
    single = write_json("agg_dsr1.json", inferencex_result())
    collected = write_json(
        "agg_all.json",
        [inferencex_result(conc=4), inferencex_result(conc=4), inferencex_result(conc=8, hw="b200")],
    )
    with Store.open(tmp_path / "r.db") as store:
        [imp] = import_files(store, [Path(single)])
        run = store.get_run(imp.run_id)
        assert run.name == "dsr1-h200-vllm-fp8" and run.started_at is run.ended_at is None  # no date in it
        assert run.provenance.image_digest == "vllm/vllm-openai@sha256:abc" and run.provenance.gpu == "h200"
        assert run.provenance.recipe_fingerprint == "f" * 64
        metrics = {m.name: (m.value, m.unit) for m in store.metrics(run.id)}
        assert metrics["median_ttft"] == (0.15, "s") and metrics["median_intvty"] == (40.0, "tok/s/user")
        assert metrics["tput_per_gpu"] == (1875.0, "tok/s/gpu")
        assert not {"conc", "tp", "isl", "osl", "ep"} & metrics.keys()
        assert store.stages(run.id)[0].config == "tp8-ep1-isl1024-osl1024-conc-64"

        h200, b200 = import_files(store, [Path(collected)])  # one run per model-hw-framework-precision
        assert (h200.name, b200.name) == ("dsr1-h200-vllm-fp8", "dsr1-b200-vllm-fp8")
        assert [(s.config, s.repetition) for s in store.stages(h200.run_id)] == [
            ("tp8-ep1-isl1024-osl1024-conc-4", 0),
            ("tp8-ep1-isl1024-osl1024-conc-4", 1),
        ]
        assert all(not i.new for i in import_files(store, [Path(collected)]))


def test_multinode_layouts_with_equal_gpu_counts_stay_apart(tmp_path, write_json, inferencex_result):
    """Fields as upstream's utils/process_result.py writes them for a disaggregated result: two layouts of
    8 prefill + 16 decode GPUs are two configs; the same layout twice is two repetitions of one."""

    def disagg(prefill_workers, prefill_tp, decode_tp, decode_dpa, **more):
        row = inferencex_result(conc=256)
        for key in ("tp", "pp", "dcp_size", "pcp_size", "ep", "dp_attention"):
            row.pop(key)
        return row | more | {
            "is_multinode": True, "disagg": True, "num_prefill_gpu": 8, "num_decode_gpu": 16,
            "prefill_num_workers": prefill_workers, "prefill_tp": prefill_tp, "prefill_ep": prefill_tp,
            "prefill_pp": 1, "prefill_dcp_size": 1, "prefill_pcp_size": 1, "prefill_dp_attention": "false",
            "decode_num_workers": 16 // decode_tp, "decode_tp": decode_tp, "decode_ep": decode_tp,
            "decode_pp": 1, "decode_dcp_size": 1, "decode_pcp_size": 1, "decode_dp_attention": decode_dpa,
        }  # fmt: skip

    rows = [disagg(2, 4, 16, "true"), disagg(1, 8, 8, "false"), disagg(2, 4, 16, "true")]
    rows.append(disagg(2, 4, 16, "true", prefill_hw="gb200", decode_hw="gb300"))
    path = write_json("disagg.json", rows)
    with Store.open(tmp_path / "r.db") as store:
        [imp] = import_files(store, [Path(path)])
        got = sorted((s.config, s.repetition) for s in store.stages(imp.run_id))
    base = "isl1024-osl1024-conc-256"
    assert got == sorted(
        [
            (f"p8-2x-tp4-ep4-d16-1x-tp16-ep16-dpa-{base}", 0),
            (f"p8-1x-tp8-ep8-d16-2x-tp8-ep8-{base}", 0),
            (f"p8-2x-tp4-ep4-d16-1x-tp16-ep16-dpa-{base}", 1),
            (f"p8-2x-tp4-ep4-gb200-d16-1x-tp16-ep16-dpa-gb300-{base}", 0),
        ]
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"model_id": "m"}', "not a known result file; expected a `vllm bench serve` result JSON"),
        ("{not json", "not JSON"),
        ("[]", "an empty list"),
        ('{"completed": 1, "duration": 2, "max_concurrency": "many"}', "malformed result"),
    ],
)
def test_bad_files_name_the_file_and_import_nothing(tmp_path, write_json, vllm_result, content, message):
    good = write_json("good.json", vllm_result())
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with Store.open(tmp_path / "r.db") as store:
        with pytest.raises(ServelabError, match=message) as e:
            import_files(store, [Path(good), bad])
        assert str(e.value).startswith(f"{bad}: ") and "\n" not in str(e.value)
        assert store.list_runs() == []


def test_record_bench_result_of_a_run(tmp_path, vllm_result):
    with Store.open(tmp_path / "r.db") as store:
        run_id = store.start_run("qwen")
        for rep in range(2):
            config = record_bench(
                store, run_id, vllm_result(label="random"), repetition=rep, artifact="b.json"
            )
        store.finish_run(run_id, "pass")
        assert config == "random-conc-16"
        assert store.stages(run_id)[0].ended_at.endswith("+00:00")  # measured here: the local zone is known
        assert [(s.config, s.repetition, s.status) for s in store.stages(run_id)] == [
            ("random-conc-16", 0, "pass"),
            ("random-conc-16", 1, "pass"),
        ]
        assert {m.source for m in store.metrics(run_id)} == {"measured"}


def test_inferencex_units():
    assert [
        inferencex_unit(n)
        for n in ("p99_e2el", "mean_client_send_lag", "p99_intvty", "input_tput_per_gpu", "avg_power_w")
    ] == ["s", "s", "tok/s/user", "tok/s/gpu", "W"]
    assert [inferencex_unit(n) for n in ("total_gpu_energy_j", "joules_per_output_token")] == ["J", "J/token"]
