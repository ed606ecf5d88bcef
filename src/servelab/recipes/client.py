"""The benchmark client of a job: its typed `servelab bench` point and its typed lm-eval evals."""

from __future__ import annotations

from servelab.bench.spec import BenchSpec
from servelab.recipes.job import EvalSpec


def server_url(recipe) -> str:
    return f"http://localhost:{recipe.client.port}"


def num_prompts(recipe, seq, conc: int) -> int:
    c = recipe.client
    return seq.num_prompts or c.num_prompts or conc * c.prompts_per_conc


def result_filename(key: str, exp_name: str, arm, conc: int) -> str:
    return f"{key}_{exp_name}_tp{arm.tp_}-ep{arm.ep_}-dpa{int(arm.dp_attn_)}-pp{arm.pp_}-conc{conc}.json"


def bench_spec(recipe, seq, conc: int, filename: str) -> BenchSpec:
    """The job's benchmark point at `conc`: the random dataset at the seq-len block's lengths, the recipe's
    client settings (InferenceX's defaults), results saved under the client's result folder."""
    c = recipe.client
    return BenchSpec(
        base_url=server_url(recipe),
        model=recipe.model,
        dataset_name="random",
        random_input_len=seq.isl,
        random_output_len=seq.osl,
        random_range_ratio=c.random_range_ratio,
        num_prompts=num_prompts(recipe, seq, conc),
        max_concurrency=conc,
        num_warmups=conc * c.warmups_per_conc,
        ignore_eos=c.ignore_eos,
        save_result=True,
        result_dir=c.result_dir,
        result_filename=filename,
    )


def eval_spec(recipe, ev) -> EvalSpec:
    """An lm-eval entry of the recipe against the job's server (perf-eval's flow)."""
    return EvalSpec(
        model=recipe.model,
        base_url=server_url(recipe),
        task=ev.task,
        num_fewshot=ev.num_fewshot,
        num_concurrent=ev.num_concurrent,
        max_gen_toks=ev.max_gen_toks,
        output_path=f"{recipe.client.result_dir}/lm_eval",
    )
