"""The benchmark client of a job: `servelab bench` argv (flags as vLLM bench serve takes them) and dataset."""

from __future__ import annotations


def dataset_spec(recipe, seq, conc: int) -> dict:
    c = recipe.client
    num_prompts = seq.num_prompts or c.num_prompts or conc * c.prompts_per_conc
    return {
        "name": "random",
        "input-len": seq.isl,
        "output-len": seq.osl,
        "range-ratio": c.random_range_ratio,
        "num-prompts": num_prompts,
    }


def result_filename(key: str, exp_name: str, arm, conc: int) -> str:
    return f"{key}_{exp_name}_tp{arm.tp_}-ep{arm.ep_}-dpa{int(arm.dp_attn_)}-pp{arm.pp_}-conc{conc}.json"


def client_argv(recipe, dataset: dict, conc: int, port: int, filename: str) -> list[str]:
    c = recipe.client
    argv = [
        "servelab",
        "bench",
        "--base-url",
        f"http://localhost:{port}",
        "--model",
        recipe.model,
        "--dataset-name",
        dataset["name"],
        "--random-input-len",
        str(dataset["input-len"]),
        "--random-output-len",
        str(dataset["output-len"]),
        "--random-range-ratio",
        str(dataset["range-ratio"]),
        "--num-prompts",
        str(dataset["num-prompts"]),
        "--max-concurrency",
        str(conc),
        "--num-warmups",
        str(conc * c.warmups_per_conc),
    ]
    if c.ignore_eos:
        argv.append("--ignore-eos")
    argv += ["--save-result", "--result-dir", c.result_dir, "--result-filename", filename]
    return argv


def lm_eval_argv(recipe, ev, port: int) -> list[str]:
    """`lm_eval` against the running server's completions endpoint (perf-eval's flow)."""
    model_args = [f"model={recipe.model}", f"base_url=http://localhost:{port}/v1/completions"]
    if ev.num_concurrent:
        model_args.append(f"num_concurrent={ev.num_concurrent}")
    argv = [
        "lm_eval",
        "--model",
        "local-completions",
        "--model_args",
        ",".join(model_args),
        "--tasks",
        ev.task,
        "--num_fewshot",
        str(ev.num_fewshot),
    ]
    if ev.max_gen_toks:
        argv += ["--gen_kwargs", f"max_gen_toks={ev.max_gen_toks}"]
    argv += ["--output_path", f"{recipe.client.result_dir}/lm_eval"]
    return argv
