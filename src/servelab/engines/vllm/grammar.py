"""vLLM's server command: `vllm serve MODEL [flags]`, as its argument parser reads it.

Checked against vLLM 0.25.0 (vllm/engine/arg_utils.py, vllm/entrypoints/openai/cli_args.py,
vllm/utils/argparse_utils.py). Its FlexibleArgumentParser takes `_` and `-` alike in a flag's name, a dotted
flag (`--compilation-config.mode 3`, `--attention_config.use_fp4_indexer_cache=True`) sets one key of a
JSON config and always takes the next token, and every boolean config field is a pair of switches
(`--enable-prefix-caching` / `--no-enable-prefix-caching`).
"""

from __future__ import annotations

from typing import Any

from servelab.engines.argv import FlagSet, canonical
from servelab.engines.grammar import Flag, Grammar, value_flags
from servelab.engines.names import Engine
from servelab.engines.settings import ServerSettings
from servelab.errors import ServelabError
from servelab.specs import Parallel

# vLLM's short spellings (add_argument("--long", "-short")), as canonical names.
ALIASES = {
    "-tp": "--tensor-parallel-size",
    "-dp": "--data-parallel-size",
    "-pp": "--pipeline-parallel-size",
    "-dcp": "--decode-context-parallel-size",
    "-pcp": "--prefill-context-parallel-size",
    "-ep": "--enable-expert-parallel",
    "-q": "--quantization",
    "-sc": "--speculative-config",
    "-cc": "--compilation-config",
    "-ac": "--attention-config",
    "-dc": "--diffusion-config",
    "-n": "--nnodes",
    "-r": "--node-rank",
    "-dpn": "--data-parallel-rank",
    "-dpr": "--data-parallel-start-rank",
    "-dpl": "--data-parallel-size-local",
    "-dpa": "--data-parallel-address",
    "-dpp": "--data-parallel-rpc-port",
    "-dpb": "--data-parallel-backend",
    "-dph": "--data-parallel-hybrid-lb",
    "-dpe": "--data-parallel-external-lb",
    "-dpm": "--data-parallel-multi-port-external-lb",
    "-asc": "--api-server-count",
}

# Boolean fields of EngineArgs and FrontendArgs (BooleanOptionalAction: --X and --no-X) whose names do not
# start with enable / disable, and serve's own store_true flags. Every --enable-*, --disable-* and --no-*
# flag is a switch too, but --disable-access-log-for-endpoints, which takes a list.
SWITCHES = FlagSet(
    frozenset(
        canonical(f"--{prefix}{name}")
        for name in """
        trust-remote-code skip-tokenizer-init numa-bind data-parallel-hybrid-lb data-parallel-external-lb
        data-parallel-multi-port-external-lb use-fp64-gumbel aggregate-engine-logging
        allow-deprecated-quantization enforce-eager language-model-only interleave-mm-strings mm-encoder-only
        skip-mm-profiling fully-sharded-loras specialize-active-lora ray-workers-use-nsight
        scheduler-reserve-full-isl kv-cache-metrics cudagraph-metrics jit-monitor-verbose calculate-kv-scales
        use-tqdm-on-load async-scheduling kv-sharing-fast-prefill tokens-only fail-on-environ-validation
        trust-request-chat-template return-tokens-as-token-ids exclude-tools-when-tool-choice-none
        log-error-stack allow-credentials headless grpc
        """.split()
        for prefix in ("", "no-")
    ),
    prefixes=("--enable-", "--disable-", "--no-"),
    exceptions=frozenset({"--disable-access-log-for-endpoints"}),
)

# ServerSettings fields as vLLM's flags, in the order servelab writes them.
TABLE = (
    Flag("revision", "--revision", "str"),
    Flag("host", "--host", "str"),
    Flag("port", "--port", "int"),
    Flag("served_model_name", "--served-model-name", "str"),
    Flag("tp", "--tensor-parallel-size", "int"),
    Flag("dp", "--data-parallel-size", "int"),
    Flag("pp", "--pipeline-parallel-size", "int"),
    Flag("expert_parallel", "--enable-expert-parallel", "switch", off="--no-enable-expert-parallel"),
    Flag("dcp", "--decode-context-parallel-size", "int"),
    Flag("pcp", "--prefill-context-parallel-size", "int"),
    Flag("max_model_len", "--max-model-len", "int", verbatim=frozenset({"auto"})),
    Flag("quantization", "--quantization", "str"),
    Flag("kv_cache_dtype", "--kv-cache-dtype", "str"),
    Flag("block_size", "--block-size", "int"),
    Flag("moe_backend", "--moe-backend", "str"),
    Flag("attention_config", "--attention_config", "dotted"),
    Flag("compilation_config", "--compilation-config", "json"),
    Flag("kernel_config", "--kernel-config", "json"),
    Flag("tokenizer_mode", "--tokenizer-mode", "str"),
    Flag("tool_call_parser", "--tool-call-parser", "str"),
    Flag("auto_tool_choice", "--enable-auto-tool-choice", "switch", off="--no-enable-auto-tool-choice"),
    Flag("reasoning_parser", "--reasoning-parser", "str"),
    Flag("max_num_batched_tokens", "--max-num-batched-tokens", "int"),
    Flag("max_num_seqs", "--max-num-seqs", "int"),
    Flag("memory_fraction", "--gpu-memory-utilization", "float"),
    Flag("chunked_prefill", "--enable-chunked-prefill", "toggle", off="--no-enable-chunked-prefill"),
    Flag("prefix_caching", "--enable-prefix-caching", "toggle", off="--no-enable-prefix-caching"),
    Flag("stream_interval", "--stream-interval", "int"),
    Flag("trust_remote_code", "--trust-remote-code", "switch", off="--no-trust-remote-code"),
    Flag("speculative_config", "--speculative-config", "json"),
)


class VllmGrammar(Grammar):
    def layout(self, tp: int, ep: int, pp: int, dp_attn: bool, dcp: int = 1, pcp: int = 1) -> dict[str, Any]:
        """Attention data parallel is tp replicas of one TP rank each (vLLM's DP + EP layout); expert
        parallel always spans TP x DP of a stage."""
        out: dict[str, Any] = {"tp": 1, "dp": tp} if dp_attn else {"tp": tp}
        if pp > 1:
            out["pp"] = pp
        if ep > 1:
            if ep != tp:
                raise ServelabError(
                    f"ep={ep}: vLLM's expert parallel spans all {tp} GPUs of a stage; set ep to {tp} or 1"
                )
            out["expert_parallel"] = True
        if dcp > 1:
            out["dcp"] = dcp
        if pcp > 1:
            out["pcp"] = pcp
        return out

    def parallel(self, s: ServerSettings, is_moe: bool) -> Parallel:
        """tensor-parallel-size x data-parallel-size GPUs; data parallel with expert parallel is attention
        DP with the experts spread over all of them."""
        tp, dp, pp = s.tp or 1, s.dp or 1, s.pp or 1
        if dp > 1 and not (is_moe and s.expert_parallel):
            raise ValueError(f"data parallel {dp} without expert parallelism (replicas, not one deployment)")
        ep = tp * dp if is_moe and s.expert_parallel else 1
        return Parallel(tp=tp * dp, ep=ep, dp_attn=dp > 1, pp=pp)


GRAMMAR = VllmGrammar(
    engine=Engine.VLLM,
    command=("vllm", "serve"),
    programs=(("python3", "-m", "vllm.entrypoints.openai.api_server"), ("vllm", "serve")),
    model_positional=True,
    # deprecated with `vllm serve` (which moves it to the front), and the api_server module's only way
    model_flag="--model",
    aliases=ALIASES,
    switches=SWITCHES,
    valued=FlagSet(value_flags(TABLE, ALIASES), dotted=True),
    table=TABLE,
)
