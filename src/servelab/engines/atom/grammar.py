"""ATOM's server command: `python3 -m atom.entrypoints.openai_server --model M [flags]`.

Checked against ROCm/ATOM ffdf3bb5d (atom/model_engine/arg_utils.py EngineArgs.add_cli_args, and
atom/entrypoints/openai/api_server.py's own flags). Its FlexibleArgumentParser registers every long flag in
both spellings (`--kv_cache_dtype` and `--kv-cache-dtype` are one flag), and argparse takes unique prefixes.
The server listens on `--server-port`; its `--port` is the engine's internal communication port, not the
HTTP one. Boolean fields with a default of true are BooleanOptionalAction pairs (`--enable_prefix_caching` /
`--no-enable_prefix_caching`, the same for chunked prefill); `--enable-tbo`, `--all2all-backend` and
`--load_dummy` take an optional value. Speculative decoding is `--method mtp|eagle3|dspark` with
`--num-speculative-tokens` and `--draft-model`: flags servelab keeps as written (no typed field). No
captured releases: launches are not checked flag by flag against an image's ATOM version.
"""

from __future__ import annotations

from typing import Any

from servelab.engines.argv import FlagSet, canonical
from servelab.engines.grammar import Flag, Grammar, value_flags
from servelab.engines.names import Engine
from servelab.engines.settings import ServerSettings
from servelab.errors import ServelabError
from servelab.specs import Parallel

# argparse's short spellings and the second long name of a flag, as canonical names.
ALIASES = {
    "-tp": "--tensor-parallel-size",
    "-pp": "--pipeline-parallel-size",
    "-dp": "--data-parallel-size",
    "-dcp": "--decode-context-parallel-size",
    "-pcp": "--prefill-context-parallel-size",
    "--enable-eplb": "--eplb-enable",
}

# store_true flags (and the BooleanOptionalAction pairs), so a word after one of them is never its value.
SWITCHES = FlagSet(
    frozenset(
        canonical("--" + name)
        for name in """
        trust-remote-code enforce-eager enable-prefix-caching no-enable-prefix-caching enable-expert-parallel
        fake-eplb enable-dp-attention enable-chunked-prefill no-enable-chunked-prefill mark-trace
        enable-rapidserve disagg-constrained eplb-enable disable-uvicorn-access-log
        """.split()
    )
)

# ServerSettings fields as ATOM's flags, in the order servelab writes them.
TABLE = (
    Flag("host", "--host", "str"),
    Flag("port", "--server-port", "int"),
    Flag("served_model_name", "--served-model-name", "str"),
    Flag("tp", "--tensor-parallel-size", "int"),
    Flag("dp", "--data-parallel-size", "int"),
    Flag("pp", "--pipeline-parallel-size", "int"),
    Flag("dcp", "--decode-context-parallel-size", "int"),
    Flag("pcp", "--prefill-context-parallel-size", "int"),
    Flag("expert_parallel", "--enable-expert-parallel", "switch"),
    Flag("attention_dp", "--enable-dp-attention", "switch"),
    Flag("max_model_len", "--max-model-len", "int"),
    Flag("kv_cache_dtype", "--kv_cache_dtype", "str"),
    Flag("block_size", "--block-size", "int"),
    Flag("moe_backend", "--moe-backend", "str"),
    Flag("max_num_batched_tokens", "--max-num-batched-tokens", "int"),
    Flag("chunked_prefill", "--enable_chunked_prefill", "toggle", off="--no-enable_chunked_prefill"),
    Flag("max_num_seqs", "--max-num-seqs", "int"),
    Flag("memory_fraction", "--gpu-memory-utilization", "float"),
    Flag("prefix_caching", "--enable_prefix_caching", "toggle", off="--no-enable_prefix_caching"),
    Flag("trust_remote_code", "--trust-remote-code", "switch"),
)

# servelab's KV-cache dtypes -> ATOM's (`--kv_cache_dtype` choices: bf16, fp8).
KV_CACHE_DTYPES = {"fp8": "fp8", "fp8_e4m3": "fp8", "bf16": "bf16", "auto": "bf16"}


class AtomGrammar(Grammar):
    def layout(self, tp: int, ep: int, pp: int, dp_attn: bool, dcp: int = 1, pcp: int = 1) -> dict[str, Any]:
        """-tp N; expert parallel spans the TP ranks (a switch, as vLLM's); attention DP is a switch inside
        the TP group (InferenceX's scripts pass `-tp N --enable-dp-attention`, no -dp)."""
        out: dict[str, Any] = {"tp": tp}
        if ep > 1:
            if ep != tp:
                raise ServelabError(
                    f"ep={ep}: ATOM's --enable-expert-parallel spans the {tp} TP ranks; set ep to {tp} or 1"
                )
            out["expert_parallel"] = True
        if dp_attn:
            out["attention_dp"] = True
        if pp > 1:
            out["pp"] = pp
        if dcp > 1:
            out["dcp"] = dcp
        if pcp > 1:
            out["pcp"] = pcp
        return out

    def parallel(self, s: ServerSettings, is_moe: bool) -> Parallel:
        """-tp GPUs per stage; --enable-expert-parallel puts the experts on all of them."""
        if (s.dp or 1) > 1:
            raise ValueError(f"--data-parallel-size {s.dp}: replicas, not one deployment")
        tp = s.tp or 1
        ep = tp if is_moe and s.expert_parallel else 1
        return Parallel(tp=tp, ep=ep, dp_attn=s.attention_dp, pp=s.pp or 1)


GRAMMAR = AtomGrammar(
    engine=Engine.ATOM,
    command=("python3", "-m", "atom.entrypoints.openai_server"),
    programs=(
        ("python3", "-m", "atom.entrypoints.openai_server"),
        ("python3", "-u", "-m", "atom.entrypoints.openai_server"),
        ("python3", "-m", "atom.entrypoints.openai.api_server"),
    ),
    model_positional=False,
    model_flag="--model",
    aliases=ALIASES,
    switches=SWITCHES,
    valued=FlagSet(value_flags(TABLE, ALIASES)),
    table=TABLE,
)
