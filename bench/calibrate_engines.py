"""Fit each engine's overhead parameters (per step, per sequence, kernel gaps, eager launch cost) on measured
end-to-end TTFT / TPOT, with leave-one-model-out cross-validation, and write them to
src/servelab/predict/data/calibrated.json with their provenance.

The measurements are AIConfigurator's `systems/silicon_sample.csv` (PyPI `aiconfigurator-core`, pinned below):
this script installs that package into its own venv (.cache/aic-venv, never the project venv), reads the file
from there, and commits nothing of it but the fitted numbers.

    .venv/bin/python bench/calibrate_engines.py                   # fit on h200_sxm rows, write calibrated.json
    .venv/bin/python bench/calibrate_engines.py --dry-run         # fit and report, write nothing
    .venv/bin/python bench/calibrate_engines.py --mode static     # price rows with the static model

Modes: `aggregated` runs servelab's discrete-event aggregated-serving simulator (servelab.predict.serving) at the
row's concurrency (closed loop, as the rows were measured); `static` prices one prefill of `concurrency` prompts
and the mean decode step of that batch. `auto` (the default) takes aggregated when the module is there.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import math
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
AIC_PACKAGE = "aiconfigurator-core"
AIC_VERSION = "0.12.0"
AIC_VENV = REPO / ".cache" / "aic-venv"
CALIBRATED = REPO / "src" / "servelab" / "predict" / "data" / "calibrated.json"
ENGINES = ("vllm", "sglang", "trtllm")
# the parameters fitted, each searched in log space between these bounds (us); the defaults start the search
PARAMS = ("step_overhead_us", "per_seq_overhead_us", "kernel_gap_us", "eager_launch_us")
BOUNDS = {
    "step_overhead_us": (1.0, 20000.0),
    "per_seq_overhead_us": (0.01, 500.0),
    "kernel_gap_us": (0.01, 50.0),
    "eager_launch_us": (0.1, 100.0),
}
# Terms servelab's step model does not have, fitted only with --ttft-terms to measure what they would buy: a
# fixed per-request cost on the way to the first token (HTTP, tokenization, detokenization, the engine's first
# schedule), one that grows with the number of requests in flight (a front end serving them one at a time) and
# one per prompt token (input processing outside the kernels).
TTFT_TERMS = {
    "ttft_overhead_ms": lambda c: 1.0,
    "ttft_per_request_ms": lambda c: float(c.concurrency),
    "ttft_per_kilotoken_ms": lambda c: c.isl / 1000.0,
}
BOUNDS.update(
    {
        "ttft_overhead_ms": (0.01, 5000.0),
        "ttft_per_request_ms": (0.0001, 100.0),
        "ttft_per_kilotoken_ms": (0.001, 1000.0),
    }
)
TTFT_START = {"ttft_overhead_ms": 10.0, "ttft_per_request_ms": 0.1, "ttft_per_kilotoken_ms": 1.0}
# Also fitted only on request (--kernel-terms): a factor on the kernel time of each op family, for kernels the
# engines run that the perf tables (timed on reference implementations) do not: FlashMLA / FlashInfer attention,
# custom all-reduce, fused MoE. EngineProfile has no such field; the report says what they would buy.
KERNEL_FAMILIES = {
    "AttentionDecode": "attention_scale",
    "AttentionPrefill": "attention_scale",
    "MlaDecode": "attention_scale",
    "MlaPrefill": "attention_scale",
    "Dsv4Context": "attention_scale",
    "Dsv4Generation": "attention_scale",
    "Comm": "comm_scale",
    "Moe": "moe_scale",
    "Gemm": "gemm_scale",
}
KERNEL_TERMS = tuple(sorted(set(KERNEL_FAMILIES.values())))
BOUNDS.update({name: (0.1, 10.0) for name in KERNEL_TERMS})


class ScaledDB:
    """A PerfDB whose answers are scaled per op family (the only method the predictor calls is query)."""

    def __init__(self, db, scales: dict):
        self.db, self.system = db, db.system
        self.factor = {cls: scales.get(name, 1.0) for cls, name in KERNEL_FAMILIES.items()}

    def query(self, key):
        lat = self.db.query(key)
        f = self.factor.get(type(key).__name__, 1.0)
        return lat if f == 1.0 else lat.scaled(f)


_SCALED: dict = {}


def scaled_db(system, params: dict, backend: str):
    scales = tuple((n, params[n]) for n in KERNEL_TERMS if n in params)
    if not scales:
        return None
    key = (backend, scales)
    if key not in _SCALED:
        from servelab.perfdb.db import perfdb_for

        if len(_SCALED) > 64:
            _SCALED.clear()
        _SCALED[key] = ScaledDB(_TORCH_TABLES.get(system.name) or perfdb_for(system, backend), dict(scales))
    return _SCALED[key]


# checkpoints in the file that servelab embeds under another id (same architecture, FP8 weights)
ALIASES = {"nvidia/llama-3.1-8b-instruct-fp8": ("meta-llama/Llama-3.1-8B-Instruct", "fp8")}
GPUS_PER_NODE = 8


# ---------------------------------------------------------------------------------------------- the data file
def aic_csv(venv: Path = AIC_VENV) -> tuple[Path, str]:
    """Install aiconfigurator-core into its own venv (once) and return the sample file and the package version."""
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    probe = [
        "-c",
        (
            "import importlib.metadata as m, aiconfigurator_core, pathlib; "
            "print(m.version('aiconfigurator-core')); "
            "print(pathlib.Path(aiconfigurator_core.__file__).parent / 'systems' / 'silicon_sample.csv')"
        ),
    ]
    got = subprocess.run([str(py), *probe], capture_output=True, text=True, check=False)
    if got.returncode != 0 or got.stdout.split()[0] != AIC_VERSION:
        subprocess.run(
            [str(py), "-m", "pip", "install", "--quiet", f"{AIC_PACKAGE}=={AIC_VERSION}"], check=True
        )
        got = subprocess.run([str(py), *probe], capture_output=True, text=True, check=True)
    version, path = got.stdout.split()[:2]
    return Path(path), version


def read_rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# AIConfigurator's own agg-mode estimate of each row, run inside its venv (PyPI `aiconfigurator`, same version).
# A row is asked as written; when AIConfigurator cannot load the model id or the engine version, it is asked
# again with the id of its bundled config and its default version, and the answer says which.
AIC_ID_ALIASES = {
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Meta-Llama-3.1-8B",
}
AIC_SCRIPT = r"""
import json, logging, math, sys, time
logging.disable(logging.CRITICAL)
from aiconfigurator.cli.api import cli_estimate
rows, aliases = json.load(sys.stdin)
out = {}
def num(r, k, d=None):
    v = (r.get(k) or "").strip()
    return d if not v or v.lower() == "nan" else int(float(v))
for r in rows:
    kw = dict(mode="agg", backend_name=r["backend"], isl=int(r["isl"]), osl=int(r["osl"]),
              batch_size=num(r, "_concurrency"), tp_size=num(r, "tp_size", 1), pp_size=num(r, "pp_size", 1),
              attention_dp_size=num(r, "attention_dp_size", 1), moe_tp_size=num(r, "moe_tp_size"),
              moe_ep_size=num(r, "moe_ep_size"), gemm_quant_mode=r.get("gemm_quant_mode") or None,
              moe_quant_mode=r.get("moe_quant_mode") or None)
    version = (r.get("backend_version") or "").strip()
    tries = [(r["model_path"], version or None, "as written")]
    if r["model_path"] in aliases:
        tries.append((aliases[r["model_path"]], version or None, "bundled model id"))
    tries.append((aliases.get(r["model_path"], r["model_path"]), None, "bundled model id, default version"))
    errors = []
    for model, ver, how in tries:
        try:
            t = time.time()
            res = cli_estimate(model, "h200_sxm", backend_version=ver, **kw)
            ttft, tpot = float(res.ttft), float(res.tpot)
            if not (math.isfinite(ttft) and math.isfinite(tpot) and ttft > 0 and tpot > 0):
                raise ValueError(f"non-positive estimate {ttft} / {tpot}")
            out[r["id"]] = {"ttft_ms": ttft, "tpot_ms": tpot, "how": how, "s": round(time.time() - t, 2)}
            break
        except BaseException as e:
            errors.append(f"{how}: {type(e).__name__}: {str(e)[:160]}")
    else:
        out[r["id"]] = {"error": errors}
    print(json.dumps({"done": len(out)}), file=sys.stderr, flush=True)
json.dump(out, sys.stdout)
"""


def aic_predictions(rows: list[dict], system: str, cache: Path) -> dict:
    """AIConfigurator's estimate per row id (cached in `cache`, keyed by row id)."""
    done = json.loads(cache.read_text()) if cache.is_file() else {}
    todo = [r for r in rows if r["id"] not in done]
    if todo:
        py = AIC_VENV / "bin" / "python"
        subprocess.run(
            [str(py), "-m", "pip", "install", "--quiet", f"aiconfigurator=={AIC_VERSION}"], check=True
        )
        payload = [dict(r, _concurrency=str(concurrency_of(r)), system=system) for r in todo]
        got = subprocess.run(
            [str(py), "-c", AIC_SCRIPT.replace('"h200_sxm"', repr(system))],
            input=json.dumps([payload, AIC_ID_ALIASES]),
            capture_output=True,
            text=True,
            check=False,
        )
        if got.returncode != 0:
            raise RuntimeError(f"AIConfigurator run failed: {got.stderr[-2000:]}")
        done.update(json.loads(got.stdout))
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(done))
    return {r["id"]: done[r["id"]] for r in rows if r["id"] in done}


# ---------------------------------------------------------------------------------------------- row -> case
@dataclass
class Case:
    """One measured point, mapped onto servelab's specs."""

    row_id: str
    family: str  # the embedded model name: the unit left out in cross-validation
    backend: str
    version: str
    model: object  # ModelSpec
    parallel: object  # Parallel
    concurrency: int
    isl: int
    osl: int
    ttft_ms: float
    tpot_ms: float
    note: str = ""
    pred: dict = field(default_factory=dict)


def _num(row: dict, key: str, default: float | None = None) -> float | None:
    text = (row.get(key) or "").strip()
    if not text or text.lower() == "nan":
        return default
    return float(text)


def concurrency_of(row: dict) -> int:
    m = re.search(r"silicon_concurrency=(\d+)", row.get("silicon_data_source", ""))
    return int(m.group(1)) if m else int(_num(row, "batch_size", 1))


def parallel_of(row: dict, is_moe: bool = True):
    """servelab's Parallel for a row, and a note when the row's fields had to be read another way.

    AIConfigurator writes tp x attention_dp GPUs for attention and moe_tp x moe_ep for MoE layers; both must
    count the same GPUs. Some rows write tp_size = tp x ep (64 = 8 x 8 on one 8-GPU node; 16 = 4 x 4 where the
    row id says tp4_ep4): those read as tp = moe_tp, ep = moe_ep. Rows whose counts disagree otherwise are
    refused (for example tp 1 with moe_tp 2 for a 235B model that cannot fit one GPU). Dense models have no MoE
    split: their moe fields are ignored."""
    from servelab.specs import Parallel

    tp = int(_num(row, "tp_size", 1))
    dp = int(_num(row, "attention_dp_size", 1))
    moe_tp = int(_num(row, "moe_tp_size", tp * dp))
    moe_ep = int(_num(row, "moe_ep_size", 1))
    pp = int(_num(row, "pp_size", 1))
    note = ""
    if not is_moe:
        return Parallel(tp=tp * dp, pp=pp), note
    attn_gpus, moe_gpus = tp * dp, moe_tp * moe_ep
    if attn_gpus > GPUS_PER_NODE and moe_tp == moe_ep and attn_gpus == moe_gpus:
        note = f"tp_size {attn_gpus} read as tp {moe_tp} x ep {moe_ep}"
        return Parallel(tp=moe_tp, ep=moe_ep, dp_attn=dp > 1, pp=pp), note
    if attn_gpus != moe_gpus:
        raise ValueError(f"attention on {attn_gpus} GPUs but MoE on {moe_gpus}")
    return Parallel(tp=attn_gpus, ep=moe_ep, dp_attn=dp > 1, pp=pp), note


def model_of(row: dict):
    """The ModelSpec of a row at the precision it was measured with, or raise ValueError (not embedded)."""
    from servelab.errors import ServelabError
    from servelab.specs import Dtype, load_model

    path = row["model_path"].strip()
    checkpoint, weights = ALIASES.get(path.lower(), (path, None))
    try:
        model = load_model(checkpoint)
    except ServelabError:
        raise ValueError(f"model {path} is not embedded") from None
    gemm = (weights or row.get("gemm_quant_mode") or "").strip()
    # the row's GEMM precision overrides a BF16 checkpoint (measured with FP8 quantization); a checkpoint that
    # is already 8-bit or 4-bit keeps its own format (fp8 in the row means 'FP8 of some kind')
    if gemm in ("fp8", "fp8_block") and model.precision.weights in (Dtype.bf16, Dtype.fp16):
        model = load_model(checkpoint, weight_dtype=gemm)
    elif gemm and gemm not in ("fp8", "fp8_block", "bf16", "nvfp4", "mxfp4"):
        raise ValueError(f"GEMM precision {gemm} has no servelab dtype")
    return model


def to_case(row: dict) -> Case:
    from servelab.specs import load_system

    if row.get("mode", "agg") != "agg":
        raise ValueError(f"mode {row.get('mode')} (only aggregated rows are fitted)")
    backend = row["backend"].strip()
    if backend not in ENGINES:
        raise ValueError(f"backend {backend}")
    model = model_of(row)
    parallel, note = parallel_of(row, model.is_moe)
    load_system(row["system"])
    return Case(
        row_id=row["id"],
        family=model.name,
        backend=backend,
        version=row.get("backend_version") or "?",
        model=model,
        parallel=parallel,
        concurrency=concurrency_of(row),
        isl=int(_num(row, "isl")),
        osl=int(_num(row, "osl")),
        ttft_ms=float(row["silicon_ttft_ms"]),
        tpot_ms=float(row["silicon_tpot_ms"]),
        note=note,
    )


def build_cases(rows: list[dict], system: str) -> tuple[list[Case], dict[str, int]]:
    """Map the rows of one system; count the rows left out by reason."""
    cases, skipped, seen = [], {}, set()
    for row in rows:
        if row.get("system") != system:
            continue
        try:
            case = to_case(row)
        except ValueError as e:
            reason = re.sub(r"\d+", "N", str(e)) if "GPUs" in str(e) else str(e)
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        # the same measurement appears under two sources (a database dump and a CSV export): count it once
        same = (
            case.backend,
            case.family,
            case.parallel,
            case.isl,
            case.osl,
            case.concurrency,
            case.ttft_ms,
            case.tpot_ms,
        )
        if same in seen:
            why = "duplicate of another row (same engine, model, parallel, load and measured values)"
            skipped[why] = skipped.get(why, 0) + 1
            continue
        seen.add(same)
        cases.append(case)
    return cases, skipped


# ---------------------------------------------------------------------------------------------- prediction
def pick_mode(mode: str) -> str:
    if mode != "auto":
        return mode
    try:
        import servelab.predict.serving  # noqa: F401
    except ImportError:
        return "static"
    return "aggregated"


# How the rows were measured, as the simulator replays it: `vllm bench serve`-style closed loop that starts
# from an idle engine (the first `concurrency` requests arrive together) and counts every request, with
# num_prompts = PROMPTS_PER_CONCURRENCY x concurrency (InferenceX's convention, reference/serving-metrics.md).
# 0 replays the simulator's own steady state instead (a warm-up wave excluded).
PROMPTS_PER_CONCURRENCY = 10
# Real benchmarks draw request lengths from a range (InferenceX: random-range-ratio 0.8), so clients fall out of
# step; servelab's Workload has one length, and a closed loop of identical requests stays in lockstep (every wave
# prefills together). Until the simulator takes a length distribution, each request's input and output lengths
# are drawn here from U[1 - s, 1 + s] x the row's (mean kept), seeded per request: see vary_lengths().
LENGTH_SPREAD = 0.2


_SPREAD = [LENGTH_SPREAD]
_TORCH_TABLES: dict = {}  # system name -> a PerfDB with the torch tables, when --tables torch


def vary_lengths(spread: float) -> None:
    """Per-request lengths for the replayed rows: U[1 - s, 1 + s] x the row's (Workload.range_ratio)."""
    _SPREAD[0] = spread


def predict(
    case: Case, params: dict, mode: str, system, prompts_per_concurrency: int | None = None
) -> tuple[float, float]:
    """(ttft_ms, tpot_ms) servelab predicts for a case with these engine parameters."""
    engine = base_profiles()[case.backend].model_copy(update={k: v for k, v in params.items() if k in PARAMS})
    extra = sum(params[name] * term(case) for name, term in TTFT_TERMS.items() if name in params)
    k = PROMPTS_PER_CONCURRENCY if prompts_per_concurrency is None else prompts_per_concurrency
    if mode == "aggregated":
        from servelab.predict.serving import Workload, estimate_aggregated

        wl = None
        if k:
            wl = Workload(
                isl=case.isl,
                osl=case.osl,
                concurrency=case.concurrency,
                warmup=0,
                num_requests=k * case.concurrency,
                range_ratio=_SPREAD[0],
            )
        est = estimate_aggregated(
            case.model,
            system,
            case.parallel,
            engine,
            case.concurrency,
            case.isl,
            case.osl,
            db=scaled_db(system, params, case.backend) or _TORCH_TABLES.get(system.name),
            workload=wl,
        )
    else:
        from servelab.predict.static import estimate_static

        est = estimate_static(
            case.model,
            system,
            case.parallel,
            engine,
            case.concurrency,
            case.isl,
            case.osl,
            db=scaled_db(system, params, case.backend) or _TORCH_TABLES.get(system.name),
        )
    return est.ttft_ms + extra, est.tpot_ms


def usable(cases: list[Case], mode: str, system, skipped: dict[str, int]) -> list[Case]:
    """Cases servelab can price at the default parameters; the others are counted with servelab's reason."""
    from servelab.errors import ServelabError

    kept = []
    for case in cases:
        try:
            predict(case, {}, mode, system)
        except ServelabError as e:
            reason = "servelab refuses: " + re.sub(r"\d+(\.\d+)?", "N", str(e))[:110]
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        kept.append(case)
    return kept


# ---------------------------------------------------------------------------------------------- fitting
def rel_errors(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.abs(pred - meas) / meas


def summary(errors: np.ndarray) -> dict:
    if errors.size == 0:
        return {"n": 0, "median": None, "p90": None}
    return {
        "n": int(errors.size),
        "median": float(np.median(errors)),
        "p90": float(np.percentile(errors, 90)),
    }


def soft_l1(r: np.ndarray, scale: float = 0.1) -> np.ndarray:
    """Robust loss of log-ratio residuals: quadratic below `scale`, linear above (outliers do not steer the fit)."""
    z = (r / scale) ** 2
    return 2 * scale**2 * (np.sqrt(1 + z) - 1)


def nelder_mead(
    f, x0: np.ndarray, step: float = 0.7, iters: int = 120, tol: float = 1e-4
) -> tuple[np.ndarray, float]:
    """A plain Nelder-Mead minimiser (numpy only: the project venv has no scipy)."""
    n = len(x0)
    simplex = [x0] + [x0 + step * np.eye(n)[i] for i in range(n)]
    values = [f(x) for x in simplex]
    for _ in range(iters):
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if abs(values[-1] - values[0]) < tol * (abs(values[0]) + 1e-12):
            break
        centroid = np.mean(simplex[:-1], axis=0)
        worst = simplex[-1]
        xr = centroid + (centroid - worst)
        fr = f(xr)
        if fr < values[0]:
            xe = centroid + 2 * (centroid - worst)
            fe = f(xe)
            simplex[-1], values[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (worst - centroid)
            fc = f(xc)
            if fc < values[-1]:
                simplex[-1], values[-1] = xc, fc
            else:
                best = simplex[0]
                simplex = [best] + [best + 0.5 * (x - best) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    i = int(np.argmin(values))
    return simplex[i], values[i]


def to_params(x: np.ndarray, names: tuple = PARAMS) -> dict:
    out = {}
    for name, v in zip(names, x):
        lo, hi = BOUNDS[name]
        out[name] = float(min(max(math.exp(v), lo), hi))
    return out


def from_params(params: dict) -> np.ndarray:
    return np.array([math.log(params[name]) for name in params])


def loss(cases: list[Case], params: dict, price) -> float:
    """Mean robust loss of log(pred / measured), TTFT and TPOT weighted alike (exact: runs the predictor)."""
    preds = np.array([price(c, params) for c in cases]).reshape(-1, 2)
    return _loss(preds, _measured(cases))


def _measured(cases: list[Case]) -> np.ndarray:
    return np.array([[c.ttft_ms, c.tpot_ms] for c in cases]).reshape(-1, 2)


def _loss(preds: np.ndarray, meas: np.ndarray) -> float:
    if preds.size == 0:
        return 0.0
    return float(np.mean(soft_l1(np.log(np.maximum(preds, 1e-3 * meas) / meas))))


class Linearized:
    """Each case's (TTFT, TPOT) as an affine function of the engine parameters around `params`.

    A step's time is affine in every fitted parameter (overheads add, gaps multiply kernel counts; the eager-launch
    term has one kink), and TTFT and TPOT are sums of step times, so a finite-difference Jacobian predicts the
    simulator closely near the point. Fitting on it costs microseconds instead of a simulation per row; every error
    this script reports is then measured with the real predictor at the fitted parameters."""

    def __init__(self, cases: list[Case], params: dict, price):
        self.params = dict(params)
        self.names = tuple(params)
        self.base = np.array([price(c, params) for c in cases]).reshape(-1, 2)
        self.jac = np.zeros((len(cases), 2, len(self.names)))
        for k, name in enumerate(self.names):
            if name in TTFT_TERMS:  # added to TTFT outside the simulator: the derivative is known
                self.jac[:, 0, k] = [TTFT_TERMS[name](c) for c in cases]
                continue
            lo = BOUNDS[name][0]
            delta = max(0.3 * params[name], 10 * lo)
            moved = dict(params, **{name: params[name] + delta})
            self.jac[:, :, k] = (
                np.array([price(c, moved) for c in cases]).reshape(-1, 2) - self.base
            ) / delta

    def predict(self, params: dict, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        d = np.array([params[n] - self.params[n] for n in self.names])
        return self.base[rows] + self.jac[rows] @ d


def fit(
    cases: list[Case],
    start: dict,
    price,
    iters: int = 120,
    rounds: int = 2,
    lin: Linearized | None = None,
    rows: np.ndarray | None = None,
) -> dict:
    """Minimise the robust loss over the parameters: Nelder-Mead on the linearized predictor, re-linearized at
    the result `rounds` times (pass `lin` and `rows` to fit a subset on an existing linearization, once)."""
    params = dict(start)
    for _ in range(rounds if lin is None else 1):
        here = lin or Linearized(cases, params, price)
        sel = rows if rows is not None else slice(None)
        meas = _measured(cases)[sel] if rows is None else _measured([cases[i] for i in rows])
        names = tuple(params)

        def objective(x, here=here, names=names, sel=sel, meas=meas):
            return _loss(here.predict(to_params(x, names), sel), meas)

        x, _ = nelder_mead(objective, from_params(params), iters=iters)
        params = to_params(x, names)
    return params


def fit_engine(cases: list[Case], start: dict, price, iters: int) -> tuple[dict, Linearized]:
    """The engine's fit on all its rows, and the linearization at the fitted point (for cross-validation)."""
    params = fit(cases, start, price, iters)
    return params, Linearized(cases, params, price)


def errors_of(cases: list[Case], params: dict, price) -> tuple[np.ndarray, np.ndarray]:
    preds = np.array([price(c, params) for c in cases]).reshape(-1, 2)
    ttft = rel_errors(preds[:, 0], np.array([c.ttft_ms for c in cases]))
    tpot = rel_errors(preds[:, 1], np.array([c.tpot_ms for c in cases]))
    return ttft, tpot


def leave_one_model_out(cases: list[Case], start: dict, price, iters: int, lins: dict | None = None) -> dict:
    """For each engine and each model family: fit on the engine's other families, predict the left-out one with
    the real predictor. `lins` (engine -> (cases, Linearized)) reuses the linearizations of the full fits."""
    out = {"ttft": [], "tpot": [], "by_family": {}, "params": {}, "rows": {}}
    for engine in ENGINES:
        mine = [c for c in cases if c.backend == engine]
        if not mine:
            continue
        if lins and engine in lins:
            mine, lin = lins[engine]
        else:
            lin = Linearized(mine, start[engine], price)
        for family in sorted({c.family for c in mine}):
            train = np.array([i for i, c in enumerate(mine) if c.family != family])
            test = [c for c in mine if c.family == family]
            params = fit(mine, lin.params, price, iters, lin=lin, rows=train) if train.size else start[engine]
            ttft, tpot = errors_of(test, params, price)
            out["rows"].update({c.row_id: (a, b) for c, a, b in zip(test, ttft, tpot)})
            out["ttft"].extend(ttft)
            out["tpot"].extend(tpot)
            out["params"][f"{engine}/{family}"] = params
            out["by_family"][f"{engine}/{family}"] = {
                "ttft": summary(ttft),
                "tpot": summary(tpot),
                "trained_on": int(train.size),
            }
    out["ttft"], out["tpot"] = np.array(out["ttft"]), np.array(out["tpot"])
    return out


# ---------------------------------------------------------------------------------------------- main
_BASE: dict = {}


def base_profiles() -> dict:
    """Engine profiles from engines.json alone: fitting starts from the documented defaults, and an existing
    calibrated.json must not leak into the fit."""
    if not _BASE:
        from importlib import resources

        from servelab.predict.backends import BACKENDS, EngineProfile

        data = json.loads((resources.files("servelab.predict") / "data" / "engines.json").read_text())
        _BASE.update({n: EngineProfile(name=n, source="documented defaults", **data[n]) for n in BACKENDS})
    return _BASE


def defaults() -> dict:
    return {e: {p: float(getattr(base_profiles()[e], p)) for p in PARAMS} for e in ENGINES}


def servelab_state() -> str:
    """The predictor the fit was made against: git commit (dirty or not) and a digest of the perf data files."""
    import hashlib

    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "src"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        commit, dirty = "unknown", ""
    digest = hashlib.sha256()
    data = REPO / "src" / "servelab"
    for path in sorted(
        [*(data / "perfdb" / "data").rglob("*.*"), data / "predict" / "data" / "engines.json"]
    ):
        if path.is_file() and path.suffix in (".parquet", ".json"):
            digest.update(path.name.encode() + path.read_bytes())
    return (
        f"servelab {commit or 'unknown'}{' (modified)' if dirty else ''}, perf data {digest.hexdigest()[:12]}"
    )


def compare_with_aic(cases: list[Case], aic: dict, cv_rows: dict) -> dict:
    """AIConfigurator's error next to servelab's cross-validated error, on the rows AIConfigurator answered."""
    answered = [c for c in cases if "ttft_ms" in aic.get(c.row_id, {})]
    a_ttft = rel_errors(
        np.array([aic[c.row_id]["ttft_ms"] for c in answered]), np.array([c.ttft_ms for c in answered])
    )
    a_tpot = rel_errors(
        np.array([aic[c.row_id]["tpot_ms"] for c in answered]), np.array([c.tpot_ms for c in answered])
    )
    s_err = np.array([cv_rows[c.row_id] for c in answered]).reshape(-1, 2)
    how: dict = {}
    for c in answered:
        how[aic[c.row_id]["how"]] = how.get(aic[c.row_id]["how"], 0) + 1
    failures: dict = {}
    for c in cases:
        if "error" in aic.get(c.row_id, {}):
            key = aic[c.row_id]["error"][-1].split(":")[1].strip()
            failures[key] = failures.get(key, 0) + 1
    return {
        "answered": len(answered),
        "how": how,
        "failures": failures,
        "aiconfigurator": {"ttft": summary(a_ttft), "tpot": summary(a_tpot)},
        "servelab_cv": {"ttft": summary(s_err[:, 0]), "tpot": summary(s_err[:, 1])},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", default="h200_sxm")
    ap.add_argument("--mode", choices=("auto", "static", "aggregated"), default="auto")
    ap.add_argument(
        "--iters", type=int, default=300, help="Nelder-Mead iterations per fit (on the linearized predictor)"
    )
    ap.add_argument("--csv", type=Path, help="use this silicon_sample.csv instead of installing the package")
    ap.add_argument(
        "--limit", type=int, default=0, help="fit on at most this many rows per engine (quick runs)"
    )
    ap.add_argument(
        "--prompts-per-concurrency",
        type=int,
        default=PROMPTS_PER_CONCURRENCY,
        help="replay each row as a closed-loop run of this many prompts per concurrency slot from an idle "
        "engine (0: the simulator's steady state)",
    )
    ap.add_argument(
        "--length-spread",
        type=float,
        default=LENGTH_SPREAD,
        help="closed-loop request lengths drawn from U[1-s, 1+s] x the row's (0: identical requests)",
    )
    ap.add_argument(
        "--ttft-terms",
        nargs="?",
        const="all",
        default=None,
        metavar="NAMES",
        help="also fit per-request TTFT terms the step model lacks, all or a comma list of "
        f"{', '.join(TTFT_TERMS)} (reports what they would buy; never writes calibrated.json)",
    )
    ap.add_argument(
        "--kernel-terms",
        action="store_true",
        help="also fit a kernel-time factor per op family (attention, comm, MoE, GEMM) per engine "
        "(reports what they would buy; never writes calibrated.json)",
    )
    ap.add_argument(
        "--tables",
        choices=("own", "torch"),
        default="own",
        help="own: each engine's own tables, the roofline where it has none (what servelab does); "
        "torch: the torch backend's tables for every engine (what servelab did before)",
    )
    ap.add_argument("--summary", type=Path, help="write the summary (errors, parameters) as JSON here")
    ap.add_argument("--dry-run", action="store_true", help="report, write nothing")
    ap.add_argument("--out", type=Path, default=CALIBRATED)
    ap.add_argument("--report", type=Path, help="write the per-row predictions and errors as JSON here")
    ap.add_argument(
        "--aic",
        action="store_true",
        help="also run AIConfigurator's own estimate of the same rows (about 1-4 s a row; cached)",
    )
    args = ap.parse_args(argv)

    t0 = time.time()
    if args.csv:
        path, version = args.csv, "local file"
    else:
        path, version = aic_csv()
    rows = read_rows(path)
    mode = pick_mode(args.mode)
    from servelab.specs import load_system

    system = load_system(args.system)
    if args.tables == "torch":
        from servelab.perfdb.db import perfdb_for

        _TORCH_TABLES[system.name] = perfdb_for(system, "torch")
    start = defaults()  # the documented defaults, never a previous calibration
    if args.ttft_terms:
        names = list(TTFT_TERMS) if args.ttft_terms == "all" else args.ttft_terms.split(",")
        unknown = [n for n in names if n not in TTFT_TERMS]
        if unknown:
            ap.error(
                f"--ttft-terms: unknown {', '.join(unknown)}; expected all or some of {', '.join(TTFT_TERMS)}"
            )
        start = {e: {**p, **{n: TTFT_START[n] for n in names}} for e, p in start.items()}
        args.dry_run = True
    if args.kernel_terms:
        start = {e: {**p, **{n: 1.0 for n in KERNEL_TERMS}} for e, p in start.items()}
        args.dry_run = True

    cases, skipped = build_cases(rows, args.system)
    cases = usable(cases, mode, system, skipped)
    if args.limit:
        cases = [c for e in ENGINES for c in [x for x in cases if x.backend == e][: args.limit]]
    k = args.prompts_per_concurrency
    if mode == "aggregated":
        vary_lengths(args.length_spread)
    price = lambda case, params: predict(case, params, mode, system, k)
    print(
        f"{len(rows)} rows in {path.name} ({AIC_PACKAGE} {version}); {args.system}: {len(cases)} priced with "
        f"servelab ({mode} mode), skipped: {sum(skipped.values())}",
        flush=True,
    )
    for reason, n in sorted(skipped.items(), key=lambda kv: -kv[1]):
        print(f"  skipped {n:4d}: {reason}")

    before = errors_of(cases, {}, lambda c, p: price(c, start[c.backend]))
    fitted, lins = {}, {}
    for engine in ENGINES:
        mine = [c for c in cases if c.backend == engine]
        if mine:
            fitted[engine], lin = fit_engine(mine, start[engine], price, args.iters)
            lins[engine] = (mine, lin)
            print(f"fitted {engine} on {len(mine)} rows ({time.time() - t0:.0f} s)", flush=True)
    cv = leave_one_model_out(cases, start, price, args.iters, lins)
    after = errors_of(cases, {}, lambda c, p: price(c, fitted.get(c.backend, start[c.backend])))

    table = {
        "defaults (in sample)": (summary(before[0]), summary(before[1])),
        "fitted (in sample)": (summary(after[0]), summary(after[1])),
        "fitted, leave one model out": (summary(cv["ttft"]), summary(cv["tpot"])),
    }
    print(
        f"\n{'servelab on ' + args.system:32s} {'n':>5s} {'TTFT med':>9s} {'TTFT p90':>9s} {'TPOT med':>9s} {'TPOT p90':>9s}"
    )
    for name, (a, b) in table.items():
        print(f"{name:32s} {a['n']:5d} {a['median']:9.1%} {a['p90']:9.1%} {b['median']:9.1%} {b['p90']:9.1%}")
    comparison = None
    if args.aic:
        by_id = {r["id"]: r for r in rows}
        aic = aic_predictions(
            [by_id[c.row_id] for c in cases],
            args.system,
            REPO / ".cache" / f"aic-predictions-{args.system}.json",
        )
        comparison = compare_with_aic(cases, aic, cv["rows"])
        a, s_ = comparison["aiconfigurator"], comparison["servelab_cv"]
        print(
            f"{'AIConfigurator ' + AIC_VERSION + ' (same rows)':32s} {a['ttft']['n']:5d} {a['ttft']['median']:9.1%} "
            f"{a['ttft']['p90']:9.1%} {a['tpot']['median']:9.1%} {a['tpot']['p90']:9.1%}"
        )
        print(
            f"{'servelab CV on those rows':32s} {s_['ttft']['n']:5d} {s_['ttft']['median']:9.1%} "
            f"{s_['ttft']['p90']:9.1%} {s_['tpot']['median']:9.1%} {s_['tpot']['p90']:9.1%}"
        )
        print(
            f"  AIConfigurator answered {comparison['answered']} of {len(cases)} rows ({comparison['how']}); "
            f"failures: {comparison['failures']}"
        )
        print(
            f"  ratio servelab / AIConfigurator median error: TTFT {s_['ttft']['median'] / a['ttft']['median']:.2f}, "
            f"TPOT {s_['tpot']['median'] / a['tpot']['median']:.2f}"
        )
    else:
        print(
            "AIConfigurator 0.12 (anchors.md, not rerun here; --aic reruns it): ~42% TTFT / ~33% TPOT median "
            "on H200 measured rows"
        )
    print("\nleave-one-model-out by engine/family (median TTFT / TPOT error):")
    for key, v in cv["by_family"].items():
        print(f"  {key:32s} n={v['ttft']['n']:4d}  {v['ttft']['median']:6.1%}  {v['tpot']['median']:6.1%}")
    print("\nfitted parameters:")
    for engine, params in fitted.items():
        print(f"  {engine:7s} " + "  ".join(f"{k}={v:.2f}" for k, v in params.items()))

    command = "python bench/calibrate_engines.py " + " ".join(argv if argv is not None else sys.argv[1:])
    provenance = (
        f"{servelab_state()}; bench/calibrate_engines.py fit on {len(cases)} {args.system} aggregated rows of "
        f"{AIC_PACKAGE} {version} systems/silicon_sample.csv ({mode} mode), {dt.date.today().isoformat()}"
    )
    doc = {
        "_provenance": provenance,
        "source": {
            "package": AIC_PACKAGE,
            "version": version,
            "file": "systems/silicon_sample.csv",
            "system": args.system,
            "rows_in_file": len(rows),
            "rows_used": len(cases),
            "rows_skipped": skipped,
            "mode": mode,
            "prompts_per_concurrency": args.prompts_per_concurrency,
            "length_spread": args.length_spread,
            "command": command.strip(),
            "date": dt.date.today().isoformat(),
            "loss": "soft-L1 (scale 0.1) of log(pred/measured), TTFT and TPOT",
        },
        "errors": {name: {"ttft": a, "tpot": b} for name, (a, b) in table.items()},
        "cv_by_family": cv["by_family"],
        "aiconfigurator_same_rows": comparison,
        "engines": {
            e: {
                "params": {k: round(v, 3) for k, v in p.items() if k in PARAMS},
                **(
                    {"proposed_terms": {k: round(v, 4) for k, v in p.items() if k not in PARAMS}}
                    if args.ttft_terms or args.kernel_terms
                    else {}
                ),
                "rows": sum(c.backend == e for c in cases),
                "families": sorted({c.family for c in cases if c.backend == e}),
            }
            for e, p in fitted.items()
        },
    }
    # an engine's fit is kept only when it predicts unseen models better than the defaults do (sum of the
    # median TTFT and TPOT errors, cross-validated against the defaults on the same rows)
    kept, verdicts = {}, {}
    for e in fitted:
        idx = [i for i, c in enumerate(cases) if c.backend == e]
        d_score = float(np.median(before[0][idx]) + np.median(before[1][idx]))
        cv_err = np.array([cv["rows"][cases[i].row_id] for i in idx])
        cv_score = float(np.median(cv_err[:, 0]) + np.median(cv_err[:, 1]))
        verdicts[e] = {
            "defaults_ttft_plus_tpot_median": round(d_score, 4),
            "cv_ttft_plus_tpot_median": round(cv_score, 4),
            "kept": cv_score < d_score,
        }
        if cv_score < d_score:
            kept[e] = doc["engines"][e]
        print(
            f"  {e:7s} defaults {d_score:.1%} vs cross-validated fit {cv_score:.1%} (TTFT + TPOT medians): "
            f"{'kept' if cv_score < d_score else 'not kept: the fit does not transfer to unseen models'}"
        )
    doc["verdicts"] = verdicts
    doc["fitted_not_kept"] = {e: doc["engines"][e] for e in doc["engines"] if e not in kept}
    doc["engines"] = kept
    if args.report:
        per_row = []
        for c in cases:
            ttft, tpot = price(c, fitted.get(c.backend, start[c.backend]))
            per_row.append(
                {
                    "id": c.row_id,
                    "engine": c.backend,
                    "family": c.family,
                    "parallel": c.parallel.label(),
                    "concurrency": c.concurrency,
                    "isl": c.isl,
                    "osl": c.osl,
                    "ttft_ms": c.ttft_ms,
                    "tpot_ms": c.tpot_ms,
                    "pred_ttft_ms": ttft,
                    "pred_tpot_ms": tpot,
                    "note": c.note,
                }
            )
        args.report.write_text(json.dumps(per_row, indent=1))
    if args.summary:
        args.summary.write_text(json.dumps(doc, indent=1) + "\n")
    if not args.dry_run:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"\nwrote {args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out}")
    print(f"took {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
