"""`servelab bench`: a drop-in for `vllm bench serve` (same flags, metrics and result fields) that is never
the bottleneck. Thin: parse flags into BenchConfig points, call the library. Sweeps: comma lists in
--max-concurrency / --request-rate give one result file per point and a summary table."""

import json
from functools import partial
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError
from typer.core import TyperCommand

from servelab.bench import config as C
from servelab.bench.profiles import Load, apply_profile
from servelab.bench.ready import wait_for_server
from servelab.bench.vllm_compat import bare_profile, refuse_vllm_only, spread_values
from servelab.cli._common import print_json
from servelab.cli.pools import PoolOptions, Pools, pool_option
from servelab.engines import Engine
from servelab.errors import ServelabError
from servelab.progress import DEFAULT_INTERVAL_S
from servelab.traffic.lengths import BENCH_RANGE_RATIO

_GOODPUT_KEYS = ("ttft:", "tpot:", "e2el:")
# BenchConfig fields whose option is not the field's name hyphenated
_FLAGS = {
    "headers": "--header",
    "request_timeout_s": "--request-timeout",
    "progress_interval_s": "--progress-interval",
    "use_uvloop": "--uvloop",
    "trace_max_gap_s": "--trace-max-gap",
}
_TWIN = "Simulated twin (--simulate)"
_DISAGG = "Disaggregated"  # the pools' help: a disaggregated deployment


class BenchCommand(TyperCommand):
    """`servelab bench`: vLLM's options that servelab cannot apply are refused in one line naming the option
    and why (servelab.bench.vllm_compat), before the parser would call them unknown."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        refuse_vllm_only(args)
        return super().parse_args(ctx, spread_values(bare_profile(args)))


COMMAND_CLASS = BenchCommand  # servelab.cli.commands builds `servelab bench` with it


def _json_object(text: str | None, flag: str) -> dict | None:
    """A JSON object given on the command line (vLLM's --extra-body), or None when not given."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise ServelabError(f"{flag}: not JSON ({getattr(e, 'msg', e)})") from None
    if not isinstance(value, dict):
        raise ServelabError(f"{flag}: expected a JSON object, e.g. '{{\"key\": 1}}'")
    return value


def bench(
    base_url: str | None = typer.Option(
        None, "--base-url", help="Server base URL (default http://HOST:PORT)."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Server host, when --base-url is not given."),
    port: int = typer.Option(8000, "--port", help="Server port, when --base-url is not given."),
    endpoint: str = typer.Option(
        "/v1/completions", "--endpoint", help="/v1/completions or /v1/chat/completions."
    ),
    header: list[str] | None = typer.Option(
        None, "--header", help="KEY=VALUE, a header sent with every request (its value is never stored)."
    ),
    backend: str | None = typer.Option(
        None, "--backend", "--endpoint-type", help="openai | openai-chat | vllm (default: from --endpoint)."
    ),
    model: str | None = typer.Option(None, "--model", help="Model name; default: the first of /v1/models."),
    served_model_name: str | None = typer.Option(
        None, "--served-model-name", help="The model name sent in requests (default: --model)."
    ),
    lora_modules: list[str] | None = typer.Option(
        None,
        "--lora-modules",
        help="LoRA adapters (names the server serves): each request names one as its model.",
    ),
    lora_assignment: str = typer.Option(
        "random", "--lora-assignment", help="random (drawn by the seed) | round-robin."
    ),
    tokenizer: str | None = typer.Option(
        None,
        "--tokenizer",
        help="Tokenizer for exact lengths: a local path or a hub id in the local HF cache.",
    ),
    trust_remote_code: bool = typer.Option(
        False, "--trust-remote-code", help="Let transformers run the tokenizer's own code."
    ),
    tokenizer_mode: str = typer.Option(
        "auto",
        "--tokenizer-mode",
        help="auto | deepseek_v4: both load the checkpoint's tokenizer.json (vLLM's others are refused).",
    ),
    label: str | None = typer.Option(
        None, "--label", help="A name for this run, saved in the result (default: the request API)."
    ),
    dataset_name: str = typer.Option(
        "random",
        "--dataset-name",
        help="random | sharegpt | sonnet | hf | prefix (prefix_repetition) | multiturn | custom | "
        "speed_bench | trace (the same as --trace).",
    ),
    dataset_path: str | None = typer.Option(
        None,
        "--dataset-path",
        help="The dataset's file or folder (sharegpt, sonnet, hf, custom, speed_bench need one).",
    ),
    trace: str | None = typer.Option(
        None,
        "--trace",
        help="Replay an agentic trace (InferenceX's format: a JSON Lines file, one session a line, or a JSON "
        "file or a folder of them): its sessions' requests with their recorded waits and growing prompts; "
        "--max-concurrency counts sessions. The same as --dataset-name trace --dataset-path FILE.",
    ),
    trace_max_gap: float = typer.Option(
        300.0,
        "--trace-max-gap",
        help="trace: a recorded wait between a session's requests is cut to this many seconds (inf: none).",
    ),
    server_metrics_url: list[str] | None = typer.Option(
        None,
        "--server-metrics-url",
        help="trace: a Prometheus /metrics page read before and after the run for the prefix-cache hit rate "
        "(repeat, or a comma list, for every server of a deployment; default BASE_URL/metrics).",
    ),
    random_input_len: int = typer.Option(
        1024, "--random-input-len", "--input-len", help="random: prompt tokens per request."
    ),
    random_output_len: int = typer.Option(
        128, "--random-output-len", help="random: output tokens per request."
    ),
    output_len: int | None = typer.Option(
        None,
        "--output-len",
        help="vLLM's: output tokens of every dataset (random, sharegpt, custom, hf, spec_bench, prefix).",
    ),
    random_range_ratio: str = typer.Option(
        str(BENCH_RANGE_RATIO),
        "--random-range-ratio",
        help="random: the spread r of lengths around the set ones (--random-range-rule says how); or "
        '\'{"input": r1, "output": r2}\' for each its own (vLLM\'s JSON form).',
    ),
    random_range_rule: str = typer.Option(
        "vllm",
        "--random-range-rule",
        help="random: how the range ratio r spreads a length L: vllm, [L(1 - r), L(1 + r)]; inferencex, "
        "[int(L r), L] (InferenceX's client).",
    ),
    use_chat_template: bool = typer.Option(
        False,
        "--use-chat-template",
        help="random: prompts in the tokenizer's chat template, its tokens off the input length "
        "(InferenceX).",
    ),
    dsv4: bool = typer.Option(
        False,
        "--dsv4",
        help="random: DeepSeek-V4's chat framing instead of the template; implies --use-chat-template.",
    ),
    random_prefix_len: int = typer.Option(
        0, "--random-prefix-len", help="random: tokens of a prefix every prompt shares."
    ),
    prefix_repetition_prefix_len: int = typer.Option(
        256, "--prefix-repetition-prefix-len", help="prefix: tokens of each shared prefix."
    ),
    prefix_repetition_suffix_len: int = typer.Option(
        256, "--prefix-repetition-suffix-len", help="prefix: tokens after the prefix, each prompt its own."
    ),
    prefix_repetition_num_prefixes: int = typer.Option(
        10, "--prefix-repetition-num-prefixes", help="prefix: how many distinct prefixes."
    ),
    prefix_repetition_output_len: int = typer.Option(
        128, "--prefix-repetition-output-len", help="prefix: output tokens per request."
    ),
    multiturn_turns: int = typer.Option(4, "--multiturn-turns", help="Turns per conversation (multiturn)."),
    sharegpt_output_len: int | None = typer.Option(
        None, "--sharegpt-output-len", help="sharegpt: output tokens (default: each answer's length)."
    ),
    custom_output_len: int = typer.Option(
        256,
        "--custom-output-len",
        help="custom: output tokens of rows naming none (-1: every row names its own).",
    ),
    sonnet_input_len: int = typer.Option(550, "--sonnet-input-len", help="sonnet: prompt tokens."),
    sonnet_output_len: int = typer.Option(150, "--sonnet-output-len", help="sonnet: output tokens."),
    sonnet_prefix_len: int = typer.Option(
        200, "--sonnet-prefix-len", help="sonnet: tokens of the prefix every prompt shares."
    ),
    hf_split: str | None = typer.Option(None, "--hf-split", help="Split of a saved datasets folder."),
    hf_output_len: int | None = typer.Option(
        None, "--hf-output-len", help="hf: output tokens (default: each answer's length)."
    ),
    spec_bench_output_len: int = typer.Option(
        256, "--spec-bench-output-len", help="spec_bench: output tokens per request."
    ),
    spec_bench_category: str | None = typer.Option(
        None, "--spec-bench-category", help="spec_bench: only this category (default: all)."
    ),
    disable_shuffle: bool = typer.Option(
        False, "--disable-shuffle", help="Keep the dataset file's order (custom, spec_bench, sharegpt, ...)."
    ),
    no_oversample: bool = typer.Option(
        False,
        "--no-oversample",
        help="A file with fewer prompts than --num-prompts sends each once (default: drawn again).",
    ),
    skip_chat_template: bool = typer.Option(
        False,
        "--skip-chat-template",
        help="custom, spec_bench: send prompts as written (default, with a tokenizer: in its chat template).",
    ),
    chat_template_kwargs: str | None = typer.Option(
        None,
        "--chat-template-kwargs",
        help="custom, spec_bench: a JSON object of more variables for that chat template.",
    ),
    skip_tokenizer_init: bool = typer.Option(
        False, "--skip-tokenizer-init", help="Load no tokenizer (lengths approximate or from the server)."
    ),
    speed_bench_dataset_subset: str = typer.Option(
        "qualitative", "--speed-bench-dataset-subset", help="SPEED-Bench: reads DATASET_PATH/SUBSET.jsonl."
    ),
    speed_bench_category: str | None = typer.Option(
        None, "--speed-bench-category", help="SPEED-Bench: only this category (default: all)."
    ),
    speed_bench_output_len: int = typer.Option(
        4096, "--speed-bench-output-len", help="SPEED-Bench: output tokens per request."
    ),
    num_prompts: int | None = typer.Option(
        None,
        "--num-prompts",
        help="Requests (default 1000; conversations for multiturn; sessions for a trace, by default each "
        "trace once, or again and again until --max-seconds).",
    ),
    max_seconds: float | None = typer.Option(
        None, "--max-seconds", help="Stop sending after this long; requests in flight finish."
    ),
    max_concurrency: str | None = typer.Option(
        None, "--max-concurrency", help="An int, or a sweep: 1,2,4,8."
    ),
    request_rate: str | None = typer.Option(
        None, "--request-rate", help="req/s or inf, or a sweep: 1,5,inf; or 'sweep' (automatic)."
    ),
    sweep_rates: int = typer.Option(
        8,
        "--sweep-rates",
        min=1,
        max=100,
        help="--request-rate sweep: rates between the synchronous and the peak rate.",
    ),
    burstiness: float = typer.Option(
        1.0, "--burstiness", help="Gamma shape of arrival gaps (1 = Poisson; inf = evenly spaced)."
    ),
    profile: str | None = typer.Option(
        None,
        "--profile",
        help="GuideLLM's profiles: synchronous | throughput | concurrent (--max-concurrency N) | constant "
        "or poisson (--request-rate R) | sweep; each sets the load flags it names (docs/bench.md).",
    ),
    server_profile: bool = typer.Option(
        False,
        "--server-profile",
        help="vLLM's bare --profile: POST /start_profile after the warm-ups and /stop_profile after the run "
        "(the server's torch profiler; its --profiler-config must be set).",
    ),
    cool_down: float = typer.Option(
        0.0,
        "--cool-down",
        help="Seconds at the end of the run whose successful requests are left out of the metrics "
        "(GuideLLM's cool-down: the tail where the load drains).",
    ),
    ramp_up_strategy: str | None = typer.Option(None, "--ramp-up-strategy", help="linear | exponential."),
    ramp_up_start_rps: float | None = typer.Option(
        None, "--ramp-up-start-rps", help="--ramp-up-strategy: the rate at the start (req/s)."
    ),
    ramp_up_end_rps: float | None = typer.Option(
        None, "--ramp-up-end-rps", help="--ramp-up-strategy: the rate at the end (req/s)."
    ),
    ignore_eos: bool | None = typer.Option(
        None, "--ignore-eos/--no-ignore-eos", help="Default: on for random, prefix and multiturn datasets."
    ),
    temperature: float | None = typer.Option(0.0, "--temperature", help="Sampling temperature (0: greedy)."),
    top_p: float | None = typer.Option(None, "--top-p", help="Nucleus sampling (default: the server's)."),
    top_k: int | None = typer.Option(None, "--top-k", help="Top-k sampling (default: the server's)."),
    min_p: float | None = typer.Option(None, "--min-p", help="Min-p sampling (default: the server's)."),
    frequency_penalty: float | None = typer.Option(
        None, "--frequency-penalty", help="Frequency penalty (default: the server's)."
    ),
    presence_penalty: float | None = typer.Option(
        None, "--presence-penalty", help="Presence penalty (default: the server's)."
    ),
    repetition_penalty: float | None = typer.Option(
        None, "--repetition-penalty", help="Repetition penalty (default: the server's)."
    ),
    logprobs: int | None = typer.Option(
        None, "--logprobs", help="Logprobs per token (chat API: logprobs and top_logprobs)."
    ),
    extra_body: str | None = typer.Option(
        None,
        "--extra-body",
        help="A JSON object merged into every request body, over the sampling keys, e.g. "
        '\'{"chat_template_kwargs": {"enable_thinking": false}}\'.',
    ),
    request_id_prefix: str | None = typer.Option(
        None,
        "--request-id-prefix",
        help="Each request's X-Request-Id is this and its index (default: bench-, a random id, -).",
    ),
    stream: bool = typer.Option(
        True, "--stream/--no-stream", help="Streamed responses (TTFT and ITL need a stream)."
    ),
    ttft_at: str = typer.Option(
        "first-event",
        "--ttft-at",
        help="Where TTFT is taken: first-event, the first streamed event with a choice (vLLM's rule; on the "
        "chat API its role event); first-content, the first carrying text (GuideLLM's).",
    ),
    goodput: list[str] | None = typer.Option(None, "--goodput", help="SLOs in ms: ttft:X tpot:Y e2el:Z."),
    percentile_metrics: str = typer.Option(
        "ttft,tpot,itl",
        "--percentile-metrics",
        help="Metrics whose percentiles are shown: ttft,tpot,itl,e2el.",
    ),
    metric_percentiles: str = typer.Option(
        "99", "--metric-percentiles", help="Percentiles shown, a comma list, e.g. 50,90,99."
    ),
    num_warmups: int = typer.Option(
        0, "--num-warmups", help="Requests sent before the run at its concurrency, not recorded."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the dataset and the arrival times."),
    outputs: str | None = typer.Option(
        None,
        "--outputs",
        help="Also write these formats of the run, a comma list of json, yaml, csv, html (GuideLLM's "
        "--outputs): YAML beside each result, one CSV (a row per point) and one HTML report; implies "
        "--save-result.",
    ),
    save_result: bool = typer.Option(
        False, "--save-result", help="Write the result file (and its per-request records beside it)."
    ),
    as_json: bool = typer.Option(
        False,
        "--json",
        help="Print the results as one JSON answer on stdout (schema servelab.bench; the summary goes to "
        "stderr).",
    ),
    append_result: bool = typer.Option(
        False,
        "--append-result",
        help="Add the result to the result file as one more JSON line (made when missing).",
    ),
    save_detailed: bool = typer.Option(
        False, "--save-detailed", help="Also save per-request lists (lengths, TTFTs, ITLs, texts, errors)."
    ),
    result_dir: str | None = typer.Option(
        None, "--result-dir", help="Folder of the result file (default: the working directory)."
    ),
    result_filename: str | None = typer.Option(
        None,
        "--result-filename",
        help="Result file name (default: vLLM's, from the backend, rate and model).",
    ),
    metadata: list[str] | None = typer.Option(None, "--metadata", help="KEY=VALUE, saved in the result."),
    request_timeout: float = typer.Option(600.0, "--request-timeout", help="Per-request limit in seconds."),
    max_response_mib: float = typer.Option(
        64.0, "--max-response-mib", help="A larger response fails (bounds the client's memory)."
    ),
    num_workers: int = typer.Option(
        0,
        "--num-workers",
        help="Client processes, each with its round-robin share of the requests and of --max-concurrency; "
        "0 = one per core (--simulate: 0 is one client with one queue, as vLLM's bench serve).",
    ),
    live: bool | None = typer.Option(None, "--live/--no-live", help="Live line (default: on a terminal)."),
    disable_tqdm: bool = typer.Option(False, "--disable-tqdm", help="vLLM's flag; same as --no-live."),
    progress_interval: float = typer.Option(
        DEFAULT_INTERVAL_S,
        "--progress-interval",
        help="Without the live line (stderr not a terminal: a pipe, a CI log), a plain progress line every "
        "this many seconds; 0: only the last.",
    ),
    uvloop: bool = typer.Option(True, "--uvloop/--no-uvloop", help="Use uvloop when installed."),
    ready_check: bool = typer.Option(
        True, "--ready-check/--no-ready-check", help="Send one test request before the run (as vLLM does)."
    ),
    ready_check_timeout_sec: int | None = typer.Option(
        None,
        "--ready-check-timeout-sec",
        help="vLLM's: wait up to this many seconds for the server to answer before the run; 0: no ready "
        "check (unset: one ready request, no waiting).",
    ),
    insecure: bool = typer.Option(False, "--insecure", help="https: do not verify the server's certificate."),
    extra: list[str] | None = typer.Argument(
        None, hidden=True, help="More --goodput KEY:VALUE or --metadata KEY=VALUE values."
    ),
    simulate: bool = typer.Option(
        False,
        "--simulate",
        help="Predict this run on a deployment instead of sending it.",
        rich_help_panel=_TWIN,
    ),
    explain: bool = typer.Option(
        False,
        "--explain",
        help="Also print where the predicted TTFT goes, term by term (the result file: explain).",
        rich_help_panel=_TWIN,
    ),
    system: str | None = typer.Option(
        None, "--system", help="System name (servelab systems).", rich_help_panel=_TWIN
    ),
    tp: int = typer.Option(1, "--tp", help="Tensor parallel size.", rich_help_panel=_TWIN),
    ep: int = typer.Option(1, "--ep", help="Expert parallel size.", rich_help_panel=_TWIN),
    dp_attn: bool = typer.Option(False, "--dp-attn", help="Data-parallel attention.", rich_help_panel=_TWIN),
    pp: int = typer.Option(1, "--pp", help="Pipeline parallel stages.", rich_help_panel=_TWIN),
    engine: str = typer.Option(
        Engine.VLLM.value,
        "--engine",
        help="vllm | sglang | trtllm (--backend stays the request API).",
        rich_help_panel=_TWIN,
    ),
    weight_dtype: str | None = typer.Option(
        None, "--weight-dtype", help="Override weight dtype.", rich_help_panel=_TWIN
    ),
    kv_dtype: str | None = typer.Option(
        None,
        "--kv-dtype",
        "--kv-cache-dtype",
        help="Override KV-cache dtype: bf16 or fp8.",
        rich_help_panel=_TWIN,
    ),
    max_num_seqs: int | None = typer.Option(
        None, "--max-num-seqs", help="Sequences per step (default: the engine's).", rich_help_panel=_TWIN
    ),
    max_num_batched_tokens: int | None = typer.Option(
        None,
        "--max-num-batched-tokens",
        "--chunked-prefill-size",
        "--max-num-tokens",
        help="Token budget per step (SGLang: chunked-prefill size; TensorRT-LLM: max_num_tokens).",
        rich_help_panel=_TWIN,
    ),
    max_cudagraph_capture_size: int | None = typer.Option(
        None,
        "--max-cudagraph-capture-size",
        "--cuda-graph-max-bs",
        help="Largest step a CUDA graph replays (vLLM: tokens; SGLang: decode batch). Default: the engine's.",
        rich_help_panel=_TWIN,
    ),
    chunked_prefill: bool | None = typer.Option(
        None, "--chunked-prefill/--no-chunked-prefill", help="Default: the engine's.", rich_help_panel=_TWIN
    ),
    block_size: int = typer.Option(
        16, "--block-size", help="KV block (page) size in tokens.", rich_help_panel=_TWIN
    ),
    enable_prefix_caching: bool | None = typer.Option(
        None,
        "--enable-prefix-caching/--no-enable-prefix-caching",
        help="Reuse the KV cache of shared prefixes. Default: the engine's (vLLM, SGLang, TensorRT-LLM: on).",
        rich_help_panel=_TWIN,
    ),
    num_speculative_tokens: int = typer.Option(
        0, "--num-speculative-tokens", help="MTP draft tokens per step.", rich_help_panel=_TWIN
    ),
    spec_acceptance: float = typer.Option(
        0.7, "--spec-acceptance", help="Acceptance of each draft token.", rich_help_panel=_TWIN
    ),
    gpu_memory_utilization: float | None = typer.Option(
        None,
        "--gpu-memory-utilization",
        help="vllm: share of the GPU; sglang: mem-fraction-static; trtllm: share of the free memory "
        "(default: vllm 0.92, trtllm 0.9; sglang: its own default for the GPU and split)",
        rich_help_panel=_TWIN,
    ),
    attention_dp_balance: bool | None = typer.Option(
        None,
        "--attention-dp-balance/--no-attention-dp-balance",
        help="TensorRT-LLM attention_dp_config.enable_balance (default off).",
        rich_help_panel=_TWIN,
    ),
    attention_dp_timeout_iters: int | None = typer.Option(
        None,
        "--attention-dp-timeout-iters",
        help="... its timeout_iters (default 50).",
        rich_help_panel=_TWIN,
    ),
    attention_dp_batching_wait_iters: int | None = typer.Option(
        None,
        "--attention-dp-batching-wait-iters",
        help="... its batching_wait_iters (default 10).",
        rich_help_panel=_TWIN,
    ),
    batch_wait_timeout_iters: int | None = typer.Option(
        None,
        "--batch-wait-timeout-iters",
        help="TensorRT-LLM batch_wait_timeout_iters (default 0: off).",
        rich_help_panel=_TWIN,
    ),
    batch_wait_max_tokens_ratio: float | None = typer.Option(
        None,
        "--batch-wait-max-tokens-ratio",
        help="TensorRT-LLM batch_wait_max_tokens_ratio (default 0: off).",
        rich_help_panel=_TWIN,
    ),
    async_scheduling: bool | None = typer.Option(
        None,
        "--async-scheduling/--no-async-scheduling",
        help="vLLM's async scheduling: the next step formed while one runs (default on, as vLLM 0.14+).",
        rich_help_panel=_TWIN,
    ),
    stream_interval: int | None = typer.Option(
        None,
        "--stream-interval",
        min=1,
        help="Tokens a running request's streamed chunk waits for (vLLM, SGLang; default 1: every token).",
        rich_help_panel=_TWIN,
    ),
    calibration: Path | None = typer.Option(
        None,
        "--calibration",
        help="Engine calibration file (servelab calibrate engines --out); default: the shipped one.",
        rich_help_panel=_TWIN,
        show_default=False,
    ),
    prefill_tp: int | None = pool_option("prefill", "tp", _TWIN, _DISAGG),
    prefill_ep: int | None = pool_option("prefill", "ep", _TWIN, _DISAGG),
    prefill_dp_attn: bool = pool_option("prefill", "dp_attn", _TWIN, _DISAGG),
    prefill_workers: int | None = pool_option("prefill", "workers", _TWIN, _DISAGG),
    decode_tp: int | None = pool_option("decode", "tp", _TWIN, _DISAGG),
    decode_ep: int | None = pool_option("decode", "ep", _TWIN, _DISAGG),
    decode_dp_attn: bool = pool_option("decode", "dp_attn", _TWIN, _DISAGG),
    decode_workers: int | None = pool_option("decode", "workers", _TWIN, _DISAGG),
    router: str | None = typer.Option(
        None,
        "--router",
        help="Disaggregated: how the router picks a worker of each pool: round-robin (default) | "
        "least-loaded.",
        rich_help_panel=_TWIN,
    ),
) -> int:
    """Benchmark an OpenAI-compatible server like `vllm bench serve`, with a client that is never the
    bottleneck."""
    # the load generator (numpy, multiprocessing, rich) costs every servelab command's start-up time
    from servelab.bench.runner import run, run_rate_sweep  # noqa: PLC0415

    goodput_items, metadata_items = list(goodput or []), list(metadata or [])
    for token in extra or []:  # vLLM takes several values after one --goodput / --metadata flag
        if token.startswith(_GOODPUT_KEYS):
            goodput_items.append(token)
        elif "=" in token:
            metadata_items.append(token)
        else:
            raise ServelabError(
                f"unexpected argument {token!r} (values of --goodput are KEY:VALUE, of --metadata KEY=VALUE)"
            )
    if not 1 <= port <= 65535:
        raise ServelabError(f"--port {port} is not in 1-65535")
    try:
        load = apply_profile(profile, Load(max_concurrency, request_rate, burstiness))
    except ValueError as e:
        raise ServelabError(str(e)) from None
    max_concurrency, request_rate, burstiness = load.max_concurrency, load.request_rate, load.burstiness
    try:
        formats = C.parse_outputs(outputs) if outputs else ()
        in_ratio, out_ratio = C.parse_range_ratio(random_range_ratio)
    except ValueError as e:
        raise ServelabError(str(e)) from None
    auto_sweep = (request_rate or "").strip().lower() == "sweep"
    if trace is not None:
        if dataset_path is not None or dataset_name not in ("random", "trace"):
            raise ServelabError("--trace FILE is the dataset: no --dataset-name or --dataset-path with it")
        dataset_name, dataset_path = "trace", trace

    try:
        concurrencies = C.parse_sweep(max_concurrency, "int", "--max-concurrency")
        rates = C.parse_sweep(None if auto_sweep else request_rate, "rate", "--request-rate")
        if auto_sweep and (len(concurrencies) > 1 or ramp_up_strategy or sweep_rates < 1):
            raise ValueError(
                "--request-rate sweep takes one --max-concurrency, no --ramp-up-strategy, --sweep-rates >= 1"
            )
        base = dict(
            base_url=base_url or f"http://{host}:{port}",
            endpoint=endpoint,
            headers=C.parse_headers(list(header or [])),
            model=model,
            served_model_name=served_model_name,
            lora_modules=lora_modules or None,
            lora_assignment=lora_assignment,
            tokenizer=tokenizer,
            trust_remote_code=trust_remote_code,
            tokenizer_mode=tokenizer_mode,
            skip_tokenizer_init=skip_tokenizer_init,
            label=label,
            dataset_name=dataset_name,
            dataset_path=dataset_path,
            random_input_len=random_input_len,
            random_output_len=random_output_len if output_len is None else output_len,
            random_range_ratio=in_ratio,
            random_output_range_ratio=out_ratio,
            random_range_rule=random_range_rule,
            use_chat_template=use_chat_template,
            dsv4=dsv4,
            random_prefix_len=random_prefix_len,
            prefix_repetition_prefix_len=prefix_repetition_prefix_len,
            prefix_repetition_suffix_len=prefix_repetition_suffix_len,
            prefix_repetition_num_prefixes=prefix_repetition_num_prefixes,
            prefix_repetition_output_len=(prefix_repetition_output_len if output_len is None else output_len),
            multiturn_turns=multiturn_turns,
            sharegpt_output_len=sharegpt_output_len if output_len is None else output_len,
            custom_output_len=custom_output_len if output_len is None else output_len,
            spec_bench_output_len=spec_bench_output_len if output_len is None else output_len,
            spec_bench_category=spec_bench_category,
            disable_shuffle=disable_shuffle,
            no_oversample=no_oversample,
            skip_chat_template=skip_chat_template,
            chat_template_kwargs=_json_object(chat_template_kwargs, "--chat-template-kwargs"),
            sonnet_input_len=sonnet_input_len,
            sonnet_output_len=sonnet_output_len,
            sonnet_prefix_len=sonnet_prefix_len,
            hf_split=hf_split,
            hf_output_len=hf_output_len if output_len is None else output_len,
            speed_bench_dataset_subset=speed_bench_dataset_subset,
            speed_bench_category=speed_bench_category,
            speed_bench_output_len=speed_bench_output_len,
            trace_max_gap_s=trace_max_gap,
            server_metrics_url=[
                u.strip() for item in server_metrics_url or [] for u in item.split(",") if u.strip()
            ],
            max_seconds=max_seconds,
            cool_down_s=cool_down,
            burstiness=burstiness,
            ramp_up_strategy=ramp_up_strategy,
            ramp_up_start_rps=ramp_up_start_rps,
            ramp_up_end_rps=ramp_up_end_rps,
            ignore_eos=ignore_eos,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            min_p=min_p,
            frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty,
            repetition_penalty=repetition_penalty,
            logprobs=logprobs,
            extra_body=_json_object(extra_body, "--extra-body"),
            stream=stream,
            ttft_at=ttft_at,
            goodput=C.parse_goodput(goodput_items),
            percentile_metrics=[m.strip() for m in percentile_metrics.split(",") if m.strip()],
            metric_percentiles=[float(p) for p in metric_percentiles.split(",") if p.strip()],
            num_warmups=num_warmups,
            seed=seed,
            save_result=save_result or save_detailed or append_result or bool(formats),
            append_result=append_result,
            save_detailed=save_detailed,
            result_dir=result_dir,
            metadata=C.parse_metadata(metadata_items),
            request_timeout_s=request_timeout,
            max_response_mib=max_response_mib,
            num_workers=num_workers,
            live=False if disable_tqdm else live,
            progress_interval_s=progress_interval,
            use_uvloop=uvloop,
            ready_check=ready_check and ready_check_timeout_sec != 0,
            ready_check_timeout_sec=ready_check_timeout_sec,
            insecure=insecure,
            server_profile=server_profile,
        )
        if request_id_prefix is not None:  # unset: vLLM's, a fresh random one (BenchConfig's default)
            base["request_id_prefix"] = request_id_prefix
        if backend is not None:
            base["backend"] = backend
        if num_prompts is not None:  # unset: a trace replays each of its sessions once (BenchConfig: 1000)
            base["num_prompts"] = num_prompts
        sweep = len(concurrencies) * len(rates) > 1
        points = []
        for conc in concurrencies:
            for rate in rates:
                fields = dict(base, max_concurrency=conc)
                if rate is not None:
                    fields["request_rate"] = rate
                if result_filename:
                    name = result_filename
                    if sweep:
                        stem = name[:-5] if name.endswith(".json") else name
                        name = f"{stem}-c{conc}-r{rate if rate is not None else 'inf'}.json"
                    fields["result_filename"] = name
                points.append(C.BenchConfig(**fields))
    except ValidationError as e:
        raise ServelabError.from_validation(e, as_options=True, flags=_FLAGS) from None
    except ValueError as e:
        raise ServelabError(str(e)) from None
    if explain and not simulate:
        raise ServelabError("only with --simulate: it explains the twin's predicted TTFT", field="explain")
    if simulate and server_profile:
        raise ServelabError("--profile (the server's profiler): not with --simulate, which sends nothing")
    if simulate and append_result:
        raise ServelabError(
            "--append-result: not with --simulate, whose result is the file --save-result writes"
        )
    if simulate and out_ratio is not None and out_ratio != in_ratio:
        raise ServelabError(
            "not simulated: the twin draws both lengths with one ratio", field="random_range_ratio"
        )
    if simulate and as_json:
        raise ServelabError("--json: not with --simulate, whose result is the file --save-result writes")
    pools = Pools(
        PoolOptions(prefill_tp, prefill_ep, prefill_dp_attn, prefill_workers),
        PoolOptions(decode_tp, decode_ep, decode_dp_attn, decode_workers),
        router,
    )
    if not simulate and pools.given():
        raise ServelabError("only with --simulate", field=pools.given())
    if simulate:
        deployment: dict[str, Any] = dict(system=system, tp=tp, ep=ep, dp_attn=dp_attn, pp=pp)
        deployment.update(weight_dtype=weight_dtype, kv_dtype=kv_dtype)
        settings: dict[str, Any] = dict(engine=engine, max_num_seqs=max_num_seqs)
        settings.update(max_num_batched_tokens=max_num_batched_tokens, chunked_prefill=chunked_prefill)
        settings.update(max_cudagraph_capture_size=max_cudagraph_capture_size)
        settings.update(block_size=block_size, enable_prefix_caching=enable_prefix_caching)
        settings.update(num_speculative_tokens=num_speculative_tokens, spec_acceptance=spec_acceptance)
        settings.update(gpu_memory_utilization=gpu_memory_utilization)
        settings.update(
            attention_dp_balance=attention_dp_balance,
            attention_dp_timeout_iters=attention_dp_timeout_iters,
            attention_dp_batching_wait_iters=attention_dp_batching_wait_iters,
            batch_wait_timeout_iters=batch_wait_timeout_iters,
            batch_wait_max_tokens_ratio=batch_wait_max_tokens_ratio,
            async_scheduling=async_scheduling,
            stream_interval=stream_interval,
        )
        saved: list[Path] = []
        code = _simulate(points, auto_sweep, deployment, settings, calibration, saved, explain, pools)
        _write_outputs(result_filename, result_dir, saved, formats, as_json)
        return code
    wait_for_server(points[0])
    if auto_sweep:
        if points[0].dataset_name == "trace":
            raise ServelabError(
                "--request-rate sweep: a trace replays sessions at --max-concurrency, not a rate"
            )
        if as_json:
            raise ServelabError(
                "--json is for one point or a list sweep; --request-rate sweep prints a table"
            )
        saved = []
        code = run_rate_sweep(points[0], sweep_rates, saved=saved)
    else:
        saved = []
        json_out = (lambda dumps: print_json("servelab.bench", {"results": dumps})) if as_json else None
        if points[0].dataset_name == "trace":
            from servelab.bench.agentic.run import run_trace_point  # noqa: PLC0415 (start-up time, as above)

            code = run(points, json_out=json_out, saved=saved, point=run_trace_point)
        else:
            code = run(points, json_out=json_out, saved=saved)
    _write_outputs(result_filename, result_dir, saved, formats, as_json)
    return code


def _write_outputs(
    result_filename: str | None,
    result_dir: str | None,
    saved: list[Path],
    formats: tuple[str, ...],
    as_json: bool,
) -> None:
    """--outputs: the formats beyond the JSON result files, named after --result-filename (else the first
    result), beside them; a line naming what was written (stderr under --json)."""
    if not formats or not saved:
        return
    # the report page and its plotting load only when asked for
    from servelab.results.outputs import write_outputs  # noqa: PLC0415

    name = result_filename.removesuffix(".json") if result_filename else saved[0].stem
    stem = Path(result_dir or ".") / name
    written = write_outputs(saved, formats, stem, title=f"servelab bench: {name}")
    typer.echo("wrote: " + ", ".join(str(p) for p in [*saved, *written]), err=as_json)


def _simulate(
    points: list,
    auto_sweep: bool,
    deployment: dict,
    settings: dict,
    calibration: Path | None,
    saved: list[Path] | None = None,
    explain: bool = False,
    pools: Pools | None = None,
) -> int:
    """`--simulate`: each point's request stream replayed by the serving simulator (predict/twin.py; a
    disaggregated deployment, `pools` given: predict/twin_disagg.py) and written as a result file with the
    measured run's fields."""
    # the simulator and the result writer load only when a twin is asked for (start-up time)
    from servelab.bench import result as R  # noqa: PLC0415
    from servelab.bench.simulated import present_and_save, simulated_result  # noqa: PLC0415
    from servelab.cli._common import load_deployment  # noqa: PLC0415
    from servelab.cli.explain_table import print_explain  # noqa: PLC0415
    from servelab.predict.provenance import describe_shares, roofline_warning  # noqa: PLC0415
    from servelab.predict.twin import BenchStream, EngineSettings, simulate_benchmark  # noqa: PLC0415

    cfg0 = points[0]
    if auto_sweep:
        raise ServelabError("'sweep' is not simulated; give the rates, e.g. 1,5,inf", field="request_rate")
    if cfg0.max_seconds is not None:
        raise ServelabError("not simulated: the twin replays every prompt", field="max_seconds")
    if cfg0.dataset_name != "random":
        raise ServelabError(
            f"--simulate replays the random dataset, not {cfg0.dataset_name}", field="dataset_name"
        )
    if not cfg0.model or not deployment["system"]:
        raise ServelabError("--simulate needs --model (a checkpoint or model name) and --system")
    disagg = pools if pools is not None and pools.given() else None
    split = disagg.split(deployment) if disagg is not None else None
    spec, sys_spec, parallel = load_deployment(cfg0.model, **deployment, engine=settings["engine"])
    try:
        engine = EngineSettings(**settings)
    except ValidationError as e:
        raise ServelabError.from_validation(e, as_options=True) from None
    twin_of = partial(simulate_benchmark, spec, sys_spec, parallel, engine, explain=explain)
    if disagg is not None and split is not None:
        from servelab.predict.twin_disagg import simulate_disagg_benchmark  # noqa: PLC0415

        if explain:
            raise ServelabError("not with a disaggregated deployment", field="explain")
        twin_of = partial(simulate_disagg_benchmark, spec, sys_spec, split, engine, router=disagg.policy())
    for cfg in points:
        if cfg.save_result:
            R.check_path(Path(cfg.result_dir or "."), cfg.result_filename)
    for cfg in points:
        stream = BenchStream(
            **{name: getattr(cfg, name) for name in BenchStream.__dataclass_fields__}  # the same flags
        )
        twin = twin_of(
            stream=stream,
            percentile_metrics=cfg.percentile_metrics,
            percentiles=cfg.metric_percentiles,
            goodput_ms=cfg.goodput,
            calibration=calibration,
        )
        date = R.now_stamp()
        result = simulated_result(
            cfg, cfg0.model, date, twin.summary, twin.client_latency_ms, twin.requests, twin.extra_fields()
        )
        path = present_and_save(cfg, result, cfg0.model, date)
        if path is not None and saved is not None:
            saved.append(path)
        if twin.explain is not None:
            print_explain(twin.explain)
        for pool in ("prefill", "decode") if split is not None else ("",):
            shares = (twin.provenance[pool] if pool else twin.provenance)["kernel_time_by_source"]
            print(f"{pool + ' pool ' if pool else ''}kernel time by source: {describe_shares(shares)}")
            warning = roofline_warning(shares)
            if warning:
                print(warning)
    return 0
