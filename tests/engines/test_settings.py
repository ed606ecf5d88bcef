"""Each engine's grammar: typed settings parsed from and rendered to its server command, round trip per engine
(TensorRT-LLM's options file included), aliases and switches as the engine's parser reads them, refusals."""

import pytest

from servelab.engines.command import engine_of_argv, grammar_of, parse, render
from servelab.engines.names import Engine
from servelab.engines.settings import ServerSettings
from servelab.errors import ServelabError
from servelab.specs import Parallel

COMMON = dict(
    model="org/model",
    revision=None,
    host="0.0.0.0",
    port=8000,
    served_model_name="served",
    max_model_len=9472,
    max_num_batched_tokens=8192,
    max_num_seqs=256,
    memory_fraction=0.85,
    kv_cache_dtype="fp8",
    block_size=64,
    moe_backend="triton",
    trust_remote_code=True,
    reasoning_parser="deepseek_r1",
    extra_args=["--seed", "-1", "--some-new-flag"],
)
ROUND_TRIP = {
    Engine.VLLM: ServerSettings(
        **COMMON | {"revision": "abc123"},
        tp=1,
        dp=8,
        pp=2,
        dcp=2,
        expert_parallel=True,
        quantization="fp8",
        chunked_prefill=False,
        prefix_caching=True,
        attention_config={"use_fp4_indexer_cache": True, "backend": "FLASHMLA"},
        compilation_config={"cudagraph_mode": "FULL", "mode": 3},
        kernel_config={"enable_jit_warmup": False},
        speculative_config={"method": "mtp", "num_speculative_tokens": 2},
        tokenizer_mode="deepseek_v4",
        tool_call_parser="deepseek_v4",
        auto_tool_choice=True,
        stream_interval=20,
    ),
    Engine.SGLANG: ServerSettings(
        **COMMON | {"revision": "abc123", "max_num_batched_tokens": None, "kv_cache_dtype": "fp8_e4m3"},
        tp=8,
        ep=8,
        dp=8,
        pp=2,
        attention_dp=True,
        quantization="fp8",
        chunked_prefill=False,
        prefix_caching=False,
        speculative_config={"algorithm": "EAGLE", "num_steps": 3, "eagle_topk": 1},
        tokenizer_mode="auto",
        tool_call_parser="qwen",
        stream_interval=10,
    ),
    Engine.TRTLLM: ServerSettings(
        **COMMON | {"served_model_name": None},
        backend="pytorch",
        tp=8,
        ep=8,
        pp=1,
        attention_dp=True,
        chunked_prefill=True,
        prefix_caching=False,
        speculative_config={"decoding_type": "MTP", "num_nextn_predict_layers": 3},
        stream_interval=100,
        engine_options={"cuda_graph_config": {"max_batch_size": 256}, "kv_cache_config": {"x": 1}},
    ),
    Engine.ATOM: ServerSettings(
        **COMMON | {"reasoning_parser": None, "moe_backend": "mega"},
        tp=8,
        pp=2,
        dcp=2,
        expert_parallel=True,
        attention_dp=True,
        chunked_prefill=False,
        prefix_caching=False,
    ),
}


@pytest.mark.parametrize("engine", list(Engine))
def test_parse_of_render_is_the_settings(engine):
    s = ROUND_TRIP[engine]
    command = render(engine, s)
    assert engine_of_argv(command.argv) == engine
    assert parse(engine, command.argv, command.options) == s


def test_the_renders_are_the_engines_own_spellings():
    vllm = render(Engine.VLLM, ROUND_TRIP[Engine.VLLM]).argv
    assert vllm[:3] == ["vllm", "serve", "org/model"]
    assert "--attention_config.use_fp4_indexer_cache=True" in vllm
    assert vllm[vllm.index("--stream-interval") + 1] == "20"
    assert vllm[vllm.index("--compilation-config") + 1] == '{"cudagraph_mode":"FULL","mode":3}'
    sglang = render(Engine.SGLANG, ROUND_TRIP[Engine.SGLANG]).argv
    assert sglang[:5] == ["python3", "-m", "sglang.launch_server", "--model-path", "org/model"]
    assert sglang[sglang.index("--chunked-prefill-size") + 1] == "-1"
    assert "--disable-radix-cache" in sglang and "--speculative-eagle-topk" in sglang
    trt = render(Engine.TRTLLM, ROUND_TRIP[Engine.TRTLLM])
    assert trt.argv[:2] == ["trtllm-serve", "org/model"] and "--tp_size" in trt.argv
    assert trt.argv[-5:-3] == ["--extra_llm_api_options", "extra-llm-api-config.yml"]
    # the options file: the verbatim keys first, then what servelab writes there, nested under their keys
    assert trt.options == {
        "cuda_graph_config": {"max_batch_size": 256},
        "kv_cache_config": {"x": 1, "dtype": "fp8", "tokens_per_block": 64, "enable_block_reuse": False},
        "enable_attention_dp": True,
        "moe_config": {"backend": "triton"},
        "speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": 3},
        "enable_chunked_prefill": True,
        "stream_interval": 100,
    }


def test_trtllm_reads_its_options_file_over_its_flags():
    argv = ["trtllm-serve", "m", "--tp_size", "4", "--max_batch_size", "8", "--config", "opts.yml"]
    argv += ["--kv_cache_free_gpu_memory_fraction", "0.9"]
    grammar = grammar_of(Engine.TRTLLM)
    assert grammar.options_path(argv) == "opts.yml"
    options = {"max_batch_size": 16, "kv_cache_config": {"free_gpu_memory_fraction": 0.6, "dtype": "fp8"}}
    s = parse(Engine.TRTLLM, argv, options)
    assert (s.max_num_seqs, s.memory_fraction, s.kv_cache_dtype, s.tp) == (16, 0.6, "fp8", 4)
    assert s.engine_options == {}
    # without the file, the flags alone
    assert parse(Engine.TRTLLM, argv).memory_fraction == 0.9


def test_with_options_keeps_the_file_as_written():
    # The adapter's path: upstream's file, in its order, with the typed fields read from it.
    grammar = grammar_of(Engine.TRTLLM)
    options = {"print_iter_log": False, "kv_cache_config": {"dtype": "fp8", "free_gpu_memory_fraction": 0.75}}
    s = grammar.with_options(ServerSettings(model="m", tp=8), options)
    assert s.kv_cache_dtype == "fp8"
    command = grammar.render(s)
    assert command.options == options and list(command.options) == list(options)
    assert "--kv_cache_free_gpu_memory_fraction" not in command.argv


def test_aliases_are_per_engine():
    assert parse(Engine.VLLM, ["vllm", "serve", "m", "-tp", "2", "-dp", "4", "-ep"]).model_dump(
        include={"tp", "dp", "expert_parallel"}
    ) == {"tp": 2, "dp": 4, "expert_parallel": True}
    sglang = ["sglang", "serve", "--model", "m", "--tensor-parallel-size", "4", "--ep", "4", "--dp-size", "2"]
    assert parse(Engine.SGLANG, sglang).model_dump(include={"model", "tp", "ep", "dp"}) == {
        "model": "m",
        "tp": 4,
        "ep": 4,
        "dp": 2,
    }
    # SGLang's --tp is no vLLM flag: vLLM's grammar keeps it verbatim
    assert parse(Engine.VLLM, ["vllm", "serve", "m", "--tp", "8"]).extra_args == ["--tp", "8"]


def test_bare_switches_leave_positional_words_alone():
    s = parse(
        Engine.VLLM, ["vllm", "serve", "--trust-remote-code", "org/m", "--enable-expert-parallel", "-tp", "2"]
    )
    assert (s.model, s.trust_remote_code, s.expert_parallel, s.tp) == ("org/m", True, True, 2)
    # trtllm-serve's `serve` subcommand is a program word, not the model
    assert parse(Engine.TRTLLM, ["trtllm-serve", "serve", "m", "--trust_remote_code"]).model == "m"


def test_vllm_dotted_and_json_configs_merge():
    argv = ["vllm", "serve", "m", "--speculative-config", '{"method": "mtp"}']
    argv += [
        "--speculative_config.num_speculative_tokens",
        "2",
        "-cc",
        '{"mode": 0}',
        "--compilation-config.x=1",
    ]
    s = parse(Engine.VLLM, argv)
    assert s.speculative_config == {"method": "mtp", "num_speculative_tokens": 2}
    assert s.compilation_config == {"mode": 0, "x": 1}
    # max-model-len auto is a value the typed field cannot hold: kept as written
    assert parse(Engine.VLLM, ["vllm", "serve", "m", "--max-model-len", "auto"]).extra_args == [
        "--max-model-len",
        "auto",
    ]


def test_refusals_name_the_field():
    with pytest.raises(ServelabError, match="sglang has no flag for attention_config"):
        render(Engine.SGLANG, ServerSettings(model="m", attention_config={"a": 1}))
    with pytest.raises(ServelabError, match="sglang has no flag to set prefix_caching True"):
        render(Engine.SGLANG, ServerSettings(model="m", prefix_caching=True))
    with pytest.raises(ServelabError, match="one flag"):
        render(Engine.SGLANG, ServerSettings(model="m", chunked_prefill=False, max_num_batched_tokens=512))
    with pytest.raises(ServelabError, match="needs a model"):
        render(Engine.VLLM, ServerSettings(tp=2))
    with pytest.raises(ServelabError, match="--tensor-parallel-size 'x': bad value"):
        parse(Engine.VLLM, ["vllm", "serve", "m", "--tensor-parallel-size", "x"])
    with pytest.raises(ServelabError, match="--max-num-seqs needs a value"):
        parse(Engine.VLLM, ["vllm", "serve", "m", "--max-num-seqs"])
    with pytest.raises(ServelabError, match="not vllm serve"):
        engine_of_argv(["python", "server.py"])


def test_parallel_layouts_round_trip_through_each_engine():
    for engine in Engine:
        grammar = grammar_of(engine)
        for tp, ep, dp_attn in ((8, 1, False), (8, 8, False), (8, 8, True)):
            s = ServerSettings(model="m", **grammar.layout(tp, ep, 1, dp_attn))
            assert grammar.parallel(
                parse(engine, render(engine, s).argv, render(engine, s).options), True
            ) == (Parallel(tp=tp, ep=ep, dp_attn=dp_attn)), (engine, tp, ep, dp_attn)
    with pytest.raises(ServelabError, match="expert parallel spans"):
        grammar_of(Engine.VLLM).layout(8, 4, 1, False)
    with pytest.raises(ValueError, match="replicas"):
        grammar_of(Engine.VLLM).parallel(ServerSettings(model="m", dp=2), is_moe=False)


def test_atom_reads_both_spellings_and_its_own_port():
    # ATOM's FlexibleArgumentParser takes `_` and `-` alike; -tp is --tensor-parallel-size; the server
    # listens on --server-port (its --port is the engine's internal one, kept as written)
    argv = ["python3", "-u", "-m", "atom.entrypoints.openai_server", "--model", "m", "-tp", "4"]
    argv += ["--kv-cache-dtype", "fp8", "--port", "8006", "--server-port", "8888", "--enable_prefix_caching"]
    argv += ["--enable-tbo", "--max-num-seqs", "8"]
    s = parse(Engine.ATOM, argv)
    assert (s.tp, s.kv_cache_dtype, s.port, s.prefix_caching, s.max_num_seqs) == (4, "fp8", 8888, True, 8)
    assert s.extra_args == ["--port", "8006", "--enable-tbo"]
    assert engine_of_argv(argv) == Engine.ATOM
    assert parse(Engine.ATOM, [argv[0], *argv[2:]]) == s  # without python's -u
    rendered = render(Engine.ATOM, s).argv
    assert rendered[:5] == ["python3", "-m", "atom.entrypoints.openai_server", "--model", "m"]
    assert "--kv_cache_dtype" in rendered and "--enable_prefix_caching" in rendered
    with pytest.raises(ServelabError, match="atom has no flag for revision"):
        render(Engine.ATOM, s.model_copy(update={"revision": "abc"}))
    with pytest.raises(ServelabError, match="ATOM's --enable-expert-parallel spans the 8 TP ranks"):
        grammar_of(Engine.ATOM).layout(8, 4, 1, False)
