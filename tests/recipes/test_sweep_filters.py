"""Concurrency grammar, sweep filters, modes, eval marking and trimming."""

import pytest

from servelab.errors import ServelabError
from servelab.recipes.filters import Filters
from servelab.recipes.inferencex import SearchSpaceEntry
from servelab.recipes.ladder import concurrencies, ladder, parse_seq_len, seq_len_name
from servelab.recipes.sweep import expand


@pytest.mark.parametrize(
    "start,end,step,expected",
    [
        (3, 20, 2, [3, 6, 12, 20]),  # InferenceX's example: last value clamped to conc-end
        (1, 64, 2, [1, 2, 4, 8, 16, 32, 64]),
        (64, 1024, 2, [64, 128, 256, 512, 1024]),
        (5, 5, 2, [5]),
        (4, 100, 4, [4, 16, 64, 100]),
        (128, 256, 2, [128, 256]),
    ],
)
def test_ladder(start, end, step, expected):
    assert ladder(start, end, step) == expected


def test_ladder_rejects_bad_ranges():
    with pytest.raises(ServelabError, match="conc-start <= conc-end"):
        ladder(8, 4)
    with pytest.raises(ServelabError, match="step size"):
        ladder(1, 8, 1)


def test_conc_list_is_sorted_and_deduplicated():
    arm = SearchSpaceEntry(tp=8, conc_list=[32, 4, 32, 16])
    assert concurrencies(arm) == [4, 16, 32]


def test_seq_len_names():
    # InferenceX names the pairs it sweeps and writes any other pair ISL_OSL in exp-names
    assert seq_len_name(8192, 1024) == "8k1k" and seq_len_name(1024, 1024) == "1k1k"
    assert seq_len_name(1024, 8192) == "1024_8192"
    assert parse_seq_len("8k1k") == (8192, 1024) and parse_seq_len("1k8k") == (1024, 8192)
    assert parse_seq_len("1000_100") == (1000, 100)
    with pytest.raises(ServelabError, match="expected a name such as 1k1k"):
        parse_seq_len("1000100")


def rows(jobs):
    return [(j.key, j.row["tp"], j.row["ep"], j.row["dp-attn"], j.row["conc"]) for j in jobs]


def test_first_row_matches_inferencex_row(shipped):
    job = expand(shipped, ["dsv4-fp4-b200-vllm"])[0]
    assert job.row == {
        "image": "vllm/vllm-openai:v0.25.0",
        "model": "deepseek-ai/DeepSeek-V4-Pro",
        "model-prefix": "dsv4",
        "precision": "fp4",
        "framework": "vllm",
        "runner": "cluster:b200-dgxc",
        "isl": 8192,
        "osl": 1024,
        "tp": 8,
        "pp": 1,
        "dcp-size": 1,
        "pcp-size": 1,
        "conc": 1,
        "max-model-len": 9472,
        "ep": 1,
        "dp-attn": False,
        "spec-decoding": "none",
        "exp-name": "dsv4_8k1k",
        "disagg": False,
        "run-eval": False,
    }


def test_keys_by_glob(shipped):
    keys = {j.key for j in expand(shipped, ["*-b200-*"])}
    assert keys == {"dsv4-fp4-b200-vllm", "dsv4f-fp8-b200-vllm"}
    assert {j.key for j in expand(shipped, ["dsv4f-*", "dsr1-*"])} == {
        "dsv4f-fp8-b200-vllm",
        "dsv4f-fp8-h200-vllm",
        "dsv4f-fp8-h200-sglang",
        "dsr1-fp8-h200-sglang",
    }


@pytest.mark.parametrize(
    "field,value,check",
    [
        ("model_prefix", ["llama70b"], lambda j: j.row["model-prefix"] == "llama70b"),
        ("precision", ["fp4"], lambda j: j.row["precision"] == "fp4"),
        ("framework", ["sglang"], lambda j: j.row["framework"] == "sglang"),
        ("runner_type", ["cluster:b200-*"], lambda j: j.row["runner"].startswith("cluster:b200-")),
        ("seq_lens", ["1k1k"], lambda j: (j.row["isl"], j.row["osl"]) == (1024, 1024)),
        ("max_tp", 2, lambda j: j.row["tp"] <= 2),
    ],
)
def test_filters(shipped, field, value, check):
    everything = expand(shipped)
    jobs = expand(shipped, [], Filters(**{field: value}))
    assert jobs and len(jobs) < len(everything)
    assert all(check(j) for j in jobs)
    # and nothing that passes the filter was dropped
    assert len(jobs) == sum(1 for j in everything if check(j))


def test_node_type_filter(shipped):
    assert len(expand(shipped, [], Filters(node_type="single-node"))) == len(expand(shipped))
    assert expand(shipped, [], Filters(node_type="multi-node")) == []  # no multinode recipes are shipped


def test_test_config_mode(shipped):
    with pytest.raises(ServelabError, match="needs config keys"):
        expand(shipped, [], Filters(mode="test-config"))
    with pytest.raises(ServelabError, match="matches nothing.*did you mean"):
        expand(shipped, ["dsv4-fp4-b200-vlm"], Filters(mode="test-config"))
    # --conc keeps the requested values each arm has (the DP arm runs 64..256: none of them)
    jobs = expand(shipped, ["dsv4f-fp8-b200-vllm"], Filters(mode="test-config", conc=[4, 32]))
    assert rows(jobs) == [
        ("dsv4f-fp8-b200-vllm", 8, 8, False, 4),
        ("dsv4f-fp8-b200-vllm", 8, 8, False, 32),
    ]
    # full-sweep mode refuses keys that match nothing too, and explicit concurrencies
    with pytest.raises(ServelabError, match="matches nothing"):
        expand(shipped, ["nothing-*"])
    with pytest.raises(ValueError, match="explicit concurrencies"):
        Filters(conc=[4])


def test_lowest_conc_trims_each_arm(shipped):
    jobs = expand(shipped, ["dsv4-fp4-b200-vllm"], Filters(lowest_conc=True))
    assert rows(jobs) == [
        ("dsv4-fp4-b200-vllm", 8, 1, False, 1),
        ("dsv4-fp4-b200-vllm", 8, 8, False, 128),
        ("dsv4-fp4-b200-vllm", 8, 8, True, 64),
    ]


def test_step_size(shipped):
    jobs = expand(shipped, ["dsv4f-fp8-b200-vllm"], Filters(step_size=4))
    assert [j.row["conc"] for j in jobs] == [1, 4, 16, 64, 64, 256]


def marked(jobs):
    return sorted(
        (j.row["tp"], j.row["ep"], j.row["dp-attn"], j.row["conc"]) for j in jobs if j.row["run-eval"]
    )


def test_eval_marking(shipped):
    jobs = expand(shipped, ["dsv4-fp4-b200-vllm"])
    # non-DP group concs >= 16: 16, 32, 64 (tp8) and 128, 256 (ep8): highest 256, median 64.
    # DP group: 64..1024: highest 1024, median 256.
    assert marked(jobs) == [(8, 1, False, 64), (8, 8, False, 256), (8, 8, True, 256), (8, 8, True, 1024)]
    ev = next(j for j in jobs if j.row["run-eval"])
    assert ev.evals[0].task == "gsm8k" and ev.evals[0].num_fewshot == 5
    assert ev.evals[0].argv()[:2] == ["lm_eval", "--model"] and "gsm8k" in ev.evals[0].argv()


def test_eval_marking_only_8k1k(shipped):
    jobs = expand(shipped, ["llama70b-fp8-h200-vllm"])
    assert all((j.row["isl"], j.row["osl"]) == (8192, 1024) for j in jobs if j.row["run-eval"])
    assert all(j.row["conc"] >= 16 for j in jobs if j.row["run-eval"])
    # one group (all arms share model/runner/framework/precision/spec/dp-attn): every arm's row at the
    # group's highest (256, tp8 only) and median (64, every arm) concurrency
    assert sorted((j.row["tp"], j.row["conc"]) for j in jobs if j.row["run-eval"]) == [
        (2, 64),
        (4, 64),
        (8, 64),
        (8, 256),
    ]


def test_evals_only_all_evals_no_evals(shipped):
    only = expand(shipped, ["dsv4-fp4-b200-vllm"], Filters(evals_only=True))
    assert len(only) == 4 and all(j.row["run-eval"] for j in only)
    every = expand(shipped, ["dsv4-fp4-b200-vllm"], Filters(all_evals=True))
    assert all(j.row["run-eval"] for j in every)
    none = expand(shipped, ["dsv4-fp4-b200-vllm"], Filters(no_evals=True))
    assert not any(j.row["run-eval"] for j in none)


def test_eval_marking_does_not_change_fingerprints(shipped):
    a = [j.fingerprint for j in expand(shipped, ["dsv4-fp4-b200-vllm"])]
    b = [j.fingerprint for j in expand(shipped, ["dsv4-fp4-b200-vllm"], Filters(no_evals=True))]
    assert a == b
