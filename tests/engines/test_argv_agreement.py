"""One server command, every reader: the engine's grammar, the deployment read from a recorded run
(predict/deployment.py), perf-eval serve_args, the launch profiles' merge and drop, `recipes validate`'s
launch settings and the run plan's server reads all agree on what each flag says: negative numbers,
`--flag=value`, underscores and hyphens, aliases, JSON-valued and dotted flags, bare switches before
positional words."""

import json
from types import SimpleNamespace

import pytest

from servelab.engines.command import engine_of_argv, grammar_of, parse
from servelab.engines.names import Engine
from servelab.predict import deployment
from servelab.recipes import validate
from servelab.recipes.engines.base import Launch
from servelab.recipes.engines.profiles import Extras, apply
from servelab.recipes.inferencex import SearchSpaceEntry
from servelab.recipes.workload import join_serve_args, parse_serve_args, parse_workload, split_serve_args
from servelab.run.plan import from_workload, served_name
from servelab.specs import Parallel

MODEL = "Qwen/Qwen3-30B-A3B"
VLLM_ARGS = [
    "--trust-remote-code",  # a bare switch, then the model: vLLM reads it as its positional model tag
    MODEL,
    "-tp",
    "1",
    "--data-parallel-size=8",
    "--enable-expert-parallel",
    "--seed",
    "-1",
    "--max_num_seqs",
    "64",
    "--max-num-batched-tokens=8192",
    "--gpu_memory_utilization",
    "0.9",
    "--kv-cache-dtype",
    "fp8",
    "--compilation-config",
    '{"cudagraph_mode": "FULL"}',
    "--speculative-config",
    '{"method": "mtp", "num_speculative_tokens": 2}',
    "--attention_config.use_fp4_indexer_cache=True",
    "--served-model-name",
    "qwen-served",
    "--language-model-only",
    "--no-enable-prefix-caching",
    "--stream_interval",
    "20",
]
CASES = {
    Engine.VLLM: SimpleNamespace(
        argv=["vllm", "serve", *VLLM_ARGS],
        options=None,
        parallel=Parallel(tp=8, ep=8, dp_attn=True),
        scheduling={
            "max_num_batched_tokens": 8192,
            "max_num_seqs": 64,
            "gpu_memory_utilization": 0.9,
            "enable_prefix_caching": False,
            "stream_interval": 20,
        },
        kv="fp8",
        served="qwen-served",
        batched=8192,
    ),
    Engine.SGLANG: SimpleNamespace(
        argv=["python3", "-m", "sglang.launch_server", "--trust-remote-code", "--model", MODEL]
        + ["--tp=8", "--expert-parallel-size", "8", "--enable-dp-attention", "--dp", "8"]
        + ["--random-seed", "-1", "--chunked-prefill-size", "-1", "--mem-fraction-static", "0.85"]
        + [
            "--max-running-requests",
            "128",
            "--kv-cache-dtype",
            "fp8_e4m3",
            "--speculative-algorithm",
            "EAGLE",
        ]
        + ["--speculative-num-steps", "3", "--served-model-name", "sg", "--disable-radix-cache"]
        + ["--stream-interval", "10"],
        options=None,
        parallel=Parallel(tp=8, ep=8, dp_attn=True),
        scheduling={
            "max_num_batched_tokens": None,
            "max_num_seqs": 128,
            "gpu_memory_utilization": 0.85,
            "enable_prefix_caching": False,
            "stream_interval": 10,
        },
        kv="fp8",
        served="sg",
        # chunked prefill off: the launch sets no step budget
        batched=validate.DEFAULT_MAX_NUM_BATCHED_TOKENS,
    ),
    Engine.TRTLLM: SimpleNamespace(
        argv=["trtllm-serve", "serve", MODEL, "--trust_remote_code", "--tp_size", "8", "--ep_size=8"]
        + ["--max_batch_size", "64", "--max_num_tokens", "8192", "--kv_cache_free_gpu_memory_fraction", "0.9"]
        + ["--config", "opts.yml"],
        options={
            "enable_attention_dp": True,
            "kv_cache_config": {"dtype": "fp8", "free_gpu_memory_fraction": 0.7},
            "stream_interval": 100,
        },
        parallel=Parallel(tp=8, ep=8, dp_attn=True),
        scheduling={
            "max_num_batched_tokens": 8192,
            "max_num_seqs": 64,
            "gpu_memory_utilization": 0.7,
            "enable_prefix_caching": None,  # the engine's default: not set
            "stream_interval": 100,
        },
        kv="fp8",
        served=MODEL,
        batched=8192,
    ),
    Engine.ATOM: SimpleNamespace(
        # python's own -u before -m; --port is ATOM's internal engine port (its HTTP one is --server-port)
        argv=[
            "python3",
            "-u",
            "-m",
            "atom.entrypoints.openai_server",
            "--trust-remote-code",
            "--model",
            MODEL,
        ]
        + ["-tp", "8", "--enable-expert-parallel", "--enable-dp-attention", "--port", "8006"]
        + ["--max_num_seqs", "64", "--max-num-batched-tokens=8192", "--gpu-memory-utilization", "0.9"]
        + ["--kv-cache-dtype", "fp8", "--method", "mtp", "--num-speculative-tokens", "3"]
        + ["--state-checkpoint-interval-tokens", "-1", "--served-model-name", "at"]
        + ["--no-enable_prefix_caching", "--server-port", "8888"],
        options=None,
        parallel=Parallel(tp=8, ep=8, dp_attn=True),
        scheduling={
            "max_num_batched_tokens": 8192,
            "max_num_seqs": 64,
            "gpu_memory_utilization": 0.9,
            "enable_prefix_caching": False,
            "stream_interval": None,  # ATOM has no such flag
        },
        kv="fp8",
        served="at",
        batched=8192,
    ),
}


@pytest.mark.parametrize("engine", list(Engine))
def test_deployment_reads_what_the_grammar_reads(engine):
    case = CASES[engine]
    s = parse(engine, case.argv, case.options)
    assert engine_of_argv(case.argv) == deployment.engine_of_argv(case.argv) == engine
    assert s.model == deployment.model_of_argv(case.argv, engine) == MODEL
    assert deployment.parallel_of_argv(case.argv, engine, True, case.options) == case.parallel
    assert grammar_of(engine).parallel(s, True) == case.parallel
    assert deployment.engine_settings_of_argv(case.argv, engine, case.options) == case.scheduling
    assert deployment.kv_dtype_of_argv(case.argv, engine, case.options) == case.kv
    # a recorded `servelab run --docker` command reads the same
    docker = ["docker", "run", "--rm", "--gpus", "all", "-e", "A=1", "--entrypoint", case.argv[0], "img:1"]
    assert deployment.settings_of_argv(docker + case.argv[1:], None, case.options) == s


@pytest.mark.parametrize("engine", list(Engine))
def test_the_run_plan_and_validate_read_the_same_server(engine, monkeypatch):
    case = CASES[engine]
    assert served_name(case.argv, MODEL) == case.served
    files = {"opts.yml": json.dumps(case.options)} if case.options else {}  # JSON is YAML
    monkeypatch.setattr(validate, "render", lambda *a, **k: Launch(argv=case.argv, files=files, port=8000))
    seq = SimpleNamespace(isl=1024, osl=1024)
    launched = validate._launch_settings(None, engine, seq, SearchSpaceEntry(conc_list=[4], tp=8))
    assert launched == parse(engine, case.argv, case.options)
    assert validate._batched_tokens(launched, SimpleNamespace(max_num_batched_tokens=None)) == case.batched


def test_perf_eval_serve_args_read_as_vllm_reads_them():
    serve_args = join_serve_args(VLLM_ARGS[2:])  # the workload's model is its own field
    engine, arm, revision = parse_serve_args(serve_args, "w.yaml")
    s = parse(Engine.VLLM, ["vllm", "serve", MODEL, *split_serve_args(serve_args, "w.yaml")])
    assert arm == {"tp": 8, "ep": 8, "pp": 1, "dp-attn": True}  # the recipe's layout of tp 1 x dp 8 + EP
    assert (engine["max-num-seqs"], engine["max-num-batched-tokens"]) == (
        s.max_num_seqs,
        s.max_num_batched_tokens,
    )
    assert engine["gpu-memory-utilization"] == s.memory_fraction == 0.9
    assert engine["compilation-config"] == s.compilation_config == {"cudagraph_mode": "FULL"}
    assert engine["speculative-config"] == s.speculative_config
    assert engine["attention-config"] == s.attention_config == {"use_fp4_indexer_cache": True}
    assert engine["enable-prefix-caching"] is s.prefix_caching is False
    # flags a recipe has no field for stay as written, in order: the negative seed is a value
    assert engine["extra-args"] == [
        "--seed",
        "-1",
        "--served-model-name",
        "qwen-served",
        "--language-model-only",
        "--stream_interval",
        "20",
    ]
    assert revision is None
    plan = from_workload(
        parse_workload(
            {
                "name": "w",
                "gpu": "H200",
                "vllm": {"model": MODEL, "serve_args": serve_args},
                "bfcl": {"test_categories": ["simple_python"]},
            },
            "w.yaml",
        ),
        "w.yaml",
    )
    assert plan.server.model == served_name(plan.server.argv, MODEL) == "qwen-served"
    assert parse(Engine.VLLM, plan.server.argv).model_copy(update={"host": None, "port": None}) == s


# upstream's extras for each engine: a flag the command already sets, under another spelling, and a new one
EXTRA = {
    Engine.VLLM: (["--tensor-parallel-size", "4", "--new-flag", "-2"], ["--max-num-seqs"]),
    Engine.SGLANG: (["--tp-size", "4", "--new-flag", "-2"], ["--max-running-requests"]),
    Engine.TRTLLM: (["--tp_size", "4", "--new-flag", "-2"], ["--max-batch-size"]),
    Engine.ATOM: (["-tp", "4", "--new-flag", "-2"], ["--max-num-seqs"]),
}


@pytest.mark.parametrize("engine", list(Engine))
def test_profile_merge_and_drop_agree_with_the_grammar(engine):
    case = CASES[engine]
    grammar = grammar_of(engine)
    args, drop = EXTRA[engine]
    dropped = parse(engine, grammar.without(case.argv, drop))
    assert dropped.max_num_seqs is None and dropped.tp == parse(engine, case.argv).tp
    merged = parse(engine, apply(grammar, case.argv, Extras(args=args, drop=drop)))
    assert merged == dropped.model_copy(update={"extra_args": [*dropped.extra_args, "--new-flag", "-2"]})


def test_non_server_commands_read_the_same_way():
    # bench and lm_eval commands have no engine grammar; the same tokenizer reads them
    flags = deployment.argv_flags(["servelab", "bench", "--seed", "-1", "--num-prompts=5", "--ignore-eos"])
    assert flags == {"seed": "-1", "num-prompts": "5", "ignore-eos": "true"}
