"""SGLang's server command: `python3 -m sglang.launch_server --model-path M [flags]`, or `sglang serve`.

Checked against SGLang 0.5.23 (python/sglang/srt/server_args.py, srt/arg_groups/fields/*.py). Its parser is
plain argparse: hyphenated names only, unique prefixes accepted (so InferenceX's `--tp 8` and `--dp 8` are
`--tp-size` and `--dp-size`), every boolean field a store_true switch (all --enable-* and --disable-* flags
are switches). The KV-cache dtype names the FP8 format (fp8_e4m3), the radix cache is on unless
`--disable-radix-cache`, and chunked prefill is on unless `--chunked-prefill-size -1`.
"""

from __future__ import annotations

from typing import Any

from servelab.engines.argv import FlagSet, canonical
from servelab.engines.grammar import Flag, Grammar, value_flags
from servelab.engines.names import Engine
from servelab.engines.settings import ServerSettings
from servelab.errors import ServelabError
from servelab.specs import Parallel

# Other spellings of one flag: argparse aliases, and the unique prefixes InferenceX's scripts write.
ALIASES = {
    "--tensor-parallel-size": "--tp-size",
    "--tp": "--tp-size",
    "--data-parallel-size": "--dp-size",
    "--dp": "--dp-size",
    "--expert-parallel-size": "--ep-size",
    "--ep": "--ep-size",
    "--pipeline-parallel-size": "--pp-size",
    "--decode-context-parallel-size": "--dcp-size",
    "--model": "--model-path",
    "--speculative-draft-model": "--speculative-draft-model-path",
    "--nccl-init-addr": "--dist-init-addr",
}

# Boolean fields whose names do not start with enable / disable.
SWITCHES = FlagSet(
    frozenset(
        canonical("--" + name)
        for name in """
        trust-remote-code skip-tokenizer-init skip-server-warmup is-embedding language-only encoder-only
        language-model-only log-requests show-time-cost sleep-on-idle use-ray triton-attention-reduce-in-
        fp32 flashinfer-mla-disable-ragged debug-cuda-graph pre-warm-nccl enforce-disable-flashinfer-
        allreduce-fusion enforce-shared-experts-fusion ple-offload-embedding dllm-fdfo experts-shared-outer-
        loras lora-use-virtual-experts lora-strict-loading mm-enable-dp-encoder trust-mm-content-hashes
        quantize-and-serve weight-loader-disable-mmap weight-loader-prefetch-checkpoints weight-loader-drop-
        cache-after-load delete-ckpt-after-loading checkpoint-engine-wait-weights-before-ready export-
        metrics-to-file dcp-replicate-q-proj abort-on-priority-when-disabled schedule-low-priority-values-
        first prefill-only-disable-kv-cache smg-grpc-mode grpc-mode trust-request-chat-template return-
        input-ids return-output-ids strip-thinking-cache allow-auto-truncate stream-response-default-
        include-usage incremental-streaming-output constrained-json-disable-any-whitespace mlx-enable-
        sampling disaggregation-enable-kv-checksum disaggregation-decode-enable-radix-cache disaggregation-
        decode-enable-offload-kvcache speculative-dspark-align-verify-tokens-to-graph-tier speculative-use-
        rejection-sampling speculative-use-block-verification speculative-enable-w4a4-mxfp4-megamoe
        speculative-adaptive
        """.split()
    ),
    prefixes=("--enable-", "--disable-", "--no-"),
)

TABLE = (
    Flag("revision", "--revision", "str"),
    Flag("host", "--host", "str"),
    Flag("port", "--port", "int"),
    Flag("served_model_name", "--served-model-name", "str"),
    Flag("tp", "--tp", "int"),
    Flag("ep", "--ep", "int"),
    Flag("attention_dp", "--enable-dp-attention", "switch"),
    Flag("dp", "--dp", "int"),
    Flag("pp", "--pp-size", "int"),
    Flag("max_model_len", "--context-length", "int"),
    Flag("quantization", "--quantization", "str"),
    Flag("kv_cache_dtype", "--kv-cache-dtype", "str"),
    Flag("block_size", "--page-size", "int"),
    Flag("moe_backend", "--moe-runner-backend", "str"),
    Flag("tokenizer_mode", "--tokenizer-mode", "str"),
    Flag("tool_call_parser", "--tool-call-parser", "str"),
    Flag("reasoning_parser", "--reasoning-parser", "str"),
    Flag("max_num_batched_tokens", "--chunked-prefill-size", "int"),
    Flag("chunked_prefill", None, "toggle", off="--chunked-prefill-size", off_value="-1"),
    Flag("max_num_seqs", "--max-running-requests", "int"),
    Flag("memory_fraction", "--mem-fraction-static", "float"),
    Flag("prefix_caching", None, "toggle", off="--disable-radix-cache"),
    Flag("stream_interval", "--stream-interval", "int"),
    Flag("trust_remote_code", "--trust-remote-code", "switch"),
    Flag("speculative_config", "--speculative-", "prefixed"),
)

# servelab's KV-cache dtypes -> SGLang's names (it names the FP8 format).
KV_CACHE_DTYPES = {
    "fp8": "fp8_e4m3",
    "fp8_e4m3": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2",
    "auto": "auto",
    "bf16": "bf16",
}


class SglangGrammar(Grammar):
    def layout(self, tp: int, ep: int, pp: int, dp_attn: bool, dcp: int = 1, pcp: int = 1) -> dict[str, Any]:
        """Expert parallel spans the TP ranks; attention DP is tp attention replicas inside the TP group."""
        if dcp > 1 or pcp > 1:
            raise ServelabError("dcp-size/pcp-size: the SGLang adapter does not render context parallelism")
        out: dict[str, Any] = {"tp": tp}
        if ep > 1:
            if ep != tp:
                raise ServelabError(
                    f"ep={ep}: SGLang's expert parallel spans the {tp} TP ranks; set ep to {tp} or 1"
                )
            out["ep"] = ep
        if dp_attn:
            out |= {"attention_dp": True, "dp": tp}
        if pp > 1:
            out["pp"] = pp
        return out

    def parallel(self, s: ServerSettings, is_moe: bool) -> Parallel:
        """--tp-size GPUs per stage, --ep-size, --enable-dp-attention."""
        ep = (s.ep or 1) if is_moe else 1
        return Parallel(tp=s.tp or 1, ep=ep, dp_attn=s.attention_dp, pp=s.pp or 1)


GRAMMAR = SglangGrammar(
    engine=Engine.SGLANG,
    command=("python3", "-m", "sglang.launch_server"),
    programs=(("python3", "-m", "sglang.launch_server"), ("sglang", "serve")),
    model_positional=False,
    model_flag="--model-path",
    aliases=ALIASES,
    switches=SWITCHES,
    valued=FlagSet(value_flags(TABLE, ALIASES)),
    table=TABLE,
)
