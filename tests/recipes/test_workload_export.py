"""`recipes show --as workload` for every shipped recipe: one perf-eval workload per server layout, each
importing back to the same vLLM server; SGLang recipes are refused in one line (workloads describe vLLM)."""

import sys

import pytest
import yaml

from servelab.cli.main import main
from servelab.recipes.engines.vllm import render as render_own_flags
from servelab.recipes.ladder import concurrencies
from servelab.recipes.recipe_store import parse_recipe_file
from servelab.recipes.workload import parse_workload, workload_to_recipe


def show_workload(monkeypatch, capsys, key):
    monkeypatch.setattr(sys, "argv", ["servelab", "recipes", "show", key, "--as", "workload"])
    with pytest.raises(SystemExit) as info:
        main()
    out, err = capsys.readouterr()
    return info.value.code, out, err


def _serve(launch) -> list[str]:
    """The serve flags a workload carries: without host, port and the per-job max-model-len."""
    args = launch.argv[3:]
    for flag in ("--host", "--port", "--max-model-len"):
        j = args.index(flag)
        del args[j : j + 2]
    return sorted(args)


SHIPPED = [
    "dsv4-fp4-b200-vllm",
    "dsv4f-fp8-b200-vllm",
    "dsv4f-fp8-h200-vllm",
    "dsv4f-fp8-h200-sglang",
    "dsr1-fp8-h200-sglang",
    "llama70b-fp8-h200-vllm",
    "gptoss-fp4-h200-vllm",
]


def test_the_list_is_every_shipped_recipe(shipped):
    assert sorted(SHIPPED) == sorted(shipped.recipes)


def layout(arm) -> tuple:
    return arm.tp_, arm.ep_, arm.pp_, arm.dp_attn_


@pytest.mark.parametrize("key", SHIPPED)
def test_show_as_workload(monkeypatch, capsys, shipped, key):
    recipe = shipped.recipes[key]
    code, out, err = show_workload(monkeypatch, capsys, key)
    if recipe.framework != "vllm":
        assert code == 2 and err.count("\n") == 1
        assert f"{key}: perf-eval workload files describe vLLM servers; this recipe uses sglang" in err
        return
    assert code == 0, err
    docs = list(yaml.safe_load_all(out))
    layouts = {layout(a): a for *_, a in recipe.arms()}
    assert len(docs) == len(layouts) and len({d["name"] for d in docs}) == len(docs)
    for doc, arm in zip(docs, layouts.values(), strict=True):
        w = parse_workload(doc, key)
        assert w.gpu and w.num_gpus == arm.tp_ * arm.pp_
        name, mapping = workload_to_recipe(w, shipped.runner_labels.label_for_gpu(w.gpu), recipe.image, key)
        back = parse_recipe_file({name: mapping}, key)[name]
        (back_arm,) = {layout(a): a for *_, a in back.arms()}.values()
        # A workload carries the recipe's own flags; InferenceX's launch profile (per concurrency) is not
        # exported.
        assert _serve(render_own_flags(back, back_arm, 4096, 0)) == _serve(
            render_own_flags(recipe, arm, 4096, 0)
        )
        same = [a for *_, a in recipe.arms() if layout(a) == layout(arm)]
        concs = sorted(c["max_concurrency"] for c in doc["vllm_bench"]["configs"])
        assert concs == sorted(c for a in same for c in concurrencies(a))
