"""Serving-level prediction bands with a stated claim: an "80 % band" is built to hold the measured value of
80 % of the calibration rows of model families left out of it, says how often it did (counted doubly held
out), and is claimed only for a prediction that lies within its rows (docs/accuracy.md section 7).

A band is built from the residuals r = log(measured / predicted) of the calibration's leave-one-family-out
predictions (calibrate/residuals.py writes them beside the calibration file), per engine and metric (TTFT,
TPOT): the band of a prediction x is [x * exp(q_lo), x * exp(q_hi)], q_lo and q_hi the (1 -+ claim) / 2
quantiles of what an unseen family's residuals look like. The residuals are alike within a model family and
each family is off by its own amount, so the claim's own quantiles of the rows covered an unseen family far
less often than claimed (65 % for 80 %). An unseen family's residual is read as the engine's median, plus how
far one of its groups lay from the engine's other groups (that group's median less the others', either way),
plus how far one row lay from its own group's median: unseen_family draws every such sum. A group is a model
family, split into its models where each has MIN_GROUP of the engine's rows (vLLM's Llama-3.1-8B rows lie far
from its 70B rows). Nothing is tuned on the rows: the smallest widened share that held the rows' own left-out
families (the eleventh session's rule) over-covered SGLang and TensorRT-LLM, its share moving in coarse steps
with two or three families an engine, and missed every engine at 50 % (docs/accuracy.md section 7, "Bands
within ten points, by engine and family"). Each band says how often the same construction, counted doubly held
out (coverage()), held the engine's left-out families' rows. An engine with fewer than MIN_ROWS rows takes
every engine's residuals, and says so. In-sample residuals never enter: they would be narrower by what the fit
learned from the rows it is judged on. No narrower group (dense or MoE, the concurrency, the lengths, TP)
builds a band: none held its coverage on families left out (accuracy/bands.py).

A band claims only what its rows measured: a prediction outside them (another system than the rows', a model
family the engine's rows lack, a concurrency or a length outside their range: predict/band_domain.py) claims
nothing and says why. Every closed-loop development point lies outside by one of these; as if claimed, the
eleventh session's bands held TTFT 32 % and TPOT 66 % of them (of the 53 outside by their model family alone,
32 % and 74 %), and bands widened from those points' own residuals held a left-out GPU kind overall but not
the H200 points (TTFT 54 %, TPOT 42 %) nor a left-out source (docs/accuracy.md section 7, "Bands per engine,
and out of distribution").

The kernel-source band (the step model's low and high op times carried through the simulation) is kept apart,
as `kernel_band`; it neither widens nor narrows the serving band, because on the calibration rows its width
does not tell the large residuals from the small ones (Spearman -0.03 for TTFT, -0.22 for TPOT), and a band
scaled by it covered less (accuracy/bands.py): the error that dominates is the engine and scheduling
model's, not the op tables'.

The residuals are of the simulated closed loop (`estimate --mode agg`, `plan`'s aggregated candidates, the
twin) on aggregated H200 rows; a prediction of another kind (static mode, disaggregated candidates, an open
loop, the kernels-only torch backend) keeps its kernel-source band and claims no coverage.
"""

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

from servelab.engines import Engine, engine_of
from servelab.errors import ServelabError
from servelab.predict.band_domain import SPANS, Asked, Domain
from servelab.predict.engines import shipped_calibration
from servelab.userfiles import read_json

CLAIM = 0.8  # the share of measured values a band claims to contain
MIN_ROWS = 30  # an engine with fewer residual rows than this takes every engine's (pooled)
MIN_GROUP = 5  # a family splits into its models (unseen_family) only where each has this many rows
METRICS = ("ttft", "tpot")
SUFFIX = ".residuals.json"
POOLED = "all engines"
NO_CLAIM = "kernel-source band (the step model's low and high op times), no measured coverage"
# why a disaggregated prediction (estimate --mode disagg, a plan's disaggregated candidates) claims none
DISAGG_NO_CLAIM = "disaggregated (the measured bands are of aggregated deployments)"
OUTSIDE = "outside the residual rows' distribution"


def share(claim: float) -> str:
    return f"{100 * claim:.0f} %"


def residuals_path(calibration: Path) -> Path:
    """The residuals file beside a calibration file (calibrated.json -> calibrated.residuals.json)."""
    return calibration.with_name(calibration.name.removesuffix(".json") + SUFFIX)


@dataclass(frozen=True)
class Residual:
    """One measured row's out-of-sample log residuals, log(measured / predicted), per metric, and where the
    row lies: its system, concurrency and nominal lengths (empty and 0 where not given), and its model
    (empty: counted with its family)."""

    engine: str
    family: str
    ttft: float
    tpot: float
    system: str = ""
    concurrency: int = 0
    isl: int = 0
    osl: int = 0
    model: str = ""

    def of(self, metric: str) -> float:
        return self.ttft if metric == "ttft" else self.tpot


@dataclass(frozen=True)
class ServingBand:
    """The band of one engine's predictions of one metric, as log-residual quantiles."""

    metric: str
    engine: str  # the engine whose residuals built it, or POOLED
    claim: float
    low: float  # log(measured / predicted) quantile at (1 - claim) / 2
    high: float  # ... at (1 + claim) / 2
    rows: int
    pooled_because: str = ""  # why an engine's own residuals were not used
    groups: int = 1  # the model groups whose offsets from one another widen it (1: the claim's own quantiles)
    domain: Domain | None = field(default=None, compare=False)  # where its rows lie
    held_out: float | None = None  # how often it held left-out families' rows, counted doubly held out

    def around(self, value: float) -> tuple[float, float]:
        return value * math.exp(self.low), value * math.exp(self.high)

    def contains(self, residual: float) -> bool:
        return self.low <= residual <= self.high

    def describe(self) -> str:
        notes = [f"widened by {self.groups} model groups' offsets"] if self.groups > 1 else []
        if self.held_out is not None:
            notes.append(f"held {share(self.held_out)} of left-out families' rows")
        notes += [self.pooled_because] if self.pooled_because else []
        said = f" ({'; '.join(notes)})" if notes else ""
        return f"{share(self.claim)} band, LOFO residuals of {self.rows} rows, {self.engine}{said}"

    def as_dict(self, value: float) -> dict:
        low, high = self.around(value)
        out: dict = {
            "claim": self.claim,
            "low": low,
            "high": high,
            "log_residual_quantiles": [round(self.low, 4), round(self.high, 4)],
            "rows": self.rows,
            "residuals_of": self.engine,
            "groups": self.groups,
            "source": self.describe(),
        }
        out |= {"held_out": round(self.held_out, 4)} if self.held_out is not None else {}
        return out | ({"rows_lie": self.domain.as_dict()} if self.domain else {})


def quantiles(values: Iterable[float], claim: float) -> tuple[float, float]:
    """The (1 - claim) / 2 and (1 + claim) / 2 empirical quantiles (linear interpolation)."""
    v = sorted(map(float, values))
    if not v:
        raise ValueError("no residuals")
    tail = (1 - claim) / 2
    return _quantile(v, tail), _quantile(v, 1 - tail)


def _quantile(ordered: list[float], q: float) -> float:
    """numpy.quantile's default (linear) of sorted values, the same arithmetic: a plan that shows bands
    imports no numpy (servelab.lazy_numpy says why)."""
    h = (len(ordered) - 1) * q
    i = math.floor(h)
    t = h - i
    a = ordered[i]
    b = ordered[min(i + 1, len(ordered) - 1)]
    # numpy's lerp: from the nearer end, so that t = 1 gives b exactly
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t


def groups_of(rows: list[Residual]) -> dict[str, list[Residual]]:
    """One engine's rows by group: each model family, split into its models where each has MIN_GROUP rows
    (a row without its model keeps its family whole)."""
    models: dict[str, Counter[str]] = {}
    for r in rows:
        models.setdefault(r.family, Counter())[r.model] += 1
    split = {f for f, n in models.items() if len(n) > 1 and "" not in n and min(n.values()) >= MIN_GROUP}
    out: dict[str, list[Residual]] = {}
    for r in rows:
        out.setdefault(r.model if r.family in split else r.family, []).append(r)
    return out


def unseen_family(rows: list[Residual], metric: str) -> tuple[list[float], int]:
    """What one engine's residuals of `metric` would be on a family its rows lack, as draws: the rows' median,
    plus one group's offset from the others (its median less theirs) taken either way, plus one row's
    deviation from its own group's median, every such sum; and the number of groups. Either way: which side
    of the others a family lay on is an accident of the few families measured. With one group, its rows'
    own values."""
    groups = [[r.of(metric) for r in g] for g in groups_of(rows).values()]
    if len(groups) < 2:
        return [r.of(metric) for r in rows], 1
    center = _median([r.of(metric) for r in rows])
    offsets, spread = [], []
    for i, values in enumerate(groups):
        mine = _median(values)
        others = [v for j, g in enumerate(groups) if j != i for v in g]
        offsets += [mine - _median(others), _median(others) - mine]
        spread += [v - mine for v in values]
    return [center + o + d for o in offsets for d in spread], len(groups)


def _median(values: list[float]) -> float:
    return _quantile(sorted(values), 0.5)


def _band(rows: list[Residual], metric: str, name: str, claim: float, widen: bool) -> ServingBand:
    draws, groups = unseen_family(rows, metric) if widen else ([r.of(metric) for r in rows], 1)
    low, high = quantiles(draws, claim)
    return ServingBand(metric, name, claim, low, high, len(rows), groups=groups, domain=Domain.of(rows))


def build_bands(
    rows: list[Residual], claim: float = CLAIM, min_rows: int = MIN_ROWS, widen: bool = True
) -> dict[tuple[str, str], ServingBand]:
    """(engine, metric) -> band claiming `claim`, for every engine among the rows and for POOLED: an engine's
    own residuals where it has min_rows of them, every engine's otherwise. widen: the quantiles of what an
    unseen family's residuals look like (unseen_family); else the rows' own quantiles."""
    if not 0 < claim < 1:
        raise ValueError(f"a band's claim is a share in (0, 1), got {claim}")
    out: dict[tuple[str, str], ServingBand] = {}
    if not rows:
        return out
    for metric in METRICS:
        pooled = out[(POOLED, metric)] = _band(rows, metric, POOLED, claim, widen)
        for engine in sorted({r.engine for r in rows}):
            mine = [r for r in rows if r.engine == engine]
            if len(mine) >= min_rows:
                out[(engine, metric)] = _band(mine, metric, engine, claim, widen)
            else:
                why = f"{engine} has {len(mine)} rows, fewer than {min_rows}"
                out[(engine, metric)] = replace(pooled, pooled_because=why)
    return out


def band_for(
    bands: dict[tuple[str, str], ServingBand], engine: str, metric: str, min_rows: int = MIN_ROWS
) -> ServingBand | None:
    """The band of an engine's predictions of a metric: its own, or the pooled one (saying why) for an
    engine the residuals have no row of; None where there are no residuals at all."""
    if (engine, metric) in bands:
        return bands[(engine, metric)]
    pooled = bands.get((POOLED, metric))
    if pooled is None:
        return None
    return replace(pooled, pooled_because=f"{engine} has 0 rows, fewer than {min_rows}")


def coverage(
    rows: list[Residual], claim: float = CLAIM, min_rows: int = MIN_ROWS, widen: bool = True
) -> list[tuple[Residual, dict[str, bool]]]:
    """Doubly held-out (nested leave-one-family-out) coverage: for each model family, bands built from the
    other families' residuals only (every engine's rows of the family left out, from the groups' medians to
    the offsets between them), then whether each of the family's rows lies inside its engine's band, per
    metric."""
    out = []
    for family in sorted({r.family for r in rows}):
        bands = build_bands([r for r in rows if r.family != family], claim, min_rows, widen)
        for r in (r for r in rows if r.family == family):
            inside = {}
            for metric in METRICS:
                band = band_for(bands, r.engine, metric, min_rows)
                if band is not None:
                    inside[metric] = band.contains(r.of(metric))
            out.append((r, inside))
    return out


def covered(checked: list[tuple[Residual, dict[str, bool]]]) -> float:
    """The share of (row, metric) pairs inside their band."""
    flags = [v for _, inside in checked for v in inside.values()]
    return sum(flags) / len(flags) if flags else 0.0


def claimed_bands(
    rows: list[Residual], claim: float = CLAIM, min_rows: int = MIN_ROWS
) -> dict[tuple[str, str], ServingBand]:
    """The bands that claim `claim`, each saying how often the same construction held its engine's rows of
    left-out families (coverage(), doubly held out; the pooled band: every engine's rows)."""
    bands = build_bands(rows, claim, min_rows)
    checked = coverage(rows, claim, min_rows)
    for (engine, metric), band in bands.items():
        flags = [inside[metric] for r, inside in checked if engine in (POOLED, r.engine) and metric in inside]
        bands[(engine, metric)] = replace(band, held_out=sum(flags) / len(flags) if flags else None)
    return bands


def read_residuals(path: Path) -> list[Residual]:
    """A residuals file written by `servelab calibrate engines`; one line naming the file and the field
    otherwise. The rows' system is the calibration's (provenance.settings.system)."""
    where = f"band data {path}"
    data = read_json(path, "the residuals `servelab calibrate engines` writes", field="calibration")
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ServelabError(
            f"{where}: expected a JSON object with a non-empty list 'rows'", field="calibration"
        )
    system = ((data.get("provenance") or {}).get("settings") or {}).get("system")
    if not isinstance(system, str) or not system:
        raise ServelabError(
            f"{where}: expected provenance.settings.system, the system the rows were measured on",
            field="calibration",
        )
    out = []
    for i, row in enumerate(rows):
        try:
            values = {k: float(row[k]) for k in ("ttft_ms", "tpot_ms", "pred_ttft_ms", "pred_tpot_ms")}
            if not all(math.isfinite(v) and v > 0 for v in values.values()):
                raise ValueError("a time that is not a positive finite number")
            spans = {k: int(row[k]) for k in SPANS}
            if not all(v > 0 for v in spans.values()):
                raise ValueError("a concurrency or length that is not a positive integer")
            engine = engine_of(str(row["engine"])).value
            family = str(row["family"])
            model = str(row.get("model") or "")  # none: counted with its family
        except (KeyError, TypeError, ValueError, ServelabError) as e:
            raise ServelabError(
                f"{where}: rows[{i}]: expected engine, family, positive concurrency, isl and osl, and "
                f"positive finite ttft_ms, tpot_ms, pred_ttft_ms, pred_tpot_ms ({e})",
                field="calibration",
            ) from None
        ttft = math.log(values["ttft_ms"] / values["pred_ttft_ms"])
        tpot = math.log(values["tpot_ms"] / values["pred_tpot_ms"])
        out.append(Residual(engine, family, ttft, tpot, system, **spans, model=model))
    return out


@cache
def serving_bands(calibration: Path) -> dict[tuple[str, str], ServingBand]:
    """The bands of predictions made with a calibration file, from the residuals file beside it (none there:
    no bands, and predictions keep their kernel-source band with no claim)."""
    path = residuals_path(calibration)
    if not path.exists():
        return {}
    return claimed_bands(read_residuals(path))


def engine_band(calibration: Path, backend: str, metric: str) -> ServingBand | None:
    """The band of a backend's predictions, or None for a backend no residual describes (torch: the
    kernels-only backend is no engine the calibration measured)."""
    try:
        engine = Engine(backend).value
    except ValueError:
        return None
    return band_for(serving_bands(calibration), engine, metric)


def calibration_path(calibration: Path | str | None) -> Path:
    """The calibration file a prediction was made with (None: the shipped one)."""
    return Path(calibration).resolve() if calibration is not None else shipped_calibration()


def claimed(calibration: Path, backend: str, asked: Asked | None) -> tuple[dict[str, ServingBand], str]:
    """A backend's bands of TTFT and TPOT for the prediction `asked`, or none and why: no residuals describe
    the backend, or the prediction lies outside their rows (None: not placed, so not claimed)."""
    bands = {m: b for m in METRICS if (b := engine_band(calibration, backend, m)) is not None}
    if len(bands) < len(METRICS):
        return {}, f"no residuals describe {backend}'s predictions ({residuals_path(calibration).name})"
    domain = bands["ttft"].domain
    if asked is None or domain is None:
        return {}, f"{OUTSIDE}: where the prediction lies is not known"
    outside = domain.outside(asked)
    return ({}, f"{OUTSIDE}: {'; '.join(outside)}") if outside else (bands, "")


def no_claim(why: str) -> dict:
    return {"claim": None, "source": f"{NO_CLAIM}: {why}"}


def attach_band(
    data: dict, backend: str, calibration: Path | str | None, asked: Asked | None, why_no_claim: str = ""
) -> dict:
    """An estimate's JSON with its serving band: `ttft_ms_low` / `_high` and `tpot_ms_low` / `_high` become
    the claimed band where the residuals describe the prediction (`asked`: what it is of), and `band` says
    its claim and where it came from; the kernel-source band moves to `kernel_band`. `why_no_claim` (static
    mode, ...): the prediction is of another kind than the residuals', so the kernel-source band stays,
    claiming nothing; so it does where `asked` lies outside the residuals' rows, saying why."""
    data["kernel_band"] = {
        f"{m}_ms": [data[f"{m}_ms_low"], data[f"{m}_ms_high"]] for m in METRICS if f"{m}_ms_low" in data
    }
    bands: dict[str, ServingBand] = {}
    if not why_no_claim:
        bands, why_no_claim = claimed(calibration_path(calibration), backend, asked)
    if why_no_claim:
        data["band"] = no_claim(why_no_claim)
        return data
    out: dict = {"claim": CLAIM}
    for m, band in bands.items():
        entry = band.as_dict(data[f"{m}_ms"])
        data[f"{m}_ms_low"], data[f"{m}_ms_high"] = entry["low"], entry["high"]
        out[f"{m}_ms"] = entry
    if "output_tokens_per_s_per_gpu_low" in data:  # the output rate goes as 1 / TPOT at a fixed concurrency
        rate, tpot = data["output_tokens_per_s_per_gpu"], bands["tpot"]
        data["kernel_band"]["output_tokens_per_s_per_gpu"] = [
            data["output_tokens_per_s_per_gpu_low"],
            data["output_tokens_per_s_per_gpu_high"],
        ]
        data["output_tokens_per_s_per_gpu_low"] = rate * math.exp(-tpot.high)
        data["output_tokens_per_s_per_gpu_high"] = rate * math.exp(-tpot.low)
        out["output_tokens_per_s_per_gpu"] = "TPOT's band turned over (no measured throughput row checks it)"
    sources = {b.describe() for b in bands.values()}
    out["source"] = (
        f"TTFT and TPOT: {sources.pop()}"
        if len(sources) == 1
        else "; ".join(f"{m.upper()}: {b.describe()}" for m, b in bands.items())
    )
    data["band"] = out
    return data


def band_line(data: dict) -> str:
    """One line for a table's foot: what the band column claims and where it came from."""
    band = data.get("band") or {}
    return f"band: {band.get('source', NO_CLAIM)}"


def twin_band_line(band: dict) -> str:
    """The twin's band in one line under its result table."""
    if band.get("claim") is None:
        return f"band: {band.get('source', NO_CLAIM)}"
    t, d = band["ttft_ms"], band["tpot_ms"]
    return (
        f"band ({share(band['claim'])}) of the {band.get('of', 'figures')}: "
        f"TTFT {t['low']:,.2f}-{t['high']:,.2f} ms, TPOT {d['low']:,.2f}-{d['high']:,.2f} ms "
        f"({band['source']})"
    )
