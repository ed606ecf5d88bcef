"""The upstream perf-eval workload files (pinned in tests/data/perf-eval, see UPSTREAM.md) load exactly as
upstream writes them, every field lands where upstream's parser puts it, and `servelab recipes import` takes
each one, saying what the recipe does not carry."""

import copy
import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from servelab.cli.main import main
from servelab.engines.vllm.grammar import GRAMMAR as VLLM
from servelab.errors import ServelabError
from servelab.recipes.engines import render
from servelab.recipes.gpu_profiles import PERF_EVAL_PROFILES
from servelab.recipes.importers import load_any
from servelab.recipes.job import EvalSpec, Job
from servelab.recipes.recipe_store import DATA_DIR, open_store, parse_recipe_file
from servelab.recipes.sweep import expand
from servelab.recipes.workload import (
    PerfEvalWorkload,
    parse_workload,
    recipe_to_workload,
    recipe_to_workloads,
    split_serve_args,
)
from servelab.run.plan import from_job

WORKLOADS = Path(__file__).parent.parent / "data" / "perf-eval" / "workloads"
GPU_PROFILES = WORKLOADS.parent / "lib" / "gpu_profiles.yaml"
FILES = sorted(WORKLOADS.glob("*.yaml"))


def raw(stem: str) -> dict:
    return yaml.safe_load((WORKLOADS / f"{stem}.yaml").read_text())


def load(stem: str) -> PerfEvalWorkload:
    return parse_workload(raw(stem), f"{stem}.yaml")


def cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["servelab", *args])
    with pytest.raises(SystemExit) as info:
        main()
    out, err = capsys.readouterr()
    return info.value.code, out, err


def notes(out: str) -> list[str]:
    return [line.removeprefix("# note: ") for line in out.splitlines() if line.startswith("# note: ")]


def test_the_pinned_copy_is_there():
    assert len(FILES) >= 21


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_upstream_file_loads_whole(path):
    data = yaml.safe_load(path.read_text())
    w = parse_workload(data, path.name)
    # Nothing is dropped: the model dumps back to the file, env values as upstream exports them (str()).
    expected = copy.deepcopy(data)
    expected["vllm"]["env"] = {k: str(v) for k, v in data["vllm"].get("env", {}).items()}
    if not data["vllm"].get("env"):
        expected["vllm"].pop("env", None)
    assert w.dump() == expected


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_upstream_file_imports(monkeypatch, capsys, path):
    code, out, err = cli(monkeypatch, capsys, "recipes", "import", str(path))
    assert code == 0, err
    recipes = yaml.safe_load(out)
    assert notes(out), "an import always says what it did"
    w = parse_workload(yaml.safe_load(path.read_text()), path.name)
    if recipes:
        assert list(recipes) == [w.name] and recipes[w.name]["model"] == w.vllm.model
    else:
        assert any(n.startswith("no recipe: ") for n in notes(out))


def test_deepseek_v4_pro_h200_fields():
    w = load("deepseek_v4_pro_5_h200")
    assert (w.num_gpus, w.nightly, w.timeout_in_minutes, w.bench_only) == (8, True, 180, False)
    # bfcl: a per-category case cap; upstream's defaults for what the file leaves out
    assert w.bfcl.max_test_cases == {"multi_turn": 240} and w.bfcl.num_threads == 16
    assert w.bfcl.cases_for("multi_turn") == 240 and w.bfcl.cases_for("simple_python") is None
    assert (w.bfcl.temperature, w.bfcl.maximum_step_limit) == (0.001, 10)
    # lm_eval: workload-level model_args, overridden per task
    (task,) = w.lm_eval.tasks
    assert w.lm_eval.model_args.tokenizer_backend is None and w.lm_eval.model_args.timeout == 6000
    assert w.lm_eval.args_for(task) == {
        "tokenized_requests": False,
        "tokenizer_backend": None,
        "timeout": 6000,
        "num_concurrent": 64,
        "max_length": 32768,
        "max_gen_toks": 8192,
    }
    # vllm_bench: backend, repetitions and extra bench args
    (cfg,) = w.vllm_bench.configs
    assert (cfg.backend, cfg.dataset, cfg.repetitions) == ("openai", "random", 3)
    assert cfg.runs() == [("8k-in-1k-out-conc-128", 512, 128)]
    assert cfg.extra_argv() == ["--num-warmups", "128"]


def test_deepseek_v4_pro_h200_recipe(shipped):
    recipes, said = load_any(WORKLOADS / "deepseek_v4_pro_5_h200.yaml", shipped.runner_labels)
    recipe = recipes["deepseek_v4_pro-h200"]
    # inline JSON in serve_args arrives whole, as upstream's word-split passes it to vLLM
    assert recipe.engine.compilation_config == {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"}
    (arm,) = [a for *_, a in recipe.arms()]
    assert (arm.tp_, arm.ep_, arm.dp_attn_, arm.conc_list) == (8, 8, True, [128])
    (lm, bfcl) = recipe.evals
    assert (lm.num_concurrent, lm.max_gen_toks, bfcl.num_threads) == (64, 8192, 16)
    assert "not carried into the recipe: timeout_in_minutes=180" in said
    assert "not carried into the recipe: bfcl.max_test_cases={'multi_turn': 240}" in said
    # lm_eval's further model_args are carried, the workload's defaults merged under the task's as upstream
    assert lm.model_args == {
        "tokenized_requests": False,
        "tokenizer_backend": None,
        "timeout": 6000,
        "max_length": 32768,
    }
    assert not any("lm_eval model_args" in n for n in said)
    assert (
        "not carried into the recipe: vllm_bench.configs[0] (8k-in-1k-out): backend=openai, repetitions=3, "
        "args={'num_warmups': 128}" in said
    )


def test_deepseek_v4_flash_has_no_recipe_but_loads_whole(shipped):
    w = load("deepseek_v4_flash_b200")
    assert w.vllm_bench is None and w.bfcl.max_test_cases is None
    assert w.vllm.env["CUDA_HOME"] == "/usr/local/cuda"
    assert "--data-parallel-size" in split_serve_args(w.vllm.serve_args, "w")
    recipes, said = load_any(WORKLOADS / "deepseek_v4_flash_b200.yaml", shipped.runner_labels)
    assert recipes == {}
    assert said[-1] == (
        "no recipe: data parallel 4 x tensor parallel 2 has no recipe topology; no vllm_bench config of the "
        "random dataset (a recipe needs a seq-len block); the workload file is what servelab run reads"
    )


def test_list_valued_num_prompts_and_max_concurrency(shipped):
    w = load("qwen3_5_mi355x")
    (cfg,) = w.vllm_bench.configs
    assert cfg.runs() == [("8k-in-1k-out-conc-1", 10, 1), ("8k-in-1k-out-conc-128", 512, 128)]
    assert w.vllm.env == {"VLLM_ROCM_USE_AITER": "1"}  # an int in the file, a string as upstream exports it
    recipes, said = load_any(WORKLOADS / "qwen3_5_mi355x.yaml", shipped.runner_labels)
    seqs = recipes["qwen3_5-mi355x"].scenarios.fixed_seq_len
    # a seq-len block holds one num-prompts, so each concurrency gets its own
    assert [(s.num_prompts, s.search_space[0].conc_list) for s in seqs] == [(10, [1]), (512, [128])]
    # upstream's default for a workload naming no image: the profile's ROCm repository, nightly tag
    assert recipes["qwen3_5-mi355x"].image == "vllm/vllm-openai-rocm:nightly"
    assert recipes["qwen3_5-mi355x"].runner == shipped.runner_labels.label_for_gpu("MI355X")


def test_speed_bench_fields():
    (cfg,) = load("deepseek_v4_pro_mi355x").vllm_bench.configs
    assert (cfg.dataset, cfg.speed_bench_dataset_subset, cfg.speed_bench_category) == (
        "random",
        "throughput_8k",
        "low_entropy",
    )
    assert cfg.repetitions == 1  # upstream's default


def test_workload_image_and_override(shipped):
    path = WORKLOADS / "minimax_m3_b200.yaml"
    recipes, said = load_any(path, shipped.runner_labels)
    assert recipes["minimax_m3-b200"].image == "vllm/vllm-openai:minimax-m3"
    assert not any("names no image" in n for n in said)
    recipes, _ = load_any(path, shipped.runner_labels, image="vllm/vllm-openai:v0.30.0")
    assert recipes["minimax_m3-b200"].image == "vllm/vllm-openai:v0.30.0"  # --image wins, like VLLM_IMAGE


def test_dotted_speculative_config_becomes_mtp(shipped):
    recipes, _ = load_any(WORKLOADS / "glm_5_1_h200.yaml", shipped.runner_labels)
    recipe = recipes["glm_5_1-h200"]
    assert recipe.engine.speculative_config == {"method": "mtp", "num_speculative_tokens": 3}
    (arm,) = [a for *_, a in recipe.arms()]
    argv = render(recipe, arm, 4096).argv
    assert argv[argv.index("--speculative-config") + 1] == '{"method":"mtp","num_speculative_tokens":3}'


def test_max_model_len_auto_is_kept(shipped):
    recipes, _ = load_any(WORKLOADS / "qwen3_5_b200.yaml", shipped.runner_labels)
    assert recipes["qwen3_5-b200"].engine.extra_args == ["--language-model-only", "--max-model-len", "auto"]


def test_reserved_gpus_beyond_the_server_are_noted(shipped):
    _, said = load_any(WORKLOADS / "gemma_4_31b_it_h200.yaml", shipped.runner_labels)
    assert "not carried into the recipe: num_gpus=8 (the server uses 1)" in said


def test_env_values_are_stringified_like_upstream():
    data = raw("gpt_oss_120b_b200")
    data["vllm"]["env"] |= {"FLAG_ON": True, "RATIO": 0.5}
    env = parse_workload(data, "w.yaml").vllm.env
    assert env == {"VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8": "1", "FLAG_ON": "True", "RATIO": "0.5"}


def test_serve_args_split_like_upstream_and_servelab_quoting():
    assert split_serve_args('--compilation-config {"mode":0} -tp 2', "w") == [
        "--compilation-config",
        '{"mode":0}',
        "-tp",
        "2",
    ]
    # a word that starts with a quote is shell-quoted (servelab's export writes values with spaces so)
    assert split_serve_args("--served-model-name 'a b' --x", "w") == ["--served-model-name", "a b", "--x"]


TYPOS = [
    (lambda d: d.update(timeout_in_minute=60), "timeout_in_minute"),
    (lambda d: d["vllm"].update(imag="x"), "vllm.imag"),
    (lambda d: d["lm_eval"]["model_args"].update(max_lenght=1), "lm_eval.model_args.max_lenght"),
    (lambda d: d["lm_eval"]["tasks"][0]["model_args"].update(num_concurent=1), "num_concurent"),
    (lambda d: d["bfcl"].update(max_test_case=5), "bfcl.max_test_case"),
    (lambda d: d["vllm_bench"]["configs"][0].update(repetition=3), "vllm_bench.configs.0.repetition"),
]


@pytest.mark.parametrize("mutate,field", TYPOS, ids=[f for _, f in TYPOS])
def test_a_typo_is_refused_in_one_line(monkeypatch, capsys, tmp_path, mutate, field):
    data = raw("deepseek_v4_pro_5_h200")
    mutate(data)
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(data))
    code, out, err = cli(monkeypatch, capsys, "recipes", "import", str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and str(path) in err
    assert f"{field}: Extra inputs are not permitted" in err


BAD_VALUES = [
    (lambda c: c.update(repetitions=2), "repetitions 2: must be odd"),
    (lambda c: c.update(num_prompts=[1, 2]), "num_prompts may be a list only when max_concurrency is one"),
    (lambda c: c.update(max_concurrency=[1, 2, 4], num_prompts=[1, 2]), "num_prompts has 2 values"),
    (lambda c: c.update(args={"num_prompts": 5}), "args: --num-prompts is set from the config's own fields"),
    (lambda c: c.update(args={"num_warmups": 1, "--num-warmups": 2}), "args: --num-warmups is given twice"),
    (lambda c: c.update(dataset="sharegpt"), "dataset: Input should be 'random' or 'speed_bench'"),
]


@pytest.mark.parametrize("mutate,message", BAD_VALUES, ids=[m for _, m in BAD_VALUES])
def test_bench_values_upstream_refuses(mutate, message):
    data = raw("deepseek_v4_pro_5_h200")
    mutate(data["vllm_bench"]["configs"][0])
    with pytest.raises(ServelabError, match="w.yaml: vllm_bench.configs.0") as info:
        parse_workload(data, "w.yaml")
    assert message in str(info.value)


def test_bfcl_categories_are_checked():
    data = raw("deepseek_v4_pro_5_h200")
    data["bfcl"]["max_test_cases"] = {"multi_turns": 10}
    with pytest.raises(ServelabError, match="bfcl.max_test_cases"):
        parse_workload(data, "w.yaml")
    data = raw("deepseek_v4_pro_5_h200")
    data["bfcl"]["test_categories"].append("simple_pyhton")
    with pytest.raises(ServelabError, match="bfcl.test_categories.5"):
        parse_workload(data, "w.yaml")


def test_a_workload_with_nothing_to_run_is_refused():
    data = raw("deepseek_v4_pro_5_h200")
    for block in ("lm_eval", "bfcl", "vllm_bench"):
        del data[block]
    with pytest.raises(ServelabError, match="at least one of lm_eval, vllm_bench or bfcl"):
        parse_workload(data, "w.yaml")


def test_export_writes_serve_args_as_upstream_splits_them(shipped):
    recipe = shipped.recipes["dsv4-fp4-b200-vllm"]
    for doc in recipe_to_workloads("dsv4-fp4-b200-vllm", recipe):
        words = doc["vllm"]["serve_args"].split()  # what `vllm serve MODEL $serve_args` passes on
        cc = '{"cudagraph_mode":"FULL_AND_PIECEWISE","custom_ops":["all"]}'
        assert words[words.index("--compilation-config") + 1] == cc


HOSTILE = [
    (lambda d: d.update(name="x;$(reboot)"), "name: 'x;$(reboot)' is not a name"),
    (lambda d: d["vllm"]["env"].update({"A-B": "1"}), "vllm.env.A-B"),
    (lambda d: d["vllm"].update(image="img\nrm"), "vllm.image"),
    (lambda d: d["vllm_bench"]["configs"][0].update(name="../x"), "vllm_bench.configs.0.name"),
    (lambda d: d["vllm_bench"]["configs"][0]["args"].update(seed="1\n2"), "control character"),
]


@pytest.mark.parametrize("mutate,message", HOSTILE, ids=[m for _, m in HOSTILE])
def test_values_that_reach_names_and_argv_are_checked(mutate, message):
    data = raw("deepseek_v4_pro_5_h200")
    mutate(data)
    with pytest.raises(ServelabError) as info:
        parse_workload(data, "w.yaml")
    assert message in str(info.value) and "\n" not in str(info.value).replace("\\n", "")


def test_servelabs_record_of_the_gpu_profiles_is_upstreams():
    """Workloads outside a perf-eval checkout get PERF_EVAL_PROFILES; it says what the pinned file says."""
    assert PERF_EVAL_PROFILES == yaml.safe_load(GPU_PROFILES.read_text())


def test_an_unknown_gpu_in_a_checkout_is_refused_as_upstream_refuses_it(monkeypatch, capsys, tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "gpu_profiles.yaml").write_text(GPU_PROFILES.read_text())
    (tmp_path / "workloads").mkdir()
    data = raw("qwen3_5_h200") | {"gpu": "H100"}
    path = tmp_path / "workloads" / "w.yaml"
    path.write_text(yaml.safe_dump(data))
    code, out, err = cli(monkeypatch, capsys, "run", str(path), "--dry-run")
    assert code == 2 and err.count("\n") == 1
    assert "unknown gpu 'H100'" in err and "(have H200, B200, MI300X, MI355X)" in err


AMD = [p for p in FILES if "_mi3" in p.stem]


def test_the_amd_workloads_are_there():
    assert len(AMD) == 9


@pytest.mark.parametrize("path", AMD, ids=lambda p: p.stem)
def test_amd_workloads_round_trip_through_export(shipped, path):
    """import -> recipe -> `--as workload`: the same GPU, server, env, benchmark shapes and lm_eval settings
    (each task's model_args as upstream merges them); what a recipe does not hold (bench backend, speed_bench
    fields, timeouts) is what import notes say it drops."""
    w = load(path.stem)
    recipes, said = load_any(path, shipped.runner_labels)
    (key,) = recipes
    recipe = parse_recipe_file({key: recipes[key].model_dump(by_alias=True, exclude_unset=True)}, key)[key]
    back = parse_workload(recipe_to_workload(key, recipe), key)
    assert (back.name, back.gpu, back.nightly) == (w.name, w.gpu, w.nightly)
    # GPUs reserved beyond the server's are not a recipe's (import says so); the server's width is kept
    reserved = f"not carried into the recipe: num_gpus={w.num_gpus} (the server uses {back.num_gpus})"
    assert back.num_gpus == w.num_gpus or reserved in said
    assert back.vllm.model == w.vllm.model and back.vllm.env == w.vllm.env
    # the same server settings as vLLM's grammar reads them (--kv-cache-dtype=fp8 comes back as two words)
    server = lambda x: VLLM.parse_args(split_serve_args(x.vllm.serve_args, key))  # noqa: E731
    assert server(back) == server(w)
    runs = lambda x: sorted((r, c.input_len, c.output_len) for c in x.vllm_bench.configs for r in c.runs())  # noqa: E731
    assert runs(back) == runs(w)
    assert [(t.name, t.num_fewshot, back.lm_eval.args_for(t)) for t in back.lm_eval.tasks] == [
        (t.name, t.num_fewshot, w.lm_eval.args_for(t)) for t in w.lm_eval.tasks
    ]


def test_a_sweep_jobs_eval_carries_the_workloads_lm_eval_settings(shipped, tmp_path):
    """The lm_eval model_args of a pinned workload (its defaults under the task's own) reach the lm_eval
    command of the sweep job made from it, as perf-eval's lib/run_lm_eval.sh passes them after the server's;
    and `servelab run --job` hands them to the eval stage."""
    recipes, _ = load_any(WORKLOADS / "deepseek_v4_pro_5_h200.yaml", shipped.runner_labels)
    store = tmp_path / "store"
    (store / "recipes").mkdir(parents=True)
    (store / "recipes" / "pe.yaml").write_text(yaml.safe_dump({k: r.dump() for k, r in recipes.items()}))
    shutil.copy(DATA_DIR / "runners.yaml", store / "runners.yaml")
    (job,) = [j for j in expand(open_store(store)) if j.evals]
    (ev,) = job.evals
    argv = ev.argv()
    pairs = [kv.split("=", 1) for kv in argv[argv.index("--model_args") + 1].split(",")]
    assert [k for k, _ in pairs[:2]] == ["model", "base_url"]  # the server's first, then the workload's
    assert dict(pairs[2:]) == {
        "num_concurrent": "64",
        "tokenized_requests": "False",
        "tokenizer_backend": "None",
        "timeout": "6000",
        "max_length": "32768",
    }
    assert argv[argv.index("--gen_kwargs") + 1] == "max_gen_toks=8192"
    again = Job.from_json(json.loads(json.dumps(job.to_json())), "job.json")
    assert again.evals == job.evals
    (task,) = from_job(again, "job.json", stages=["gsm8k"]).lm_tasks
    assert task.model_args.dump() == {
        "num_concurrent": 64,
        "max_gen_toks": 8192,
        "tokenized_requests": False,
        "tokenizer_backend": None,
        "timeout": 6000,
        "max_length": 32768,
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [({"base_url": "http://x"}, "set by servelab"), ({"tokenizer": "a,b"}, "cannot read a ','")],
)
def test_model_args_lm_eval_could_not_read_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        EvalSpec(
            model="m", base_url="http://s", task="gsm8k", num_fewshot=5, model_args=args, output_path="o"
        )
