"""The benchmark client of a job: its typed `servelab bench` point and its typed lm-eval evals."""

from __future__ import annotations

from servelab.bench.spec import BenchSpec
from servelab.errors import ServelabError
from servelab.recipes.engines import engine_name
from servelab.recipes.engines.profiles import ClientOptions, JobPoint, profile_for
from servelab.recipes.job import EvalSpec


def server_url(recipe) -> str:
    return f"http://localhost:{recipe.client.port}"


def num_prompts(recipe, seq, conc: int) -> int:
    c = recipe.client
    return seq.num_prompts or c.num_prompts or conc * c.prompts_per_conc


def result_filename(key: str, exp_name: str, arm, conc: int) -> str:
    return f"{key}_{exp_name}_tp{arm.tp_}-ep{arm.ep_}-dpa{int(arm.dp_attn_)}-pp{arm.pp_}-conc{conc}.json"


def script_client(recipe, arm, seq, conc: int) -> ClientOptions:
    """The client options the job's upstream launch script passes (its launch profile's), or none when no
    profile covers the recipe (servelab's own keys, frameworks without an adapter)."""
    try:
        engine = engine_name(recipe.framework)
    except ServelabError:
        return ClientOptions()
    profile = profile_for(recipe, arm, engine)
    if profile is None:
        return ClientOptions()
    return profile.resolve(arm, JobPoint(isl=seq.isl, osl=seq.osl, conc=conc), recipe.model).client


def bench_spec(recipe, seq, conc: int, filename: str, script: ClientOptions | None = None) -> BenchSpec:
    """The job's benchmark point at `conc`: the random dataset at the seq-len block's lengths, the recipe's
    client settings (InferenceX's defaults), the options its launch script gives InferenceX's client where
    the recipe sets none (`script`), results saved under the client's result folder."""
    c = recipe.client
    script = script or ClientOptions()

    def chosen(name: str):
        own = getattr(c, name)
        return own if own is not None else getattr(script, name)

    return BenchSpec(
        base_url=server_url(recipe),
        model=recipe.model,
        backend=chosen("backend"),
        tokenizer_mode=chosen("tokenizer_mode"),
        trust_remote_code=bool(chosen("trust_remote_code")),
        dataset_name="random",
        random_input_len=seq.isl,
        random_output_len=seq.osl,
        random_range_ratio=c.random_range_ratio,
        random_range_rule=c.random_range_rule,
        # DeepSeek-V4's framing is a chat template: on with --dsv4, as InferenceX's wrapper turns it on
        use_chat_template=bool(chosen("use_chat_template") or chosen("dsv4")),
        dsv4=bool(chosen("dsv4")),
        num_prompts=num_prompts(recipe, seq, conc),
        max_concurrency=conc,
        endpoint=chosen("endpoint"),
        num_warmups=conc * c.warmups_per_conc,
        ignore_eos=c.ignore_eos,
        percentile_metrics=tuple(c.percentile_metrics),
        metric_percentiles=tuple(c.metric_percentiles),
        save_result=True,
        result_dir=c.result_dir,
        result_filename=filename,
    )


def trace_spec(recipe, conc: int, duration: int, filename: str) -> BenchSpec:
    """An agentic-coding job's benchmark point: the trace replay InferenceX's agentic job runs (its AIPerf
    replay, benchmark_lib.sh's build_replay_cmd): `conc` sessions at a time on the chat API, streamed, the
    traces replayed again and again for the row's `duration` seconds, the tokenizer's own code trusted.
    The trace file is not part of the job: `servelab run` takes it from SERVELAB_AGENTIC_TRACE (servelab
    never downloads at run time)."""
    c = recipe.client
    return BenchSpec(
        base_url=server_url(recipe),
        model=recipe.model,
        backend="openai-chat",
        trust_remote_code=True,
        dataset_name="trace",  # idle gaps cut at 300 s: bench's default, InferenceX's cap
        max_concurrency=conc,
        max_seconds=duration,
        endpoint="/v1/chat/completions",
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
        model_args=dict(ev.model_args) if ev.model_args else None,
        output_path=f"{recipe.client.result_dir}/lm_eval",
    )
