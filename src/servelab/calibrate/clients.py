"""The client a silicon_sample.csv row's campaign ran, for rows no recipe covers: who measured the row (its
`silicon_data_source`) decides the request lengths, and the engine flags that campaign's harness is known to
have set.

- InferenceX's runs (a measured time and an image, or a database dump): its client's lengths, uniform in
  [0.8 L, L] (recipes.INFERENCEX_RANGE_RATIO). So are the rows of a model's gap-analysis file
  (`source_file=qwen3.5-397b-gap-analysis.csv`, `kimi-k2.5-gap-analysis.csv`: a flat file named after the
  model, no campaign folder, added with ai-dynamo/aiconfigurator ed133e9d1 "add older bench data"): where the
  development part has InferenceX's row of the same deployment and load, the file's TTFT and TPOT are that
  row's to their two decimals (every one of Qwen3.5's 15 such points, 15 of Kimi-K2.5's 21), and they carry
  InferenceX's loads (1,024 / 8,192), which AIConfigurator's own campaign never ran (docs/accuracy.md, "Why
  Qwen3.5 is mispriced on Blackwell").
- AIConfigurator's own campaign (`aic-auto-gap-analysis`, and every other source): every request at the
  nominal lengths. Its eval harness of August 2025 (ai-dynamo/aiconfigurator 9610283,
  src/aiconfigurator/eval/benchmarks/genai_perf_runner.py: genai-perf with --synthetic-input-tokens-stddev 0,
  --output-tokens-stddev 0, min_tokens = max_tokens = osl and ignore_eos, 10 x C requests after 2 x C
  warm-up) and its generator's aiperf benchmark since February 2026
  (generator/config/backend_templates/benchmark/bench_run.sh.j2: --isl-stddev and --osl-stddev, 0 by default
  in generator/config/deployment_config.yaml).
- AIConfigurator's campaign's vLLM rows: the aggregated launch AIConfigurator's generator writes for vLLM
  (ai-dynamo/aiconfigurator, generator/rule_plugin/vllm.rule since 95ddf241a of 2025-12-04, the generator's
  first vLLM support: `agg max_num_tokens = max_batch_size + isl + 1500`, max_batch_size as max-num-seqs;
  config/backend_config_mapping.yaml renders them as vLLM's --max-num-batched-tokens and --max-num-seqs, the
  first in the vLLM command since 2cecd6596 of 2026-01-08). The campaign's dated vLLM rows are Dynamo
  deployments of 2026-01-23 (`image=nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.8.0`: the generator's, after
  both commits). Its undated vLLM rows (vLLM 0.12.0, no date, image or flags) are read the same way, an
  inference the rows do not record (they could predate 2cecd6596): the same campaign and release, and their
  first tokens ask for it (docs/accuracy.md, "vLLM's Qwen3-32B points on H100": at vLLM's 8,192 tokens
  seven 1,024-token prompts share a step, and the measured first tokens are about half as long as the
  twin's; of the budgets tried, this one, C + ISL + 1,500, fits the H100 Qwen3-32B rows at both prompt
  lengths best, where a fixed 2,048 misses the 4,096-token prompts and a fixed 4,096 the 1,024-token ones).

- AIConfigurator's campaign's TensorRT-LLM rows of a Dynamo deployment (`dynamo_version=` in the source,
  each worker holding the row's clients: no `silicon_concurrency=`): the aggregated launch its generator
  wrote at their dates (2026-01-23 and 25, Dynamo 0.8.0: generator/rule_plugin/trtllm.rule at 48756fd73 of
  2026-01-15 and 5e0243eb1 of 2026-01-24, `agg max_num_tokens = max_batch_size + SlaConfig.isl + 1500`,
  `agg_decode max_batch_size`, `agg_prefill_decode cuda_graph_batch_sizes = range(1, max_batch_size + 1)`;
  backend_templates/trtllm/extra_engine_args.1.2.0rc6.post1.yaml.j2: `enable_chunked_prefill` false and
  `free_gpu_memory_fraction` 0.80 unless set, and the generator sets neither). The campaign's undated
  TensorRT-LLM 1.0.0rc3 rows keep TensorRT-LLM's defaults: they record no launch, and they reject this one
  (docs/accuracy.md, "TensorRT-LLM's Qwen points on H100": their first tokens come out 0.5-0.7x at
  2,048-4,096-token prompts, and Llama-3.1-8B's 0.4-0.8x).

- How many requests a point of the campaign averaged (accuracy/aic_request_counts.py; docs/accuracy.md, "How
  AIConfigurator's campaign sent its requests"). A client stamps requests in whole nanoseconds, so a mean
  over N requests times N is a whole number of ns. Every undated TensorRT-LLM 1.0.0rc3 and SGLang point of
  the development part at 4-64 clients is whole over 20 x C requests (about half of them over 10 x C, as a
  pool of 20 x C gives), and some over 20 x C - 1: one pool of 20 x C requests with one lost, which two runs
  of 10 x C averaged could not give. Every undated vLLM 0.12.0 point is whole over 10 x C: the eval
  harness's genai-perf (`--concurrency C --request-count 10 x C --warmup-request-count 2 x C`, above). Their
  TPOTs divide the same way, so each request's inter-token latency was whole ns: genai-perf rounds it
  (genai_perf/profile_data_parser/llm_profile_data_parser.py), aiperf does not. genai-perf's perf_analyzer
  keeps C requests in flight (src/concurrency_worker.cc) and waits for the warm-up to drain before it
  measures (load_worker.cc WaitForOngoingRequests, load_manager.cc WaitForWarmupAndCleanup): a closed loop
  from an idle server, one first wave of C and then a steady loop, never a wave per C requests. The
  figure is the mean (a median would be whole over 1 or 2). The dated (Dynamo) rows show no consistent
  count and keep the replay's own.

SGLang's `--enable-mixed-chunk` on those rows cannot be decided from the evidence, so the rows keep SGLang's
default (off, `server_args.py`). AIConfigurator's generator sets it for aggregated SGLang since 2026-01-19
(fa895ffb1 and 07a377923: `agg enable_mixed_chunk = true` in generator/rule_plugin/sglang.rule; the first of
the two wrote the flag as `--enable-mix-chunk`, which SGLang does not know), but the campaign's rows
carry no date, no flags and no image (only `source_file=.../aic-auto-gap-analysis/data/SYSTEM/sglang/VERSION/
MODEL.csv`), its sweep harness is not public, and its versions' windows straddle that date (AIConfigurator's
H200 SGLang 0.5.6.post2 tables from 2025-12-22, 85bee563e; its next H200 SGLang tables, 0.5.9, 2026-03-06,
c86e3a44d). `mixed_chunk=True` replays them as if the generator's flag was set (a what-if, reported).
"""

import re
from dataclasses import replace

from servelab.calibrate.recipes import INFERENCEX_RANGE_RATIO, RunSettings
from servelab.engines import Engine

# every request at the nominal lengths: the [r L, L] rule at r = 1 (also InferenceX's token-position client,
# benchmark_serving_random.py `sample_random_requests`: "fixed lengths (no range variation)")
FIXED_LENGTHS = 1.0
AICONFIGURATOR_LENGTHS = FIXED_LENGTHS
# the silicon rows' sources that are InferenceX runs (a measured time and an image, a database dump, or a
# model's gap-analysis file: module docstring)
_GAP_ANALYSIS_FILE = r"source_file=[\w.-]+-gap-analysis\.csv(;|$)"
_INFERENCEX_SOURCE = re.compile(rf"^(source_file=\d{{4}}-\d\d-\d\d\.csv|db-dump/|{_GAP_ANALYSIS_FILE})")
_COPIED = re.compile(rf"^{_GAP_ANALYSIS_FILE}")
INFERENCEX_CLIENT = "InferenceX client"
AICONFIGURATOR_CLIENT = "AIConfigurator's benchmark"
# the folder of AIConfigurator's own campaign in a row's silicon_data_source
AICONFIGURATOR_CAMPAIGN = "aic-auto-gap-analysis"
# AIConfigurator's generator's aggregated vLLM token budget: the worker's batch + the ISL + this many tokens
# (generator/rule_plugin/vllm.rule, `agg max_num_tokens`; module docstring)
GENERATOR_BUDGET_MARGIN = 1500
# the KV share of the generator's TensorRT-LLM template (kv_cache_config.free_gpu_memory_fraction; docstring)
GENERATOR_TRTLLM_KV_SHARE = 0.80
# InferenceX's client warms the server with 2 x C requests before the measured ones since d053ae24e
# (2026-01-21, "upstream kimbochen/bench_serving, adding warmup": benchmarks/benchmark_lib.sh
# `--num-warmups "$((2 * max_concurrency))"`); before it the runner scripts ran kimbochen/bench_serving
# with no warm-up option (runners/launch_b200-nvd.sh at 79abd6cb4), so a row measured earlier includes what
# the server paid on the first use of a kernel
INFERENCEX_WARMUP_SINCE = "2026-01-21"
# N / C of the undated rows of AIConfigurator's campaign, by engine (module docstring)
UNDATED_CAMPAIGN_REQUESTS_PER_CLIENT = {Engine.TRTLLM: 20, Engine.SGLANG: 20, Engine.VLLM: 10}


def measured_by_inferencex(source: str) -> bool:
    """Whether a silicon row's `silicon_data_source` is an InferenceX run, else AIConfigurator's own."""
    return bool(_INFERENCEX_SOURCE.match(source))


def copied_from_inferencex(source: str) -> bool:
    """Whether a silicon row comes from a model's gap-analysis file, whose measurements are InferenceX's rows
    copied to two decimals (module docstring): where both are present, the copy is the one to leave out."""
    return bool(_COPIED.match(source))


def cold_inferencex_row(source: str, measured: str) -> bool:
    """Whether InferenceX's client measured this row (`silicon_data_source`) on a server it had not warmed
    up: a measured date (YYYY-MM-DD) before INFERENCEX_WARMUP_SINCE. An undated row is not called cold."""
    return measured_by_inferencex(source) and bool(measured) and measured < INFERENCEX_WARMUP_SINCE


def client_settings(
    source: str, engine: Engine, mixed_chunk: bool = False, clients: int = 0, isl: int = 0
) -> RunSettings:
    """How a row of this `silicon_data_source` was sent, where no recipe covers it (module docstring), with
    `clients` clients of `isl`-token prompts (0: not known, the engine's own limits); `mixed_chunk`: replay
    AIConfigurator's SGLang rows with --enable-mixed-chunk (not the evidence's rule)."""
    if measured_by_inferencex(source):
        return RunSettings(recipe=INFERENCEX_CLIENT, client_range_ratio=INFERENCEX_RANGE_RATIO)
    flag = True if mixed_chunk and engine == Engine.SGLANG else None
    sent = RunSettings(
        recipe=AICONFIGURATOR_CLIENT,
        client_range_ratio=AICONFIGURATOR_LENGTHS,
        mixed_chunk=flag,
        requests_per_client=campaign_requests_per_client(source, engine),
    )
    if AICONFIGURATOR_CAMPAIGN not in source or clients <= 0 or isl <= 0:
        return sent
    budget = clients + isl + GENERATOR_BUDGET_MARGIN
    if engine == Engine.VLLM:
        return replace(sent, max_num_batched_tokens=budget, max_num_seqs=clients)
    if engine == Engine.TRTLLM and generated_trtllm_worker(source):
        return replace(
            sent,
            recipe=f"{AICONFIGURATOR_CLIENT}, AIConfigurator's generator launch",
            max_num_batched_tokens=budget,
            max_num_seqs=clients,
            chunked_prefill=False,
            cuda_graph_max_batch=clients,
            memory_share=GENERATOR_TRTLLM_KV_SHARE,
        )
    return sent


def campaign_requests_per_client(source: str, engine: Engine) -> int | None:
    """The requests per client (N / C) a row of AIConfigurator's campaign averaged, where its figures show it:
    an undated row (no `measured=` in its `silicon_data_source`; module docstring). None: not known."""
    if AICONFIGURATOR_CAMPAIGN in source and "measured=" not in source:
        return UNDATED_CAMPAIGN_REQUESTS_PER_CLIENT.get(engine)
    return None


# the source note of a row AIConfigurator's campaign ran as a Dynamo deployment its generator wrote (`...;
# gtl_job_id=...; measured=...; image=nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.8.0; dynamo_version=0.8.0`)
_DYNAMO_DEPLOYMENT = re.compile(r"(^|;\s*)dynamo_version=")


def generated_deployment(source: str) -> bool:
    """Whether a row's `silicon_data_source` names a Dynamo version: a deployment AIConfigurator's generator
    wrote from its pick, KV-cache dtype included (calibrate.rows.fp8_kv_if_unmarked)."""
    return bool(_DYNAMO_DEPLOYMENT.search(source))


def generated_trtllm_worker(source: str) -> bool:
    """Whether a row's `silicon_data_source` is a Dynamo deployment AIConfigurator's generator wrote whose one
    worker held all the row's clients (no `silicon_concurrency`: the clients are the worker's batch)."""
    return generated_deployment(source) and "silicon_concurrency=" not in source
