"""TensorRT-LLM's server command: `trtllm-serve MODEL [flags] --extra_llm_api_options FILE`.

trtllm-serve is a click command (tensorrt_llm/commands/serve.py): underscore names only, each option spelt
once, and a YAML file of LLM API options (`--extra_llm_api_options`, or `--config` in recent releases) whose
keys win over the flags. Settings servelab writes in that file (attention DP, the KV cache's dtype, block
size and reuse, the MoE backend, speculative decoding, chunked prefill) have no flag; those with a flag are
written as flags and read from the file as well, where it wins.

The flag names were checked against what InferenceX's pinned launch scripts run (tests/data/inferencex) and
AIConfigurator's TensorRT-LLM templates (the YAML keys), not against TensorRT-LLM's source, which servelab's
tooling could not fetch (the repository is over the snapshot limit and its wheels are on NVIDIA's index only).
"""

from __future__ import annotations

from typing import Any

from servelab.engines.argv import FlagSet
from servelab.engines.grammar import Flag, Grammar, OptionKey, value_flags
from servelab.engines.names import Engine
from servelab.engines.settings import ServerSettings
from servelab.errors import ServelabError
from servelab.specs import Parallel

OPTIONS_FILE = "extra-llm-api-config.yml"
ALIASES = {"--config": "--extra-llm-api-options"}
SWITCHES = FlagSet(
    frozenset(
        {"--trust-remote-code", "--enable-chunked-prefill", "--fail-fast-on-attention-window-too-large"}
    ),
    prefixes=("--enable-", "--disable-"),
)

TABLE = (
    Flag("host", "--host", "str"),
    Flag("port", "--port", "int"),
    Flag("backend", "--backend", "str"),
    Flag("tp", "--tp_size", "int"),
    Flag("ep", "--ep_size", "int"),
    Flag("pp", "--pp_size", "int"),
    Flag("max_model_len", "--max_seq_len", "int"),
    Flag("max_num_seqs", "--max_batch_size", "int"),
    Flag("max_num_batched_tokens", "--max_num_tokens", "int"),
    Flag("memory_fraction", "--kv_cache_free_gpu_memory_fraction", "float"),
    Flag("reasoning_parser", "--reasoning_parser", "str"),
    Flag("trust_remote_code", "--trust_remote_code", "switch"),
    Flag("chunked_prefill", "--enable_chunked_prefill", "toggle", written=False),
)

# The LLM API options servelab reads (and, `written`, writes) in the YAML, in the order it writes them.
OPTION_KEYS = (
    OptionKey("attention_dp", ("enable_attention_dp",)),
    OptionKey("kv_cache_dtype", ("kv_cache_config", "dtype")),
    OptionKey("block_size", ("kv_cache_config", "tokens_per_block")),
    OptionKey("prefix_caching", ("kv_cache_config", "enable_block_reuse")),
    OptionKey("moe_backend", ("moe_config", "backend")),
    OptionKey("speculative_config", ("speculative_config",)),
    OptionKey("chunked_prefill", ("enable_chunked_prefill",)),
    OptionKey("stream_interval", ("stream_interval",)),
    OptionKey("memory_fraction", ("kv_cache_config", "free_gpu_memory_fraction"), written=False),
    OptionKey("tp", ("tensor_parallel_size",), written=False),
    OptionKey("pp", ("pipeline_parallel_size",), written=False),
    OptionKey("ep", ("moe_expert_parallel_size",), written=False),
    OptionKey("max_model_len", ("max_seq_len",), written=False),
    OptionKey("max_num_seqs", ("max_batch_size",), written=False),
    OptionKey("max_num_batched_tokens", ("max_num_tokens",), written=False),
    OptionKey("trust_remote_code", ("trust_remote_code",), written=False),
    OptionKey("backend", ("backend",), written=False),
)


class TrtllmGrammar(Grammar):
    def layout(self, tp: int, ep: int, pp: int, dp_attn: bool, dcp: int = 1, pcp: int = 1) -> dict[str, Any]:
        """tp, ep and pp as flags, always written; attention DP in the options file."""
        if dcp > 1 or pcp > 1:
            raise ServelabError(
                "dcp-size/pcp-size: the TensorRT-LLM adapter does not render context parallelism"
            )
        return {"tp": tp, "ep": ep, "pp": pp, "attention_dp": dp_attn}

    def parallel(self, s: ServerSettings, is_moe: bool) -> Parallel:
        """--tp_size, --ep_size, --pp_size; attention DP when the options file was read."""
        ep = (s.ep or 1) if is_moe else 1
        return Parallel(tp=s.tp or 1, ep=ep, dp_attn=s.attention_dp, pp=s.pp or 1)


GRAMMAR = TrtllmGrammar(
    engine=Engine.TRTLLM,
    command=("trtllm-serve",),
    programs=(("trtllm-serve", "serve"), ("trtllm-serve",)),
    model_positional=True,
    model_flag=None,
    aliases=ALIASES,
    switches=SWITCHES,
    valued=FlagSet(value_flags(TABLE, ALIASES) | {"--extra-llm-api-options"}),
    table=TABLE,
    options_flag="--extra_llm_api_options",
    options_file=OPTIONS_FILE,
    option_keys=OPTION_KEYS,
)
