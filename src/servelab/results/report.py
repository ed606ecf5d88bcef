"""`servelab report`: one self-contained HTML page of benchmark results, measured and predicted.

Where the numbers come from:
- result files as `servelab bench --save-result` and `vllm bench serve` write them (and InferenceX's), read by
  the importers' reader; a servelab result's per-request records (`<name>.requests.jsonl` next to it) give
  whole latency distributions, otherwise the result's percentiles stand for them;
- runs of the results store, by id or name: one point per bench config, the median over its repetitions with
  each plotted value's interval (error bars), from the stored metrics, with the records of every repetition
  pooled when the stages' artifacts still have them next to them;
- predictions: a `servelab plan --json` output (one point per candidate), `servelab estimate --mode agg
  --json` outputs (one point at their batch), or result files in the vLLM shape written by a simulator.

The views: latency CDFs (TTFT, TPOT, ITL, E2EL), TTFT / TPOT / throughput against concurrency or request rate
(whichever differs between the measured points), the throughput-latency Pareto front, and predicted against
measured on the same axis. Every figure names its sources below it; every trace is labelled measured or
predicted.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from servelab.bench.measured import derive
from servelab.bench.records import read_jsonl
from servelab.bench.tally import resolve_output_len
from servelab.errors import ServelabError
from servelab.htmlpage import figure_div, page, plot_text
from servelab.metrics import LATENCY_METRICS
from servelab.metrics.repeats import median
from servelab.metrics.repeats import summarize as summarize_repeats
from servelab.plotjson import Figure, add_trace, axes, figure, scatter, subplot_grid
from servelab.predict.plan.pareto import pareto_mask
from servelab.predict.provenance import describe_shares, roofline_warning
from servelab.readable import number
from servelab.results.importers import read_file
from servelab.results.store import Store
from servelab.userfiles import parse_json, read_bytes

Source = Literal["measured", "predicted"]
Axis = Literal["max_concurrency", "request_rate"]
AXIS_TITLES = {"max_concurrency": "concurrency (requests in flight)", "request_rate": "request rate (req/s)"}
METRIC_TITLES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL"}
# a latency field as vLLM names it (`p99_ttft_ms`); InferenceX writes the same names in seconds, without `_ms`
LATENCY_FIELD = re.compile(r"^(mean|median|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)(_ms)?$")
GPU_FIELDS = ("num_gpus", "gpus")  # --metadata keys that say how many GPUs served a run
PREDICTED_EXPECTED = (
    "a `servelab plan --json` output, a `servelab estimate --mode agg --json` output or a result file"
)
DASH = {"measured": "solid", "predicted": "dash"}
CDF_POINTS = 1000  # per line of a latency CDF; finer than a figure's width shows


@dataclass(frozen=True)
class Interval:
    """Where the median of repeated runs lies: the order-statistic CI of the median (servelab.metrics.repeats)
    from 3 repetitions, the range of the values below that."""

    low: float
    high: float
    kind: str  # 'CI 75.0%' or 'min-max'


@dataclass(frozen=True)
class Point:
    """One benchmark point, measured or predicted, with where it came from."""

    source: Source
    origin: str  # the file name or `run <id>`, with the entry or candidate when it holds several
    series: str  # the line it belongs to: the model, and the label or parallel split
    max_concurrency: float | None
    request_rate: float | None  # offered (predicted: served) requests/s; None when unbounded
    latency_ms: dict[str, dict[str, float]]  # 'ttft' -> {'mean': .., 'p50': .., 'p99': ..}
    output_tok_s: float | None = None  # the whole deployment's output tokens/s
    output_tok_s_per_gpu: float | None = None
    samples_ms: dict[str, list[float]] = field(default_factory=dict)  # per request; ITL: every gap
    samples_from: str = ""  # the records file the samples came from
    # a prediction's share of kernel time by source (measured ... roofline): predict.provenance
    kernel_time_by_source: dict[str, float] = field(default_factory=dict)
    # a stored config run several times: the point holds the medians over its repetitions, the pooled
    # per-request samples, and each plotted value's interval (`Interval`) for error bars
    repetitions: int = 1
    intervals: dict[str, Interval] = field(default_factory=dict)  # 'ttft', 'tpot', 'tok_s', 'tok_s_per_gpu'

    @property
    def label(self) -> str:
        """The name of the point's own lines (a latency CDF): its series and where it sits on the sweep
        axis; a result file's name when neither concurrency nor rate is known."""
        where = [f"conc {_fmt(self.max_concurrency)}"] if self.max_concurrency is not None else []
        where += [f"rate {_fmt(self.request_rate)}"] if self.request_rate is not None else []
        reps = [f"median of {self.repetitions}"] if self.repetitions > 1 else []
        if not where:
            return f"{self.series} ({self.origin})"
        return " ".join([self.series, *where]) + (f" ({reps[0]})" if reps else "")

    def x(self, axis: Axis) -> float | None:
        return getattr(self, axis)

    def stat(self, metric: str, stat: str) -> float | None:
        return self.latency_ms.get(metric, {}).get(stat)

    @property
    def interactivity(self) -> float | None:
        """Output tokens/s one user sees: 1000 / mean TPOT."""
        tpot = self.stat("tpot", "mean")
        return 1000.0 / tpot if tpot else None


# reading


def _number(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _latencies(fields: dict[str, Any]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name, value in fields.items():
        m = LATENCY_FIELD.match(name)
        x = _number(value) if m else None
        if m and x is not None:
            stat = "p50" if m[1] == "median" else m[1]
            out.setdefault(m[2], {})[stat] = x if m[3] else x * 1000.0
    return out


def _gpus(fields: dict[str, Any], gpus: int | None) -> int | None:
    for key in GPU_FIELDS:
        n = _number(fields.get(key))
        if n and n > 0:
            return int(n)
    return gpus


def _result_point(
    fields: dict[str, Any], source: Source, origin: str, series: str, gpus: int | None
) -> Point:
    """A point from a result's flat fields (a file's entry, or a stored stage's metrics)."""
    output = _number(fields.get("output_throughput"))
    per_gpu = _number(fields.get("output_tput_per_gpu"))  # InferenceX writes it per GPU
    n = _gpus(fields, gpus)
    if per_gpu is None and output is not None and n:
        per_gpu = output / n
    found = fields.get("prediction")
    prediction: dict[str, Any] = found if isinstance(found, dict) else {}
    return Point(
        source=source,
        origin=origin,
        series=series,
        max_concurrency=_number(fields.get("max_concurrency", fields.get("conc"))),
        request_rate=_number(fields.get("request_rate")),
        latency_ms=_latencies(fields),
        output_tok_s=output,
        output_tok_s_per_gpu=per_gpu,
        kernel_time_by_source=_shares(prediction.get("kernel_time_by_source")),
    )


def _shares(value: Any) -> dict[str, float]:
    """A prediction's kernel time by source as written, its non-numbers left out."""
    if not isinstance(value, dict):
        return {}
    return {str(k): x for k, v in value.items() if (x := _number(v)) is not None}


def _samples(records: Path) -> dict[str, list[float]]:
    """Per-request TTFT, TPOT and E2EL and every ITL gap (ms) of the successful requests, as the result
    computes them (servelab.bench.measured); without usage, output tokens are counted as content events."""
    out: dict[str, list[float]] = {m: [] for m in LATENCY_METRICS}
    for rec in read_jsonl(records):
        if not rec.get("ok") or rec.get("sent") is None or not rec.get("chunks"):
            continue
        r = derive(rec, resolve_output_len(rec, None)[0])
        out["ttft"].append(r.ttft_s * 1000.0)
        out["e2el"].append(r.e2el_s * 1000.0)
        out["itl"].extend(gap * 1000.0 for gap in r.itl_s)
        if r.tpot_s is not None:
            out["tpot"].append(r.tpot_s * 1000.0)
    return out


def _with_records(point: Point, result: Path, data: dict[str, Any]) -> Point:
    """The point with its per-request samples when the records are next to the result (or where its absolute
    `records_file` says)."""
    candidates = [result.with_name(result.stem + ".requests.jsonl")]
    if isinstance(data.get("records_file"), str) and Path(data["records_file"]).is_absolute():
        candidates.append(Path(data["records_file"]))
    for path in candidates:
        if path.is_file():
            try:
                samples = _samples(path)
            except (OSError, AttributeError, KeyError, TypeError, ValueError, IndexError) as e:
                raise ServelabError(f"{path}: not servelab per-request records ({e})") from e
            return replace(point, samples_ms=samples, samples_from=path.name)
    return point


def _series(data: dict[str, Any], name: str) -> str:
    label = data.get("label")
    return f"{name} {label}" if isinstance(label, str) and label not in ("", data.get("backend")) else name


def result_points(path: Path, source: Source = "measured", gpus: int | None = None) -> list[Point]:
    """The points of a result file (a list of results gives one each); a ServelabError names a bad file."""
    raw, entries = read_file(path)
    items = parse_json(raw, str(path))
    items = items if isinstance(items, list) else [items]
    points = []
    for i, (item, entry) in enumerate(zip(items, entries, strict=True)):
        origin = path.name if len(items) == 1 else f"{path.name} #{i + 1}"
        point = _result_point(item, source, origin, _series(item, entry.name), gpus)
        points.append(_with_records(point, path, item) if source == "measured" else point)
    return points


CONFIG_X = re.compile(r"-(conc|rate)-([^-]+)$")


def store_points(store: Store, ref: str, gpus: int | None = None) -> list[Point]:
    """One point per bench config of the runs `ref` names (an id, a prefix or a name): the median over its
    repetitions, with each plotted value's interval, and the per-request samples of every repetition pooled
    (read from the records `servelab run` keeps beside each stage's result); concurrency or rate from the
    config's name (`<label>-conc-<N>`, `<label>-rate-<R>`)."""
    points = []
    for run in store.find_runs(ref):
        stages = {(s.config, s.repetition): s for s in store.stages(run.id) if s.stage == "bench"}
        by_stage: dict[tuple[str, int], dict[str, Any]] = {}
        for metric in store.metrics(run.id):
            if metric.stage == "bench" and metric.value is not None:
                by_stage.setdefault((metric.config, metric.repetition), {})[metric.name] = metric.value
        by_config: dict[str, list[Point]] = {}
        for (config, rep), fields in sorted(by_stage.items()):
            m = CONFIG_X.search(config)
            if m:
                fields = {**fields, "max_concurrency" if m[1] == "conc" else "request_rate": m[2]}
            label = config[: m.start()] if m else config
            origin = f"run {run.id} {config}" + (f" rep {rep}" if rep else "")
            point = _result_point(fields, "measured", origin, f"{run.name} {label}".strip(), gpus)
            stage = stages.get((config, rep))
            if stage and stage.artifact:
                point = _with_records(point, store.artifact_path(run.id, stage.artifact), {})
            by_config.setdefault(config, []).append(point)
        points += [_repeated(f"run {run.id} {config}", reps) for config, reps in by_config.items()]
    if not points:
        raise ServelabError(f"run {ref!r} in {store.location} has no bench results", field="run")
    return points


def _median_or_none(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return median(known) if known else None


def _interval(values: list[float | None]) -> Interval | None:
    known = [v for v in values if v is not None]
    if len(known) < 2:
        return None
    s = summarize_repeats(known)
    if s.ci_low is not None and s.ci_high is not None and s.ci_level is not None:
        return Interval(s.ci_low, s.ci_high, f"CI {s.ci_level:.1%}")
    return Interval(min(known), max(known), "min-max")


def _repeated(origin: str, reps: list[Point]) -> Point:
    """One point for the repetitions of a config: every latency statistic and throughput their median, the
    plotted values' intervals, the per-request samples pooled."""
    if len(reps) == 1:
        return replace(reps[0], origin=origin)
    stats = {(m, k) for p in reps for m, by_stat in p.latency_ms.items() for k in by_stat}
    latency: dict[str, dict[str, float]] = {}
    for metric, stat in sorted(stats):
        value = _median_or_none([p.stat(metric, stat) for p in reps])
        if value is not None:
            latency.setdefault(metric, {})[stat] = value
    plotted = {
        "ttft": [p.stat("ttft", "mean") for p in reps],
        "tpot": [p.stat("tpot", "mean") for p in reps],
        "tok_s": [p.output_tok_s for p in reps],
        "tok_s_per_gpu": [p.output_tok_s_per_gpu for p in reps],
    }
    samples: dict[str, list[float]] = {}
    for p in reps:
        for metric, values in p.samples_ms.items():
            samples.setdefault(metric, []).extend(values)
    return replace(
        reps[0],
        origin=f"{origin} ({len(reps)} repetitions)",
        latency_ms=latency,
        output_tok_s=_median_or_none(plotted["tok_s"]),
        output_tok_s_per_gpu=_median_or_none(plotted["tok_s_per_gpu"]),
        samples_ms=samples if all(p.samples_ms for p in reps) else {},
        samples_from=f"{reps[0].samples_from} and {len(reps) - 1} more"
        if all(p.samples_ms for p in reps)
        else "",
        repetitions=len(reps),
        intervals={k: i for k, vs in plotted.items() if (i := _interval(vs)) is not None},
    )


def _predicted_latencies(percentiles: dict[str, Any]) -> dict[str, dict[str, float]]:
    """A plan's or estimate's `percentiles` ({'ttft_ms': {'mean': .., 'p50': ..}}) by metric."""
    out = {}
    for name, stats in percentiles.items():
        metric = name.removesuffix("_ms")
        if metric in LATENCY_METRICS and isinstance(stats, dict):
            out[metric] = {k: x for k, v in stats.items() if (x := _number(v)) is not None}
    return out


def _plan_points(data: dict[str, Any], path: Path) -> list[Point]:
    points = []
    for c in data["candidates"]:
        label = c["parallel"]["label"]
        points.append(
            Point(
                source="predicted",
                origin=f"{path.name} #{c['rank']} {c['mode']} {label}",
                series=f"{data['model']} {c['mode']} {label}",
                max_concurrency=_number(c["concurrency"]),
                request_rate=_number(c["request_rate"]),
                latency_ms=_predicted_latencies(c["percentiles"]),
                output_tok_s=c["tok_s_per_gpu"] * c["gpus"],
                output_tok_s_per_gpu=c["tok_s_per_gpu"],
                kernel_time_by_source=_shares(c.get("kernel_time_by_source")),
            )
        )
    return points


def _estimate_point(data: dict[str, Any], path: Path) -> Point:
    per_gpu = _number(data["output_tokens_per_s_per_gpu"])
    return Point(
        source="predicted",
        origin=path.name,
        series=f"{data['model']} agg {data['parallel']}",
        max_concurrency=_number(data["batch"]),
        request_rate=_number(data.get("request_throughput")),
        latency_ms=_predicted_latencies(data["percentiles"]),
        output_tok_s=per_gpu * data["gpus"] if per_gpu is not None else None,
        output_tok_s_per_gpu=per_gpu,
        kernel_time_by_source=_shares((data.get("provenance") or {}).get("kernel_time_by_source")),
    )


def predicted_points(path: Path, gpus: int | None = None) -> list[Point]:
    """Predicted points from a plan, an agg estimate or a (simulated) result file."""
    data = parse_json(read_bytes(path), str(path), PREDICTED_EXPECTED)  # a FIFO is refused, not waited on
    try:
        if isinstance(data, dict) and {"candidates", "request"} <= data.keys():
            return _plan_points(data, path)
        if isinstance(data, dict) and data.get("mode") == "agg" and "batch" in data:
            return [_estimate_point(data, path)]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ServelabError(f"{path}: malformed prediction ({e!r}); expected {PREDICTED_EXPECTED}") from e
    return result_points(path, "predicted", gpus)


# the views


def sweep_axis(points: Sequence[Point]) -> Axis:
    """What differs between the measured points: concurrency, else request rate (concurrency when neither
    does, unless only the rate is known)."""
    measured = [p for p in points if p.source == "measured"] or list(points)
    axes: tuple[Axis, ...] = ("max_concurrency", "request_rate")
    for axis in axes:
        if len({p.x(axis) for p in measured}) > 1:
            return axis
    if all(p.max_concurrency is None for p in measured) and any(p.request_rate for p in measured):
        return "request_rate"
    return "max_concurrency"


def _groups(points: Sequence[Point]) -> dict[tuple[Source, str], list[Point]]:
    out: dict[tuple[Source, str], list[Point]] = {}
    for p in points:
        out.setdefault((p.source, p.series), []).append(p)
    return out


def _name(source: Source, series: str) -> str:
    return plot_text(f"{source}: {series}")


def _origins(points: Sequence[Point]) -> str:
    """The sources line under a figure: the measured and predicted files and runs, escaped."""
    parts = []
    for source in ("measured", "predicted"):
        names = list(dict.fromkeys(p.origin for p in points if p.source == source))
        records = list(dict.fromkeys(p.samples_from for p in points if p.source == source and p.samples_from))
        if names:
            text = f"{source}: {', '.join(names)}"
            if records:
                text += f" (per-request records: {', '.join(records)})"
            parts.append(text)
    shares = next((p.kernel_time_by_source for p in points if p.kernel_time_by_source), None)
    if shares:
        parts.append(f"predicted kernel time by source: {describe_shares(shares)}")
        warning = roofline_warning(shares)
        if warning:
            parts.append(warning)
    return html.escape("; ".join(parts) or "no points")


def cdf(values: list[float]) -> tuple[list[float], list[float]]:
    """The empirical CDF at no more than CDF_POINTS evenly spaced ranks (the minimum and maximum kept): a
    long run's pooled ITL gaps would otherwise put millions of numbers in the page."""
    xs = sorted(values)
    n = len(xs)
    ranks = (
        range(n)
        if n <= CDF_POINTS
        else sorted({round(k * (n - 1) / (CDF_POINTS - 1)) for k in range(CDF_POINTS)})
    )
    return [xs[i] for i in ranks], [(i + 1) / n for i in ranks]


def _percentile_cdf(stats: dict[str, float]) -> tuple[list[float], list[float]]:
    pts = sorted((v, float(k[1:]) / 100.0) for k, v in stats.items() if k.startswith("p"))
    return [v for v, _ in pts], [q for _, q in pts]


def latency_figure(points: Sequence[Point]) -> Figure:
    """CDFs of TTFT, TPOT, ITL and E2EL per point: from per-request records when present (solid), else the
    percentiles the result holds (markers, dotted), which the figure says."""
    fig = figure(subplot_grid(2, 2, [f"{METRIC_TITLES[m]} (ms)" for m in LATENCY_METRICS]))
    from_percentiles = False
    for n, p in enumerate(points):
        name = plot_text(f"{p.source}: {p.label}")
        for k, metric in enumerate(LATENCY_METRICS):
            samples = p.samples_ms.get(metric)
            if samples:
                xs, ys = cdf(samples)
                style: dict[str, Any] = {"mode": "lines", "line": {"dash": DASH[p.source]}}
            else:
                xs, ys = _percentile_cdf(p.latency_ms.get(metric, {}))
                style = {"mode": "lines+markers", "line": {"dash": "dot"}}
                from_percentiles |= bool(xs)
            trace = scatter(
                x=xs,
                y=ys,
                name=name,
                hovertext=plot_text(p.origin),
                legendgroup=str(n),
                showlegend=k == 0,
                marker={"color": _color(n)},
                **style,
            )
            add_trace(fig, trace, row=k // 2 + 1, col=k % 2 + 1, cols=2)
    for axis in axes(fig["layout"], "y"):
        axis.update(title={"text": "fraction of requests"}, range=[0, 1.02])
    note = "dotted with markers: from the result's percentiles (no per-request records)"
    title = "Latency distributions (CDF)" + (f"<br><sub>{note}</sub>" if from_percentiles else "")
    fig["layout"].update(height=750, margin={"t": 110}, title={"text": title})
    return fig


def _color(n: int) -> str:
    import plotly.colors  # noqa: PLC0415 - plotly is slow to import and only reports need it

    palette = plotly.colors.qualitative.Plotly
    return palette[n % len(palette)]


def _throughput(p: Point, per_gpu: bool) -> float | None:
    return p.output_tok_s_per_gpu if per_gpu else p.output_tok_s


def sweep_figure(points: Sequence[Point], axis: Axis, per_gpu: bool, title: str) -> Figure:
    """Mean TTFT, mean TPOT and output throughput against the sweep's axis, one line per series."""
    tput = "output tok/s per GPU" if per_gpu else "output tok/s"
    fig = figure(subplot_grid(1, 3, ["mean TTFT (ms)", "mean TPOT (ms)", tput], horizontal_spacing=0.07))
    for n, ((source, series), group) in enumerate(_groups(points).items()):
        group = sorted((p for p in group if p.x(axis) is not None), key=lambda p: p.x(axis) or 0.0)
        values = (
            [p.stat("ttft", "mean") for p in group],
            [p.stat("tpot", "mean") for p in group],
            [_throughput(p, per_gpu) for p in group],
        )
        keys = ("ttft", "tpot", "tok_s_per_gpu" if per_gpu else "tok_s")
        for k, ys in enumerate(values):
            trace = scatter(
                x=[p.x(axis) for p in group],
                y=ys,
                error_y=_error_bars(group, keys[k], ys),
                mode="lines+markers",
                name=_name(source, series),
                legendgroup=str(n),
                showlegend=k == 0,
                text=[plot_text(p.origin) for p in group],
                line={"dash": DASH[source], "color": _color(n)},
            )
            add_trace(fig, trace, row=1, col=k + 1, cols=3)
    for x_axis in axes(fig["layout"], "x"):
        x_axis["title"] = {"text": AXIS_TITLES[axis]}
    kinds = sorted({i.kind for p in points for i in p.intervals.values()})
    if kinds:
        title += f"<br><sub>{ERROR_BARS_NOTE} ({', '.join(kinds)})</sub>"
        fig["layout"]["margin"] = {"t": 110}  # room for the note's second line
    fig["layout"].update(height=450, title={"text": title})
    return fig


ERROR_BARS_NOTE = (
    "a point run several times is the median of its repetitions; error bars: the interval of that median"
)


def _error_bars(group: Sequence[Point], key: str, ys: Sequence[float | None]) -> dict[str, Any] | None:
    """Asymmetric error bars from each point's interval of `key` (none where a point ran once)."""
    if not any(key in p.intervals for p in group):
        return None
    up, down = [], []
    for p, y in zip(group, ys, strict=True):
        i = p.intervals.get(key)
        up.append(i.high - y if i and y is not None else 0.0)
        down.append(y - i.low if i and y is not None else 0.0)
    return {"type": "data", "symmetric": False, "array": up, "arrayminus": down, "visible": True}


def pareto_figure(points: Sequence[Point], per_gpu: bool) -> Figure:
    """Output throughput against interactivity (1000 / mean TPOT), every point, and the frontier of the
    measured and of the predicted points (no other point is better on both axes)."""
    fig = figure()
    for n, ((source, series), group) in enumerate(_groups(points).items()):
        group = [p for p in group if p.interactivity and _throughput(p, per_gpu) is not None]
        fig["data"].append(
            scatter(
                x=[p.interactivity for p in group],
                y=[_throughput(p, per_gpu) for p in group],
                mode="markers",
                name=_name(source, series),
                text=[plot_text(p.origin) for p in group],
                marker={"color": _color(n), "symbol": "circle" if source == "measured" else "diamond"},
            )
        )
    for source in ("measured", "predicted"):
        pts = [
            (x, y)
            for p in points
            if p.source == source
            and (x := p.interactivity) is not None
            and (y := _throughput(p, per_gpu)) is not None
        ]
        front = sorted(xy for xy, on in zip(pts, pareto_mask(pts), strict=True) if on)
        if front:
            fig["data"].append(
                scatter(
                    x=[x for x, _ in front],
                    y=[y for _, y in front],
                    mode="lines+markers",  # a front of one point is still seen
                    name=f"{source} Pareto front",
                    line={"dash": DASH[source], "color": "black"},
                )
            )
    fig["layout"].update(
        height=500,
        title={"text": "Throughput against interactivity (Pareto front)"},
        xaxis={"title": {"text": "interactivity: tok/s per user (1000 / mean TPOT)"}},
        yaxis={"title": {"text": "output tok/s per GPU" if per_gpu else "output tok/s (whole deployment)"}},
    )
    return fig


# the page

VIEW_TITLES = {
    "latency": "Latency distributions",
    "sweep": "Against {axis}",
    "pareto": "Throughput against interactivity",
    "predicted": "Predicted against measured",
}


def _table(points: Sequence[Point], per_gpu: bool) -> str:
    tput = "tok/s/GPU" if per_gpu else "tok/s"
    head = (
        "source", "from", "series", "concurrency", "rate req/s", "runs", "mean TTFT ms", "mean TPOT ms", tput,
    )  # fmt: skip
    rows = []
    for p in points:
        cells = (
            p.source,
            p.origin + (f" + {p.samples_from}" if p.samples_from else ""),
            p.series,
            _fmt(p.max_concurrency),
            _fmt(p.request_rate),
            str(p.repetitions),
            _fmt(p.stat("ttft", "mean")),
            _fmt(p.stat("tpot", "mean")),
            _fmt(_throughput(p, per_gpu)),
        )
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _fmt(x: float | None) -> str:
    return "-" if x is None else number(x)


def figures(points: Sequence[Point], axis: Axis, per_gpu: bool) -> list[tuple[str, Figure, Sequence[Point]]]:
    """The page's views in order: (view, figure, the points it shows). The sweep shows the measured points
    (the predicted ones when nothing was measured); predicted against measured comes only with both."""
    measured = [p for p in points if p.source == "measured"]
    predicted = [p for p in points if p.source == "predicted"]
    swept = measured or predicted
    out: list[tuple[str, Figure, Sequence[Point]]] = [
        ("latency", latency_figure(points), points),
        ("sweep", sweep_figure(swept, axis, per_gpu, f"{swept[0].source.capitalize()} sweep"), swept),
        ("pareto", pareto_figure(points, per_gpu), points),
    ]
    if measured and predicted:
        out.append(
            ("predicted", sweep_figure(points, axis, per_gpu, "Predicted (dashed) against measured"), points)
        )
    return out


def render_html(points: Sequence[Point], title: str = "servelab report") -> str:
    """The whole page: a table of the points, then one figure per view, each with its sources under it."""
    if not points:
        raise ServelabError("nothing to report: give result files, --run or --predicted")
    per_gpu = all(p.output_tok_s_per_gpu is not None for p in points)
    axis = sweep_axis(points)
    body = [_table(points, per_gpu)]
    for n, (view, fig, shown) in enumerate(figures(points, axis, per_gpu)):
        heading = VIEW_TITLES[view].format(axis=AXIS_TITLES[axis])
        body.append(
            f'<section class="view" id="view-{view}"><h2>{html.escape(heading)}</h2>'
            f"{figure_div(fig, with_plotlyjs=n == 0)}"
            f'<p class="source">numbers from {_origins(shown)}</p></section>'
        )
    if not any(p.source == "predicted" for p in points):
        body.append('<p class="source">no predicted results given (--predicted): no predicted view</p>')
    return page(title, "".join(body))
