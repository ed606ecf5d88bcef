"""Append-only changelog entries: the cases of InferenceX's utils/test_process_changelog.py for its
append_only_delta, validate_append_only_scope and recipe_fingerprint, held against servelab's
`added_points`, `check_scope` and `recipe_fingerprint` on the same rows and configs."""

import pytest

from servelab.errors import ServelabError
from servelab.recipes.changelog import added_points, check_scope, recipe_fingerprint


def row(conc, *, image="vllm/vllm-openai:v0.16.0", tp=8, duration=None) -> dict:
    """A fixed-seq-len single-node matrix row, as InferenceX's tests build it."""
    r = {
        "image": image,
        "model": "deepseek-ai/DeepSeek-V4-Pro",
        "model-prefix": "dsv4",
        "precision": "fp4",
        "framework": "vllm",
        "spec-decoding": "mtp",
        "runner": "cluster:b300-nv",
        "isl": 8192,
        "osl": 1024,
        "tp": tp,
        "pp": 1,
        "dcp-size": 1,
        "pcp-size": 1,
        "ep": 8,
        "dp-attn": True,
        "conc": conc,
        "max-model-len": 10240,
        "exp-name": f"dsv4_tp{tp}_conc{conc}",
        "disagg": False,
        "run-eval": False,
        "eval-only": False,
    }
    return r | ({"duration": duration} if duration is not None else {})


MULTINODE = {
    "image": "lmsysorg/sglang:v0.5.7",
    "model": "deepseek-ai/DeepSeek-V4-Pro",
    "model-prefix": "dsv4",
    "precision": "fp4",
    "framework": "dynamo-sglang",
    "conc": [8, 16],
    "exp-name": "dsv4-disagg",
}


def delta(base: list[dict], head: list[dict]) -> list[dict]:
    return [{**head[i], "conc": conc} for i, conc in added_points(base, head)]


def test_keeps_only_new_single_node_points():
    base = [row(4), row(8)]
    assert [r["conc"] for r in delta(base, [*base, row(12)])] == [12]


def test_slices_multinode_concurrency_lists():
    assert delta([MULTINODE], [{**MULTINODE, "conc": [8, 16, 24]}]) == [{**MULTINODE, "conc": [24]}]


def test_deduplicates_new_points():
    assert [r["conc"] for r in delta([row(4)], [row(4), row(8), row(8)])] == [8]
    assert delta([MULTINODE], [{**MULTINODE, "conc": [8, 16, 24, 24]}]) == [{**MULTINODE, "conc": [24]}]


def test_new_parallelism_with_its_points():
    base = [row(1, tp=4), row(4, tp=4), row(8, tp=4)]
    assert [(r["tp"], r["conc"]) for r in delta(base, [*base, row(12), row(16)])] == [(8, 12), (8, 16)]


def test_any_new_recipe_while_the_old_one_stays():
    base = [row(4, duration=3600)]
    assert [(r["duration"], r["conc"]) for r in delta(base, [*base, row(6, duration=300)])] == [(300, 6)]


@pytest.mark.parametrize(
    "base,head,message",
    [
        (
            [row(4)],
            [row(4, image="vllm/vllm-openai:v0.16.1"), row(8, image="vllm/vllm-openai:v0.16.1")],
            "remove or modify",
        ),
        ([row(4), row(8, tp=4)], [row(4)], "remove or modify"),
        ([row(4, duration=3600)], [row(4, duration=300)], "remove or modify"),
        ([row(4), row(8)], [row(8), row(12)], "may not remove concurrencies [4]"),
        ([row(4)], [row(4), row(8, image="vllm/vllm-openai:v0.16.1", tp=16)], "one unchanged image"),
        ([row(4)], [row(4)], "added no points"),
        ([], [row(4)], "needs an existing curve"),
    ],
)
def test_refused_deltas(base, head, message):
    with pytest.raises(ServelabError, match=message.replace("[", r"\[").replace("]", r"\]")):
        added_points(base, head)


def test_recipe_fingerprint_ignores_the_point_and_sees_the_recipe():
    assert recipe_fingerprint(row(4)) == recipe_fingerprint(row(16))
    variants = (row(4, tp=4, duration=3600), row(4, tp=8, duration=3600), row(4, tp=4, duration=300))
    assert len({recipe_fingerprint(r) for r in variants}) == 3


def config(scenarios: dict, **top) -> dict:
    return {"test-config": {**top, "scenarios": scenarios}}


AGENTIC = {"agentic-coding": {"search-space": [{"tp": 4, "conc-list": [1]}]}}
FIXED = {"fixed-seq-len": {"search-space": [{"tp": 4, "conc-list": [1]}]}}


def test_scope_leaves_changes_inside_selected_scenarios_to_the_rows():
    base = config({"agentic-coding": {"duration": 3600, "search-space": [{"tp": 8, "conc-list": [1, 4]}]}})
    head = config({"agentic-coding": {"duration": 1800, "search-space": [{"tp": 8, "conc-list": [1, 4, 8]}]}})
    check_scope(base, head, {"test-config": {"agentic-coding"}})
    ranged = config({"fixed-seq-len": {"search-space": [{"tp": 8, "conc-start": 4, "conc-end": 64}]}})
    listed = config({"fixed-seq-len": {"search-space": [{"tp": 8, "conc-list": [4, 16, 32, 64]}]}})
    check_scope(ranged, listed, {"test-config": {"fixed-seq-len"}})


def test_scope_refuses_config_wide_change_that_reaches_an_unselected_scenario():
    base = config({**FIXED, **AGENTIC}, router={"name": "dynamo-router", "version": "0.8.1"})
    head = config({**FIXED, **AGENTIC}, router={"name": "dynamo-router", "version": "0.8.2"})
    with pytest.raises(ServelabError, match="config-wide fields"):
        check_scope(base, head, {"test-config": {"fixed-seq-len"}})


def test_scope_refuses_change_to_an_unselected_scenario():
    head = config({**FIXED, "agentic-coding": {"search-space": [{"tp": 4, "conc-list": [1, 4]}]}})
    with pytest.raises(ServelabError, match="outside its scope"):
        check_scope(config({**FIXED, **AGENTIC}), head, {"test-config": {"fixed-seq-len"}})


def test_scope_refuses_unselected_keys_and_missing_ones():
    base, head = config(FIXED), config(FIXED)
    head["other"] = config(AGENTIC)["test-config"]
    with pytest.raises(ServelabError, match=r"do not select: \['other'\]"):
        check_scope(base, head, {"test-config": {"fixed-seq-len"}})
    with pytest.raises(ServelabError, match="missing"):
        check_scope({}, config(FIXED), {"test-config": {"fixed-seq-len"}})
