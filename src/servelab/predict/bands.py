"""Serving-level prediction bands with a stated claim: an "80 % band" is one that held the measured value of
80 % of the calibration rows of model families left out of it, claimed only for a prediction that lies
within its rows (docs/accuracy.md section 7).

A band is built from the residuals r = log(measured / predicted) of the calibration's leave-one-family-out
predictions (calibrate/residuals.py writes them beside the calibration file), per engine and metric (TTFT,
TPOT): the band of a prediction x is [x * exp(q_lo), x * exp(q_hi)], q_lo and q_hi the ends of the residuals'
central `level`. The residuals are alike within a model family (a family the fit never saw is off by its own
amount), so the claim's own quantiles (level = claim) cover an unseen family less often than they claim (65 %
for 80 % on the shipped rows): pick_level widens each engine's level, per metric and on that engine's rows
alone, until, leaving one family out at a time, the left-out families are covered as claimed (one share for
every engine made TensorRT-LLM's bands over-cover because vLLM's needed it). An engine with fewer than
MIN_ROWS rows takes every engine's residuals, and says so. In-sample residuals never enter: they would be
narrower by what the fit learned from the rows it is judged on. No narrower group (dense or MoE, the
concurrency, the lengths, TP) builds a band: none held its coverage on families left out (accuracy/bands.py).

A band claims only what its rows measured: a prediction outside them (another system than the rows', a model
family the engine's rows lack, a concurrency or a length outside their range: predict/band_domain.py) claims
nothing and says why. Every closed-loop development point lies outside by one of these; as if claimed, the
bands held TTFT 32 % and TPOT 66 % of them (of the 53 outside by their model family alone, 32 % and 74 %),
and bands widened from those points' own residuals held a left-out GPU kind overall but not the H200 points
(TTFT 54 %, TPOT 42 %) nor a left-out source (docs/accuracy.md section 7, "Bands per engine, and out of
distribution").

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
METRICS = ("ttft", "tpot")
SUFFIX = ".residuals.json"
LEVELS = (*(round(0.5 + 0.01 * k, 2) for k in range(50)), 0.995, 1.0)  # central shares pick_level tries
WIDEN = -1.0  # build_bands(level=WIDEN): each engine and metric picks its own level (pick_level)
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
    row lies: its system, concurrency and nominal lengths (empty and 0 where not given)."""

    engine: str
    family: str
    ttft: float
    tpot: float
    system: str = ""
    concurrency: int = 0
    isl: int = 0
    osl: int = 0

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
    level: float = 0.0  # the central share of the residuals the band spans (0: the claim itself)
    domain: Domain | None = field(default=None, compare=False)  # where its rows lie
    short: float = 0.0  # where even the widest share held less than the claim, leaving one family out: that

    def around(self, value: float) -> tuple[float, float]:
        return value * math.exp(self.low), value * math.exp(self.high)

    def contains(self, residual: float) -> bool:
        return self.low <= residual <= self.high

    def describe(self) -> str:
        short = f", holding only {share(self.short)} of left-out families' rows" if self.short else ""
        notes = [f"their central {share(self.level)}{short}"] if self.level else []
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
            "spans": self.level or self.claim,  # the central share of the residuals
            "rows": self.rows,
            "residuals_of": self.engine,
            "source": self.describe(),
        }
        out |= {"held_out": round(self.short, 4)} if self.short else {}
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


def lofo_share(rows: list[Residual], metric: str, level: float) -> float:
    """Leaving one model family out at a time: the share of the left-out family's rows inside the central
    `level` of the other families' residuals."""
    inside = []
    for family in sorted({r.family for r in rows}):
        low, high = quantiles((r.of(metric) for r in rows if r.family != family), level)
        inside += [low <= r.of(metric) <= high for r in rows if r.family == family]
    return sum(inside) / len(inside)


def pick_level(rows: list[Residual], metric: str, claim: float = CLAIM) -> float:
    """The central share of one group's residuals (an engine's, or every engine's) a band of `metric` must
    span so that, leaving one model family out at a time, the left-out families' rows are inside it `claim`
    of the time: residuals are alike within a family, so a band at the claim's own quantiles covers unseen
    families less often than it claims. The smallest of LEVELS that reaches the claim (the widest if none
    does); the claim itself where the rows are of one family."""
    if len({r.family for r in rows}) < 2:
        return claim
    for level in (x for x in LEVELS if x >= claim):
        if lofo_share(rows, metric, level) >= claim:
            return level
    return LEVELS[-1]


def _band(rows: list[Residual], metric: str, name: str, claim: float, level: float | None) -> ServingBand:
    spans = pick_level(rows, metric, claim) if level == WIDEN else (claim if level is None else level)
    low, high = quantiles((r.of(metric) for r in rows), spans)
    kept = 0.0 if spans == claim else spans
    held = lofo_share(rows, metric, spans) if level == WIDEN and spans == LEVELS[-1] else 1.0
    short = held if held < claim else 0.0
    return ServingBand(
        metric, name, claim, low, high, len(rows), level=kept, domain=Domain.of(rows), short=short
    )


def build_bands(
    rows: list[Residual], claim: float = CLAIM, min_rows: int = MIN_ROWS, level: float | None = None
) -> dict[tuple[str, str], ServingBand]:
    """(engine, metric) -> band claiming `claim`, for every engine among the rows and for POOLED: an engine's
    own residuals where it has min_rows of them, every engine's otherwise. The band spans the residuals'
    central `level`: None the claim itself, WIDEN the share pick_level finds for that engine and metric."""
    if not 0 < claim < 1:
        raise ValueError(f"a band's claim is a share in (0, 1), got {claim}")
    out: dict[tuple[str, str], ServingBand] = {}
    if not rows:
        return out
    for metric in METRICS:
        pooled = out[(POOLED, metric)] = _band(rows, metric, POOLED, claim, level)
        for engine in sorted({r.engine for r in rows}):
            mine = [r for r in rows if r.engine == engine]
            if len(mine) >= min_rows:
                out[(engine, metric)] = _band(mine, metric, engine, claim, level)
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
    rows: list[Residual], claim: float = CLAIM, min_rows: int = MIN_ROWS, level: float | None = None
) -> list[tuple[Residual, dict[str, bool]]]:
    """Nested leave-one-family-out coverage: for each model family, bands built from the other families'
    residuals only (every engine's rows of the family left out), then whether each of the family's rows lies
    inside its engine's band, per metric. `level` as build_bands': with WIDEN each training set picks its
    own levels, so that the choice of the level is held out too."""
    out = []
    for family in sorted({r.family for r in rows}):
        bands = build_bands([r for r in rows if r.family != family], claim, min_rows, level)
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
    """The bands that claim `claim`: each engine's and metric's spanning the central share pick_level finds
    on its own rows."""
    return build_bands(rows, claim, min_rows, WIDEN)


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
        except (KeyError, TypeError, ValueError, ServelabError) as e:
            raise ServelabError(
                f"{where}: rows[{i}]: expected engine, family, positive concurrency, isl and osl, and "
                f"positive finite ttft_ms, tpot_ms, pred_ttft_ms, pred_tpot_ms ({e})",
                field="calibration",
            ) from None
        ttft = math.log(values["ttft_ms"] / values["pred_ttft_ms"])
        tpot = math.log(values["tpot_ms"] / values["pred_tpot_ms"])
        out.append(Residual(engine, family, ttft, tpot, system, **spans))
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
