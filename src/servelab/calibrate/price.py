"""Pricing a measured case with servelab's predictor at given engine parameters.

Modes: `aggregated` runs the discrete-event aggregated-serving simulator at the row's concurrency (closed
loop, as the rows were measured); `static` prices one prefill of `concurrency` prompts and the mean decode
step of that batch.

A case with recipe settings (calibrate.recipes: the token budget, batch limits, memory share, KV-cache dtype
and TensorRT-LLM's hold rules its recipe set on its date) is priced with them over the engine's defaults, and
with the request lengths InferenceX's client drew (uniform in [0.8 L, L]).
"""

import re
from collections.abc import Mapping
from functools import cache
from typing import cast

from servelab.calibrate.clients import client_settings
from servelab.calibrate.params import FIT_START, KERNEL_FAMILIES, KERNEL_TERMS, PARAMS, TTFT_TERMS
from servelab.calibrate.pool import SERIAL, Jobs, try_price_rows
from servelab.calibrate.recipes import RunSettings
from servelab.calibrate.rows import ENGINES, Case
from servelab.engines import Engine
from servelab.errors import ServelabError
from servelab.perfdb.db import PerfDB, perfdb_for
from servelab.perfdb.keys import OpKey
from servelab.perfdb.latency import OpLatency
from servelab.predict.engines import EngineProfile, documented_profiles, vllm_batch
from servelab.predict.fit_reach import FitReach
from servelab.predict.memory import vllm_gpu_memory_utilization
from servelab.predict.serving import AggregatedEstimate, Workload, estimate_aggregated
from servelab.predict.static import estimate_static
from servelab.specs import Dtype, ModelSpec, SystemSpec

MODES = ("auto", "static", "aggregated")
# How the rows were measured, as the simulator replays it: `vllm bench serve`-style closed loop that starts
# from an idle engine (the first `concurrency` requests arrive together) and counts every request, with
# num_prompts = PROMPTS_PER_CONCURRENCY x concurrency (InferenceX's convention). 0 replays the simulator's own
# steady state instead (a warm-up wave excluded).
PROMPTS_PER_CONCURRENCY = 10
# Real benchmarks draw request lengths from a range, so clients fall out of step, and a closed loop of
# identical requests stays in lockstep (every wave prefills together): where the row's client is not known,
# each request's input and output lengths are drawn from U[1 - s, 1 + s] x the row's (mean kept), seeded per
# request; InferenceX rows (with recipe settings) get their client's rule (RunSettings.client_range_ratio),
# and with `as_sent` every silicon_sample.csv row without a recipe gets its campaign's (calibrate.clients:
# AIConfigurator's own rows at the nominal lengths).
LENGTH_SPREAD = 0.2
MAX_SCALED_DBS = 64  # kernel-factor trials kept per pricer; the Nelder-Mead simplex revisits only recent ones


def pick_mode(mode: str) -> str:
    """`auto` is the aggregated simulator (the static model stays available on request)."""
    return "aggregated" if mode == "auto" else mode


@cache
def base_profiles() -> dict[str, EngineProfile]:
    """Engine profiles from the documented defaults alone: fitting starts from them, and an existing
    calibrated.json must not leak into the fit."""
    return documented_profiles()


def defaults() -> dict[str, dict[str, float]]:
    return {e: {p: float(getattr(base_profiles()[e], p)) for p in PARAMS} for e in ENGINES}


def lengths_up_to(isl: int, osl: int, ratio: float) -> tuple[tuple[int, int], float]:
    """The mean lengths and the simulator's range ratio (traffic.lengths: uniform in [M(1 - q), M(1 + q)])
    that draw lengths uniform in [L x ratio, L], as InferenceX's client does: M = L(1 + ratio) / 2 and
    q = (1 - ratio) / (1 + ratio)."""
    means = (round(isl * (1 + ratio) / 2), round(osl * (1 + ratio) / 2))
    return means, (1 - ratio) / (1 + ratio)


@cache
def with_kv_dtype(model: ModelSpec, kv: Dtype | None) -> ModelSpec:
    """The model with the KV-cache dtype a recipe set (None: as the row was read)."""
    if kv is None or kv == model.precision.kv_cache:
        return model
    return model.model_copy(update={"precision": model.precision.model_copy(update={"kv_cache": kv})})


def fit_start() -> dict[str, dict[str, float]]:
    """Where each engine's fit starts: the documented defaults, moved off 0 where the search needs it."""
    return {e: {**p, **FIT_START} for e, p in defaults().items()}


class ScaledDB:
    """A PerfDB whose answers are scaled per op family (the only method the predictor calls is query)."""

    def __init__(self, db: PerfDB, scales: dict[str, float]):
        self.db, self.system = db, db.system
        self.factor = {cls: scales.get(name, 1.0) for cls, name in KERNEL_FAMILIES.items()}

    def query(self, key: OpKey) -> OpLatency:
        lat = self.db.query(key)
        f = self.factor.get(type(key).__name__, 1.0)
        return lat if f == 1.0 else lat.scaled(f)


class Pricer:
    """(ttft_ms, tpot_ms) servelab predicts for a case with given engine parameters, in one mode.

    `tables`: one PerfDB for every engine (default: each engine's own tables, the roofline where it has
    none)."""

    def __init__(
        self,
        system: SystemSpec,
        mode: str,
        prompts_per_concurrency: int = PROMPTS_PER_CONCURRENCY,
        length_spread: float = LENGTH_SPREAD,
        tables: PerfDB | None = None,
        as_sent: bool = False,
        aic_mixed_chunk: bool = False,
        moe_fits: Mapping[str, FitReach] | None = None,
    ):
        self.system, self.mode, self.tables = system, pick_mode(mode), tables
        # by engine, the rows a calibration fitted its MoE terms on, which bound where they apply (as for a
        # user: EngineProfile.running); none while fitting, where the terms are priced wherever they are
        self.moe_fits = moe_fits or {}
        self.prompts_per_concurrency, self.length_spread = prompts_per_concurrency, length_spread
        # silicon rows without a recipe replayed as their campaign's client sent them (calibrate.clients);
        # aic_mixed_chunk: AIConfigurator's SGLang rows also with --enable-mixed-chunk (a what-if)
        self.as_sent, self.aic_mixed_chunk = as_sent, aic_mixed_chunk
        self._scaled: dict[tuple, ScaledDB] = {}

    def __call__(self, case: Case, params: dict[str, float]) -> tuple[float, float]:
        extra = sum(params[name] * term(case) for name, term in TTFT_TERMS.items() if name in params)
        if self.mode == "aggregated":
            agg = self.estimate(case, params)
            return agg.ttft_ms + extra, agg.tpot_ms
        model, isl, osl, _, engine, _ = self._setup(case, params)
        db = self._db(params, case.engine)
        static = estimate_static(model, self.system, case.parallel, engine, case.concurrency, isl, osl, db=db)
        return static.ttft_ms + extra, static.tpot_ms

    def estimate(
        self, case: Case, params: dict[str, float], prefix_hit_rate: float = 0.0
    ) -> AggregatedEstimate:
        """The aggregated simulator's whole answer for a case (its percentiles as well as its means; the
        fitted TTFT_TERMS are not in it). `prefix_hit_rate`: the share of every prompt found in the prefix
        cache (a what-if; the rows are fitted at 0)."""
        model, isl, osl, spread, engine, memory_share = self._setup(case, params)
        k = self.prompts_per_concurrency
        sent = self._client(case)
        if k and sent is not None and sent.requests_per_client:
            k = sent.requests_per_client  # what the row's client sent
        wl = None
        if k:
            wl = Workload(
                isl=isl,
                osl=osl,
                concurrency=case.concurrency,
                warmup=0,
                num_requests=k * case.concurrency,
                range_ratio=spread,
                prefix_hit_rate=prefix_hit_rate,
            )
        return estimate_aggregated(
            model,
            self.system,
            case.parallel,
            engine,
            case.concurrency,
            isl,
            osl,
            db=self._db(params, case.engine),
            workload=wl,
            gpu_memory_utilization=memory_share,
            prefix_hit_rate=prefix_hit_rate,
        )

    def _setup(
        self, case: Case, params: dict[str, float]
    ) -> tuple[ModelSpec, int, int, float, EngineProfile, float | None]:
        """The model, mean lengths, length spread, engine profile and memory share a case is priced with."""
        update = {k: v for k, v in params.items() if k in PARAMS}
        memory_share = None  # the engine's own default (SGLang's is derived from the GPU and split)
        model, isl, osl, spread = case.model, case.isl, case.osl, self.length_spread
        settings = self._client(case)
        if settings is not None:
            update.update(settings.engine_overrides(base_profiles()[case.engine].max_num_batched_tokens))
            if "cuda_graph_max_batch" in update:  # the recipe's graph batch, not SGLang's rule by split
                update["cuda_graph_by_split"] = False
            memory_share = settings.memory_share
            model = with_kv_dtype(model, settings.kv_cache_dtype)
            if settings.state_dtype is not None:
                model = model.with_state_dtype(settings.state_dtype)
            if settings.client_range_ratio is not None:
                (isl, osl), spread = lengths_up_to(case.isl, case.osl, settings.client_range_ratio)
        base = base_profiles()[case.engine]
        if case.engine == Engine.VLLM:  # its batch defaults and memory share by the GPU and release, where
            gpu = self.system  # the recipe set none
            update.update(vllm_batch(base, gpu.hbm_gib, gpu.gpu_name, case.version or None, update))
            memory_share = memory_share or vllm_gpu_memory_utilization(case.version or None)
        engine = base.model_copy(update={**update, "moe_fit": self.moe_fits.get(case.engine)})
        return model, isl, osl, spread, engine, memory_share

    def _client(self, case: Case) -> RunSettings | None:
        """The settings a case ran with: its recipe's, else (replayed as sent) its campaign client's."""
        if case.settings is None and self.as_sent and case.silicon_source:
            return client_settings(
                case.silicon_source, case.engine, self.aic_mixed_chunk, case.concurrency, case.isl
            )
        return case.settings

    def _db(self, params: dict[str, float], engine: str) -> PerfDB | None:
        scales = tuple((n, params[n]) for n in KERNEL_TERMS if n in params)
        if not scales:
            return self.tables
        key = (engine, scales)
        if key not in self._scaled:
            if len(self._scaled) > MAX_SCALED_DBS:
                self._scaled.clear()
            self._scaled[key] = ScaledDB(self.tables or perfdb_for(self.system, engine), dict(scales))
        return cast(PerfDB, self._scaled[key])  # answers query() as a PerfDB does


def usable(cases: list[Case], price: Pricer, skipped: dict[str, int], jobs: Jobs = SERIAL) -> list[Case]:
    """Cases servelab can price at the default parameters; the others are counted with servelab's reason."""
    kept = []
    priced = try_price_rows([(c, {}) for c in cases], price, jobs, "usable rows (each at the defaults)")
    for case, got in zip(cases, priced, strict=True):
        if isinstance(got, ServelabError):
            reason = "servelab refuses: " + re.sub(r"\d+(\.\d+)?", "N", str(got))[:110]
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        kept.append(case)
    return kept
