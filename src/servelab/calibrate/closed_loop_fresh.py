"""The fresh public closed-loop results (tests/data/closed_loop_fresh, pinned by
scripts/refresh_closed_loop_fresh.py) read as replays: each row of points.csv as its client ran it
(docs/accuracy.md section 7, "Fresh closed-loop points": what a replay needs, per row).

Reading a replay never reads a measured column (TTFT, TPOT): the settings of a held-out row can be priced
to check that they are priceable without its measurement coming near. The measurements are read apart, one
part of the split at a time (read_measured), and the held-out part only when asked for by name.

Two sources:
- InferenceX pull request 1713 (`together_runner`, aggregated on 8 B200s): InferenceX's or SGLang's
  benchmark client with `--random-range-ratio 0`, so each request's prompt and output limits are drawn in
  [0, L]; the output stops early at EOS where the client does not ignore it. The replay runs the row's mean
  lengths (derived from the run's throughputs, the point's own `mean_*_tokens`) with the widest spread the
  simulator takes around a mean (MAX_SPREAD), 10 x C requests from an idle engine.
- InferenceX pull request 1208 (disaggregated on MI355X): `--random-range-ratio 1` with `--ignore-eos`, every
  request at the nominal lengths, one prefill node and one decode node; priced as `servelab estimate --mode
  disagg` prices one given split.

Warm-ups (2 x C where the client sent them) finish before the measured run starts (the clients gather them
first: InferenceX's utils/bench_serving/benchmark_serving.py), so every replay starts from an idle engine.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from servelab.calibrate.closed_loop import read_heldout
from servelab.calibrate.closed_loop_split import fresh_group_key
from servelab.calibrate.recipes import RunSettings
from servelab.calibrate.rows import read_rows as rows_of
from servelab.engines import Engine, engine_of
from servelab.errors import ServelabError
from servelab.predict.plan.split import Split
from servelab.specs import ENGINE_KV_CACHE_DTYPES, ModelSpec, Parallel, load_model, load_system

POINTS = "points.csv"
TOGETHER = "inferencex-pr1713-together-b200"
MI355X_DISAGG = "inferencex-pr1208-mi355x-disagg"
# the simulator draws lengths uniform in mean x [1 - r, 1 + r] with r < 1 (serving.workload.Workload): the
# closest it comes to the together_runner client's [0, L]
MAX_SPREAD = 0.99

# The server flags each group's launch scripts set (points.csv's settings_from), as RunSettings. What the
# simulator does not price is recorded in `unpriced`.
SETTINGS: dict[tuple[str, Engine], RunSettings] = {
    # together_runner/run_2_launch_server.sh at 2a6a04c04 (run_sglang_2_launch_server.sh at 9e97721bf sets
    # the same): --chunked-prefill-size 16384 --max-running-requests 256 --cuda-graph-max-bs 256
    # --mem-fraction-static 0.85 --kv-cache-dtype fp8_e4m3 --stream-interval 10 --disable-radix-cache
    (TOGETHER, Engine.SGLANG): RunSettings(
        recipe="InferenceX PR 1713 together_runner (SGLang dsr1-fp4)",
        max_num_batched_tokens=16384,
        max_num_seqs=256,
        cuda_graph_max_batch=256,
        memory_share=0.85,
        stream_interval=10,
        unpriced=(
            ("attention-backend", "trtllm_mla"),
            ("moe-runner-backend", "flashinfer_trtllm"),
            ("enable-flashinfer-allreduce-fusion", True),
            ("disable-radix-cache", True),
        ),
    ),
    # together_runner/run_2_launch_server.sh at 2a6a04c04, gptoss-fp4: vllm_config.yaml max-num-batched-tokens
    # 8192, max-cudagraph-capture-size 2048, no-enable-prefix-caching; --max-num-seqs 512
    # --gpu-memory-utilization 0.9 (GPU_MEM_UTIL's default)
    (TOGETHER, Engine.VLLM): RunSettings(
        recipe="InferenceX PR 1713 together_runner (vLLM gptoss-fp4)",
        max_num_batched_tokens=8192,
        max_num_seqs=512,
        cuda_graph_max_batch=2048,
        memory_share=0.9,
        unpriced=(("compilation-config", "fuse_allreduce_rms, eliminate_noops"),),
    ),
    # benchmarks/multi_node/vllm_disagg_utils/models.yaml at a88fcacf7 / 006dbc6f2: gpt-oss-120b's prefill
    # and decode flags are `--tensor-parallel-size 8` alone; MiniMax-M2.5's add --enable-expert-parallel
    # --all2all-backend mori --no-enable-prefix-caching --gpu-memory-utilization 0.95 --block-size 32 (the
    # same on both pools). The disaggregated estimate takes one engine profile for both pools and no memory
    # share: it runs the engine's defaults for the rest (at 1,024 + 1,024 tokens the KV cache of 512 clients
    # is a small part of eight 288 GiB GPUs either way).
    (MI355X_DISAGG, Engine.VLLM): RunSettings(
        recipe="InferenceX PR 1208 vllm_disagg_utils (MoRIIO KV transfer)",
        unpriced=(("kv-transfer", "MoRIIO"),),
    ),
}


def statistic_of(mode: str) -> str:
    """The statistic of the measured TTFT and TPOT a replay is compared with: the median where the result
    gives only medians and percentiles (together_runner, aggregated), the mean where the estimate states a
    mean (`servelab estimate --mode disagg`) and the result has one (benchmark_serving's mean_*)."""
    return "mean" if mode == "disagg" else "median"


@dataclass(frozen=True)
class FreshReplay:
    """One fresh point's settings, as its client ran it: no measured value."""

    row_id: str
    group: str  # the deployment group (closed_loop_split.fresh_group_key): a sweep without its concurrency
    heldout: bool
    source: str
    mode: str  # agg | disagg
    engine: Engine
    version: str
    system: str
    model: ModelSpec  # at the precision and KV-cache dtype the run used
    concurrency: int
    isl: int  # the mean prompt length replayed
    osl: int  # the mean output length replayed
    spread: float  # lengths uniform in mean x [1 - spread, 1 + spread] (0: every request the same)
    num_prompts: int
    warmups: int
    settings: RunSettings
    parallel: Parallel | None = None  # aggregated: the one replica's layout
    split: Split | None = None  # disaggregated: the two pools

    @property
    def statistic(self) -> str:
        return statistic_of(self.mode)


@dataclass(frozen=True)
class FreshMeasured:
    """A fresh point's measurement, at the statistic its replay is compared with."""

    ttft_ms: float
    tpot_ms: float
    ttft_p99_ms: float
    tpot_p99_ms: float


def read_rows(folder: Path) -> list[dict[str, str]]:
    path = folder / POINTS
    try:
        return rows_of(path)
    except OSError as e:
        raise ServelabError(f"{path}: cannot read ({e.strerror})", field="closed_loop_fresh") from None


def _int(row: dict[str, str], name: str) -> int:
    try:
        return int(row[name])
    except (KeyError, ValueError):
        raise ServelabError(
            f"{row.get('id', '?')}: {name} {row.get(name)!r} is not an integer", field=name
        ) from None


def _model(row: dict[str, str], configs: Mapping[str, Path]) -> ModelSpec:
    """The checkpoint at the run's KV-cache dtype: `auto` keeps the checkpoint's declared one
    (specs.ENGINE_KV_CACHE_DTYPES). `configs`: config.json files of checkpoints servelab does not embed, by
    lower-case checkpoint id."""
    name = row["model"]
    path = configs.get(name.lower())
    spelling = row["kv_cache_dtype"].strip().lower()
    if spelling not in ENGINE_KV_CACHE_DTYPES:
        raise ServelabError(f"{row['id']}: unknown KV-cache dtype {spelling!r}", field="kv_cache_dtype")
    kv = ENGINE_KV_CACHE_DTYPES[spelling]
    return load_model(str(path) if path else name, kv_dtype=kv.value if kv else None, hub=False)


def _lengths(row: dict[str, str]) -> tuple[int, int, float]:
    """The mean lengths replayed and their spread. A range ratio of 1 is fixed lengths (the nominal ones);
    together_runner's ratio 0 draws limits in [0, L] and may stop at EOS: its measured mean lengths, spread
    as widely as the simulator allows."""
    ratio = float(row["random_range_ratio"])
    if ratio == 1.0:
        return _int(row, "isl"), _int(row, "osl"), 0.0
    if row["source"] == TOGETHER and ratio == 0.0:
        isl = round(float(row["mean_input_tokens"]))
        osl = round(float(row["mean_output_tokens"]))
        return isl, osl, MAX_SPREAD
    raise ServelabError(f"{row['id']}: no replay rule for range ratio {ratio}", field="random_range_ratio")


def to_replay(row: dict[str, str], heldout: frozenset[str], configs: Mapping[str, Path]) -> FreshReplay:
    """One row's replay (its measured columns are not read)."""
    engine = engine_of(row["engine"])
    settings = SETTINGS.get((row["source"], engine))
    if settings is None:
        raise ServelabError(f"{row['id']}: no server settings for {row['source']}", field="source")
    load_system(row["system"])  # a one-line error for a system servelab does not embed
    isl, osl, spread = _lengths(row)
    parallel = split = None
    if row["mode"] == "agg":
        parallel = Parallel(
            tp=_int(row, "tp"), ep=_int(row, "ep"), pp=_int(row, "pp"), dp_attn=row["dp_attention"] == "true"
        )
    elif row["mode"] == "disagg":
        split = Split(
            Parallel(tp=_int(row, "prefill_tp"), ep=_int(row, "prefill_ep")),
            _int(row, "prefill_workers"),
            Parallel(tp=_int(row, "decode_tp"), ep=_int(row, "decode_ep")),
            _int(row, "decode_workers"),
        )
    else:
        raise ServelabError(f"{row['id']}: mode {row['mode']!r}; expected agg or disagg", field="mode")
    return FreshReplay(
        row_id=row["id"],
        group=fresh_group_key(row),
        heldout=row["id"] in heldout,
        source=row["source"],
        mode=row["mode"],
        engine=engine,
        version=row["engine_version"],
        system=row["system"],
        model=_model(row, configs),
        concurrency=_int(row, "concurrency"),
        isl=isl,
        osl=osl,
        spread=spread,
        num_prompts=_int(row, "num_prompts"),
        warmups=_int(row, "num_warmups"),
        settings=settings,
        parallel=parallel,
        split=split,
    )


def read_replays(folder: Path, configs: Mapping[str, Path]) -> list[FreshReplay]:
    """Every row of the folder's points.csv as a replay, with its side of the split (heldout.txt)."""
    heldout = read_heldout(folder / "heldout.txt")
    return [to_replay(row, heldout, configs) for row in read_rows(folder)]


def read_measured(folder: Path, *, heldout: bool) -> dict[str, FreshMeasured]:
    """The measurements of one part of the split, by row id: the development part (heldout=False) or the
    held-out part (heldout=True, for its one comparison at the end). Rows of the other part are not read."""
    held = read_heldout(folder / "heldout.txt")
    out = {}
    for row in read_rows(folder):
        if (row["id"] in held) != heldout:
            continue
        stat = statistic_of(row["mode"])
        out[row["id"]] = FreshMeasured(
            ttft_ms=float(row[f"ttft_{stat}_ms"]),
            tpot_ms=float(row[f"tpot_{stat}_ms"]),
            ttft_p99_ms=float(row["ttft_p99_ms"]),
            tpot_p99_ms=float(row["tpot_p99_ms"]),
        )
    return out
