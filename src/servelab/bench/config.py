"""BenchConfig: every `servelab bench` flag, validated and derived once (vLLM's names and meanings)."""

from __future__ import annotations

import itertools
import json
import math
import random
import uuid
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from servelab.bench.payload import check_base_url, check_header, check_header_value, split_credentials
from servelab.bench.vllm_compat import REFUSED_DATASETS, backend_reason
from servelab.metrics import LATENCY_METRICS, SLO_METRICS
from servelab.progress import DEFAULT_INTERVAL_S
from servelab.traffic.lengths import BENCH_RANGE_RATIO, RangeRule

TtftAt = Literal["first-event", "first-content"]
DatasetName = Literal[
    "random",
    "sharegpt",
    "sonnet",
    "hf",
    "prefix",
    "multiturn",
    "custom",
    "speed_bench",
    "spec_bench",
    "burstgpt",
    "trace",
]
# the datasets read from --dataset-path
FILE_DATASETS = ("sharegpt", "sonnet", "hf", "custom", "speed_bench", "spec_bench", "burstgpt", "trace")
# Bounds that keep a typo from asking for more than any server or this machine can hold: 16 Mi tokens per
# length (past every model's context), 10 M requests, 1 M concurrent requests, 1 TiB per response.
MAX_TOKENS = 1 << 24
MAX_REQUESTS = 10_000_000
MAX_CONCURRENCY = 1_000_000
MAX_RESPONSE_MIB = 1 << 20
# vLLM's --tokenizer-mode values and why servelab cannot take the ones it refuses: servelab loads a
# checkpoint's tokenizer.json (`tokenizers`, else transformers' AutoTokenizer), as auto and deepseek_v4 do
TOKENIZER_MODES = ("auto", "deepseek_v4")
REFUSED_TOKENIZER_MODES = {
    "slow": "servelab loads the fast tokenizer (tokenizer.json) only",
    "hf": "servelab picks the tokenizer loader itself (tokenizer.json, else transformers); leave it at auto",
    "mistral": "vLLM's mistral_common tokenizer is not loaded by servelab",
    "custom": "vLLM's registered custom tokenizers are not loaded by servelab",
}
DATASET_ALIASES = {
    "prefix_repetition": "prefix",
    "multi_turn": "multiturn",
    "multi-turn": "multiturn",
    "speed-bench": "speed_bench",
    "spec-bench": "spec_bench",
    "agentic": "trace",
}
# vLLM's sampling options, sent only when given (vLLM sends them in this order, then --extra-body over them)
SAMPLING_FIELDS = (
    "top_p",
    "top_k",
    "min_p",
    "temperature",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
)


def _request_id_prefix() -> str:
    """vLLM's default --request-id-prefix: bench-, 8 hex digits of a fresh UUID, -."""
    return f"bench-{uuid.uuid4().hex[:8]}-"


# InferenceX's replay caps a trajectory's idle gaps at 300 s (AIPERF_TRACE_IDLE_GAP_CAP_SECONDS)
TRACE_MAX_GAP_S = 300.0


class BenchConfig(BaseModel):
    """One benchmark point. Sweep lists are expanded before this model is built (one config per point)."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(
        "http://127.0.0.1:8000",
        description="server base URL (vLLM: --base-url or --host/--port); user:password@ is sent as basic "
        "auth and stripped from the stored URL",
    )
    endpoint: str = Field(
        "/v1/completions", description="API path; /v1/chat/completions selects the chat API"
    )
    backend: Literal["openai", "openai-chat", "vllm"] = Field(
        "openai", description="vLLM's --backend; derived from --endpoint when not given"
    )
    headers: dict[str, str] = Field(
        default_factory=dict, description="extra request headers (--header); values are never stored"
    )
    model: str | None = Field(None, description="model name sent to the server; None asks /v1/models")
    served_model_name: str | None = None
    lora_modules: list[str] | None = Field(
        None, description="vLLM's --lora-modules: each request names one of these as its model"
    )
    lora_assignment: Literal["random", "round-robin"] = Field(
        "random", description="which adapter a request names: random (drawn by the seed) or round-robin"
    )
    tokenizer: str | None = Field(
        None, description="tokenizer for exact lengths: a local path or a hub id in the local HF cache"
    )
    trust_remote_code: bool = Field(False, description="let transformers run the tokenizer's own code")
    tokenizer_mode: str = Field(
        "auto",
        description="vLLM's --tokenizer-mode: auto or deepseek_v4 (both load the checkpoint's "
        "tokenizer.json; DeepSeek-V4's chat framing is --dsv4); the others are refused with the reason",
    )
    label: str | None = None
    dataset_name: DatasetName = "random"
    dataset_path: str | None = None
    random_input_len: int = Field(1024, ge=1, le=MAX_TOKENS)
    random_output_len: int = Field(128, ge=1, le=MAX_TOKENS)
    random_range_ratio: float = Field(BENCH_RANGE_RATIO, ge=0.0, le=1.0)
    random_output_range_ratio: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="the output lengths' own range ratio (vLLM's --random-range-ratio "
        '\'{"input": r1, "output": r2}\'); None: random_range_ratio',
    )
    random_range_rule: RangeRule = Field(
        "vllm",
        description="servelab: how --random-range-ratio r spreads a length L: vllm, uniform in "
        "[L(1-r), L(1+r)] (r < 1); inferencex, uniform in [int(L r), L] (InferenceX's benchmark_serving.py)",
    )
    use_chat_template: bool = Field(
        False,
        description="random dataset: each prompt is a user message in the tokenizer's chat template, the "
        "template's tokens taken off the input length (InferenceX's client)",
    )
    dsv4: bool = Field(
        False,
        description="random dataset: DeepSeek-V4's chat framing instead of the tokenizer's template; implies "
        "use_chat_template (as InferenceX's run_benchmark_serving)",
    )
    random_prefix_len: int = Field(0, ge=0, le=MAX_TOKENS)
    prefix_repetition_prefix_len: int = Field(256, ge=1, le=MAX_TOKENS)
    prefix_repetition_suffix_len: int = Field(256, ge=1, le=MAX_TOKENS)
    prefix_repetition_num_prefixes: int = Field(10, ge=1, le=MAX_REQUESTS)
    prefix_repetition_output_len: int = Field(128, ge=1, le=MAX_TOKENS)
    multiturn_turns: int = Field(4, ge=1, le=10_000, description="turns per conversation (dataset multiturn)")
    sharegpt_output_len: int | None = Field(None, ge=1, le=MAX_TOKENS)
    custom_output_len: int = Field(
        256,
        ge=-1,
        le=MAX_TOKENS,
        description="custom: output tokens of rows that name none; -1 (vLLM's): every row names its own",
    )
    sonnet_input_len: int = Field(550, ge=1, le=MAX_TOKENS)
    sonnet_output_len: int = Field(150, ge=1, le=MAX_TOKENS)
    sonnet_prefix_len: int = Field(200, ge=0, le=MAX_TOKENS)
    hf_split: str | None = Field(None, description="split of a saved DatasetDict (default train)")
    hf_output_len: int | None = Field(None, ge=1, le=MAX_TOKENS)
    speed_bench_dataset_subset: str = Field(
        "qualitative", pattern=r"^[A-Za-z0-9_.-]+$", description="SPEED-Bench subset: reads SUBSET.jsonl"
    )
    speed_bench_category: str | None = Field(None, description="SPEED-Bench: only this category")
    speed_bench_output_len: int = Field(4096, ge=1, le=MAX_TOKENS)
    num_prompts: int = Field(
        1000,
        ge=1,
        le=MAX_REQUESTS,
        description="requests (conversations for multiturn, sessions for trace; trace's default: each trace "
        "once, or traces again and again until --max-seconds)",
    )
    trace_max_gap_s: float = Field(
        TRACE_MAX_GAP_S,
        ge=0,
        allow_inf_nan=True,
        description="trace: a recorded wait between requests is cut to this many seconds (inf: none)",
    )
    server_metrics_url: list[str] = Field(
        default_factory=list,
        description="trace: the Prometheus pages read before and after the run for the prefix-cache hit rate "
        "(default: BASE_URL/metrics)",
    )
    max_seconds: float | None = Field(
        None, gt=0, description="stop sending after this long; requests in flight finish"
    )
    cool_down_s: float = Field(
        0.0,
        ge=0,
        le=86_400,
        allow_inf_nan=False,
        description="servelab (GuideLLM's cool-down): successful requests ending in the run's last this many "
        "seconds are left out of the metrics, and the duration ends where the cool-down starts",
    )
    max_concurrency: int | None = Field(None, ge=1, le=MAX_CONCURRENCY)
    request_rate: float = Field(math.inf, gt=0)
    burstiness: float = Field(
        1.0, gt=0, description="gamma shape of the arrival gaps: 1 = Poisson, inf = evenly spaced (constant)"
    )
    ramp_up_strategy: Literal["linear", "exponential"] | None = None
    ramp_up_start_rps: float | None = Field(None, gt=0)
    ramp_up_end_rps: float | None = Field(None, gt=0)
    ignore_eos: bool | None = Field(
        None, description="None: on for synthetic datasets (random, prefix, multiturn)"
    )
    temperature: float | None = Field(
        0.0, ge=0, allow_inf_nan=False, description="servelab defaults to greedy (0)"
    )
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=-1, le=MAX_TOKENS, description="-1 or 0: every token (vLLM)")
    min_p: float | None = Field(None, ge=0, le=1)
    frequency_penalty: float | None = Field(None, ge=-2, le=2, allow_inf_nan=False)
    presence_penalty: float | None = Field(None, ge=-2, le=2, allow_inf_nan=False)
    repetition_penalty: float | None = Field(None, gt=0, allow_inf_nan=False)
    logprobs: int | None = Field(
        None,
        ge=0,
        le=MAX_TOKENS,
        description="logprobs per token: the completions API's logprobs; on the chat API logprobs and "
        "top_logprobs",
    )
    extra_body: dict[str, Any] | None = Field(
        None, description="vLLM's --extra-body: JSON merged into every request body, over the sampling keys"
    )
    request_id_prefix: str | None = Field(
        None,
        description="each request's X-Request-Id is this prefix and its index (vLLM's x-request-id); None: "
        "vLLM's default, bench-, 8 random hex digits, - (made afresh for each point, not stored)",
    )
    skip_chat_template: bool = Field(
        False,
        description="vLLM's: custom and spec_bench prompts are sent as written; else, with a tokenizer, each "
        "is one user turn in its chat template (vLLM's client-side template)",
    )
    chat_template_kwargs: dict[str, Any] | None = Field(
        None, description="vLLM's: more variables for that client-side chat template"
    )
    disable_shuffle: bool = Field(
        False, description="keep the file's order (custom, spec_bench, sharegpt, speed_bench)"
    )
    no_oversample: bool = Field(
        False,
        description="a file with fewer prompts than --num-prompts sends each once (vLLM oversamples by "
        "default: custom, spec_bench, speed_bench)",
    )
    spec_bench_output_len: int = Field(256, ge=1, le=MAX_TOKENS)
    spec_bench_category: str | None = Field(None, description="spec_bench: only this category")
    skip_tokenizer_init: bool = Field(
        False, description="vLLM: load no tokenizer (lengths are approximate, or the server's usage)"
    )
    insecure: bool = Field(False, description="https: do not verify the server's certificate")
    server_profile: bool = Field(
        False,
        description="vLLM's bare --profile: POST /start_profile after the warm-ups and /stop_profile after "
        "the run",
    )
    append_result: bool = Field(
        False,
        description="vLLM's --append-result: add the result to an existing result file as one more JSON "
        "line (the file is made when missing)",
    )
    ready_check_timeout_sec: int | None = Field(
        None,
        ge=0,
        le=86_400,
        description="vLLM: wait up to this many seconds for the server before the ready check; 0: no "
        "ready check (vLLM 0.32's default; servelab's, unset, is one ready request)",
    )
    stream: bool = True
    ttft_at: TtftAt = Field(
        "first-event",
        description="where TTFT is taken: first-event, the first streamed event with a choice (vLLM's rule; "
        "on the chat API the role event); first-content, the first whose choice carries text (GuideLLM's)",
    )
    goodput: dict[str, float] = Field(default_factory=dict, description="SLOs in ms: ttft, tpot, e2el")
    percentile_metrics: list[str] = Field(default_factory=lambda: ["ttft", "tpot", "itl"])
    metric_percentiles: list[float] = Field(default_factory=lambda: [99.0])
    num_warmups: int = Field(0, ge=0, le=MAX_REQUESTS)
    seed: int = Field(0, ge=0, description="numpy takes no negative seed")
    save_result: bool = False
    save_detailed: bool = False
    result_dir: str | None = None
    result_filename: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    request_timeout_s: float = Field(600.0, gt=0, description="servelab: per-request wall limit")
    max_response_mib: float = Field(
        64.0,
        gt=0,
        le=MAX_RESPONSE_MIB,
        description="servelab: a response over this many MiB fails (bounds client memory)",
    )
    num_workers: int = Field(0, ge=0, le=1024, description="servelab: worker processes; 0 = one per core")
    live: bool | None = Field(None, description="servelab: live line; None = only on a terminal")
    progress_interval_s: float = Field(
        DEFAULT_INTERVAL_S,
        ge=0,
        le=86_400,
        allow_inf_nan=False,
        description="servelab: without the live line (a pipe, a CI log), a progress line every this many "
        "seconds; 0: only the last",
    )
    use_uvloop: bool = Field(True, description="servelab: use uvloop when it is installed")
    ready_check: bool = Field(True, description="send one test request before the run (vLLM does too)")
    _basic_auth: str | None = PrivateAttr(None)  # from user:password@ in base_url; never stored
    _rid_prefix: str = PrivateAttr("")  # the request-id prefix sent: request_id_prefix or a random one

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, v: str) -> str:
        return check_base_url(v.rstrip("/"))

    @field_validator("endpoint")
    @classmethod
    def _check_endpoint(cls, v: str) -> str:
        if check_header_value(v) and (" " in v or "?" in v or "#" in v):
            raise ValueError("must be a path without spaces, query or fragment")
        return v if v.startswith("/") else "/" + v

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, v: dict[str, str]) -> dict[str, str]:
        return dict(check_header(name, value) for name, value in v.items())

    @field_validator("server_metrics_url")
    @classmethod
    def _check_metrics_urls(cls, v: list[str]) -> list[str]:
        for url in v:
            if not url.startswith(("http://", "https://")) or any(c.isspace() for c in url):
                raise ValueError(f"{url!r} is not an http(s) URL")
        return v

    @field_validator("tokenizer_mode")
    @classmethod
    def _check_tokenizer_mode(cls, v: str) -> str:
        if v in REFUSED_TOKENIZER_MODES:
            raise ValueError(f"tokenizer mode {v} is not supported: {REFUSED_TOKENIZER_MODES[v]}")
        if v not in TOKENIZER_MODES:
            raise ValueError(f"tokenizer mode {v!r} is not one of {', '.join(TOKENIZER_MODES)}")
        return v

    @field_validator("dataset_name", mode="before")
    @classmethod
    def _alias_dataset(cls, v: object) -> object:
        if isinstance(v, str) and v in REFUSED_DATASETS:
            raise ValueError(f"vLLM's {v} is not supported: {REFUSED_DATASETS[v]}")
        return DATASET_ALIASES.get(v, v) if isinstance(v, str) else v

    @field_validator("backend", mode="before")
    @classmethod
    def _refuse_backend(cls, v: object) -> object:
        reason = backend_reason(v) if isinstance(v, str) else None
        if reason:
            raise ValueError(f"vLLM's {v} is not supported: {reason}")
        return v

    @field_validator("request_id_prefix")
    @classmethod
    def _check_request_id_prefix(cls, v: str | None) -> str | None:
        return None if v is None else check_header_value(v)

    @field_validator("percentile_metrics")
    @classmethod
    def _check_metrics(cls, v: list[str]) -> list[str]:
        for name in v:
            if name not in LATENCY_METRICS:
                raise ValueError(f"percentile metric {name!r} is not one of {', '.join(LATENCY_METRICS)}")
        return v

    @field_validator("metric_percentiles")
    @classmethod
    def _check_percentiles(cls, v: list[float]) -> list[float]:
        for p in v:
            if not 0 < p <= 100:
                raise ValueError(f"percentile {p} is not in (0, 100]")
        return v

    @field_validator("goodput")
    @classmethod
    def _check_goodput(cls, v: dict[str, float]) -> dict[str, float]:
        for name, ms in v.items():
            if name not in SLO_METRICS:
                raise ValueError(f"goodput SLO {name!r} is not one of {', '.join(SLO_METRICS)}")
            if ms < 0:
                raise ValueError(f"goodput SLO {name} must be >= 0 ms, got {ms}")
        return v

    @model_validator(mode="after")
    def _derive(self) -> BenchConfig:
        self.base_url, self._basic_auth = split_credentials(self.base_url)
        self._rid_prefix = self.request_id_prefix or _request_id_prefix()
        if "backend" not in self.model_fields_set:
            self.backend = "openai-chat" if self.endpoint.endswith("chat/completions") else "openai"
        if self.ramp_up_strategy is not None:
            if self.ramp_up_start_rps is None or self.ramp_up_end_rps is None:
                raise ValueError("ramp_up_strategy needs ramp_up_start_rps and ramp_up_end_rps")
            if not math.isinf(self.request_rate):
                raise ValueError("ramp_up_strategy replaces request_rate; leave request_rate at inf")
        if self.custom_output_len == 0:
            raise ValueError("custom_output_len must be >= 1, or -1 (each row's own output_tokens)")
        if self.dataset_name in FILE_DATASETS and not self.dataset_path:
            raise ValueError(f"dataset {self.dataset_name} needs dataset_path")
        if self.dataset_name == "trace" and not self.closed_loop:
            # sessions start as lanes free up (--max-concurrency), as InferenceX's replay runs its lanes
            raise ValueError(
                "a trace replays sessions at --max-concurrency; it takes no request_rate or ramp-up"
            )
        if self.ignore_eos is None:
            self.ignore_eos = self.dataset_name in ("random", "prefix", "multiturn", "trace")
        if (
            self.random_range_rule == "vllm"
            and max(self.random_range_ratio, self.random_output_range_ratio or 0.0) >= 1
        ):
            raise ValueError("random_range_ratio must be below 1 by the vllm rule ([L(1-r), L(1+r)])")
        if self.skip_tokenizer_init:
            self.tokenizer = None
        if self.dsv4:
            self.use_chat_template = True
        if self.use_chat_template:
            if self.dataset_name != "random":
                raise ValueError("use_chat_template (and dsv4) apply to the random dataset, as in InferenceX")
            # InferenceX's client takes its tokenizer from --model when none is given; servelab looks that id
            # up in the local Hugging Face cache (never downloads)
            self.tokenizer = self.tokenizer or self.model
        return self

    def request_models(self) -> Iterator[str | None]:
        """The model name of each request in order: None (the run's model) without --lora-modules, else
        one of them, round-robin or drawn by the seed, as vLLM assigns them."""
        loras = self.lora_modules
        if not loras:
            return itertools.repeat(None)
        if self.lora_assignment == "round-robin":
            return itertools.cycle(loras)
        rng = random.Random(self.seed)
        return (rng.choice(loras) for _ in itertools.count())

    def body_extras(self) -> dict[str, Any]:
        """What every request body carries beyond servelab's own keys: the sampling options given, logprobs,
        then --extra-body over them (vLLM's order)."""
        out: dict[str, Any] = {k: getattr(self, k) for k in SAMPLING_FIELDS if getattr(self, k) is not None}
        if self.logprobs is not None:
            if self.is_chat:
                out.update(logprobs=True, top_logprobs=self.logprobs)
            else:
                out["logprobs"] = self.logprobs
        out.update(self.extra_body or {})
        return out

    @property
    def rid_prefix(self) -> str:
        """The X-Request-Id prefix this point sends: --request-id-prefix, or vLLM's random default."""
        return self._rid_prefix

    @property
    def basic_auth(self) -> str | None:
        """The Authorization value from user:password@ in the given base URL, or None."""
        return self._basic_auth

    @property
    def is_chat(self) -> bool:
        return self.backend == "openai-chat"

    @property
    def closed_loop(self) -> bool:
        return math.isinf(self.request_rate) and self.ramp_up_strategy is None

    def public_dump(self) -> dict:
        """The full config for result files; request_rate inf is written as the string 'inf' like vLLM."""
        d = self.model_dump(mode="json")
        d["headers"] = {name: "(not stored)" for name in self.headers}
        for name in ("request_rate", "burstiness"):
            if math.isinf(getattr(self, name)):
                d[name] = "inf"
        return d


def parse_range_ratio(text: str) -> tuple[float, float | None]:
    """vLLM's --random-range-ratio: one number for input and output lengths, or a JSON object
    {"input": r1, "output": r2} (either key may be left out: 0) -> (input ratio, output ratio or None)."""
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        value = None
    if isinstance(value, dict):
        if set(value) - {"input", "output"} or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value.values()
        ):
            raise ValueError(
                f"--random-range-ratio {text!r}: a JSON object takes numbers under input and output only"
            )
        return float(value.get("input", 0.0)), float(value.get("output", 0.0))
    try:
        return float(text), None
    except ValueError:
        raise ValueError(
            f'--random-range-ratio {text!r}: expected a number or a JSON object {{"input": r, "output": r}}'
        ) from None


def parse_goodput(pairs: list[str]) -> dict[str, float]:
    """vLLM's --goodput KEY:VALUE pairs (ms). Accepts them space- or comma-separated."""
    out: dict[str, float] = {}
    for pair in (p for item in pairs for p in item.replace(",", " ").split()):
        name, sep, value = pair.partition(":")
        try:
            if not sep:
                raise ValueError
            out[name.strip()] = float(value)
        except ValueError:
            raise ValueError(
                f"goodput {pair!r} must be KEY:VALUE with a number in ms, e.g. ttft:500"
            ) from None
    return out


OUTPUT_FORMATS = ("json", "yaml", "csv", "html")


def parse_outputs(text: str) -> tuple[str, ...]:
    """--outputs 'json,csv' -> ('json', 'csv'); json is always among them (the others are made from it)."""
    asked = [f.strip().lower() for f in text.split(",") if f.strip()]
    if not asked or any(f not in OUTPUT_FORMATS for f in asked):
        raise ValueError(f"--outputs {text!r}: expected a comma list of {', '.join(OUTPUT_FORMATS)}")
    return tuple(f for f in OUTPUT_FORMATS if f in asked or f == "json")


def parse_metadata(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"metadata {item!r} must be KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def parse_headers(items: list[str]) -> dict[str, str]:
    """vLLM's --header KEY=VALUE values."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError("--header values must be KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def parse_sweep(text: str | None, kind: Literal["int", "rate"], flag: str) -> list[float | int | None]:
    """'1,2,4' -> [1, 2, 4]; rates accept 'inf'. None/'' -> [None] (flag not given). Errors name `flag`."""
    if text is None or str(text).strip() == "":
        return [None]
    out: list[float | int | None] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if kind == "int":
                value = int(part)
                if value < 1:
                    raise ValueError
                out.append(value)
            else:
                rate = float(part)
                if not rate > 0:
                    raise ValueError
                out.append(rate)
        except ValueError:
            what = "a positive integer" if kind == "int" else "a positive number or inf"
            raise ValueError(f"{flag}: {part!r} is not {what}") from None
    return out or [None]
