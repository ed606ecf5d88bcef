"""Assertions of `servelab run`: a threshold on one metric of one stage, or a bound on its regression against
a stored baseline run.

Grammar, one assertion per string:

    REF OP NUMBER                  bench.p99_ttft_ms <= 3000        gsm8k.exact_match >= 0.92
    REF regress OP NUMBER%         bench.median_tpot_ms regress <= 5%      (needs --baseline RUN_ID)
    REF = STAGE.METRIC | STAGE[CONFIG].METRIC
    OP  = <= | < | >= | > | ==

A REF without [CONFIG] holds for every config of the stage (every bench config, every lm-eval task). The
value judged is the median over the stage's repetitions. `regress` is the change in the bad direction, in %
of the baseline's median: an increase for latencies and counts of failures (see `lower_is_better`), a decrease
for everything else (throughputs, accuracies); an improvement is a negative regression.

Each assertion ends as pass, fail, or error (the stage did not run, or did not produce the metric, or the
baseline lacks it); one on a stage this run leaves out (`--stages`) is skipped, and does not count against
the run.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from servelab.errors import ServelabError
from servelab.metrics.repeats import median
from servelab.readable import number

OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
    "==": operator.eq,
}
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_GRAMMAR = re.compile(
    r"\s*(?P<stage>[A-Za-z][A-Za-z0-9_-]*)(?:\[(?P<config>[^\[\]\s]+)\])?\.(?P<metric>[^\s<>=]+)"
    r"(?:\s+(?P<regress>regress))?\s*(?P<op><=|>=|==|<|>)\s*(?P<value>" + _NUMBER + r")\s*(?P<pct>%)?\s*"
)
EXPECTED = "STAGE[CONFIG].METRIC OP NUMBER or STAGE.METRIC regress OP NUMBER% (OP: <= < >= > ==)"
# Words of metric names where a larger value is worse (latencies, durations, failures).
_LOWER_IS_BETTER = ("ttft", "tpot", "itl", "e2el", "latency", "duration", "failed", "not_sent", "error")

# (stage, config) -> metric -> the values of every repetition
Values = Mapping[tuple[str, str], Mapping[str, list[float]]]


@dataclass(frozen=True)
class Assertion:
    text: str
    stage: str
    config: str | None  # None: every config of the stage
    metric: str
    op: str
    value: float
    regress: bool = False  # value is a % bound on the regression against the baseline

    def dump(self) -> dict:
        return {"assertion": self.text}


@dataclass
class Judged:
    assertion: Assertion
    outcome: str  # pass | fail | error | skipped (its stage is not run)
    detail: str
    observed: dict[str, float] = field(default_factory=dict)  # config -> median (or % regression)

    def dump(self) -> dict:
        return {
            "assertion": self.assertion.text,
            "outcome": self.outcome,
            "detail": self.detail,
            "observed": self.observed,
        }


def parse(text: str, where: str | None = None) -> Assertion:
    """One assertion. Bad grammar is a ServelabError for the --assert option, or, with `where` (a file and
    its field), naming that."""

    def bad(why: str) -> ServelabError:
        message = f"{text!r}: {why}"
        return ServelabError(f"{where}: {message}") if where else ServelabError(message, field="assert")

    m = _GRAMMAR.fullmatch(text)
    if not m:
        raise bad(f"expected {EXPECTED}")
    regress, pct = bool(m["regress"]), bool(m["pct"])
    if regress and not pct:
        raise bad("a regression bound is a percentage, e.g. regress <= 5%")
    if pct and not regress:
        raise bad("a % bound is a regression (STAGE.METRIC regress <= 5%); a threshold is a number")
    return Assertion(text.strip(), m["stage"], m["config"], m["metric"], m["op"], float(m["value"]), regress)


def parse_all(texts: list[str], where: str | None = None) -> list[Assertion]:
    return [parse(t, where) for t in texts]


def lower_is_better(metric: str) -> bool:
    """True for latencies (ttft, tpot, itl, e2el, *_ms), durations and failure counts."""
    name = metric.lower()
    return name.endswith("_ms") or any(word in re.split(r"[^a-z0-9]+|_", name) for word in _LOWER_IS_BETTER)


def medians(values: Values) -> dict[tuple[str, str], dict[str, float]]:
    return {key: {name: median(vs) for name, vs in metrics.items() if vs} for key, metrics in values.items()}


def judge(
    assertions: list[Assertion],
    values: Values,
    baseline: Values | None = None,
    not_run: Collection[str] = (),
) -> list[Judged]:
    """Each assertion judged on the medians of `values`; one on a stage of `not_run` (a stage the run leaves
    out, as `--stages bench,gsm8k` leaves out bfcl) is skipped, not an error."""
    current = medians(values)
    base = medians(baseline) if baseline is not None else None
    return [
        Judged(a, "skipped", f"stage {a.stage} is not run in this run")
        if a.stage in not_run
        else _judge(a, current, base)
        for a in assertions
    ]


def _judge(a: Assertion, current: dict, base: dict | None) -> Judged:
    configs = sorted(c for s, c in current if s == a.stage)
    if not configs:
        return Judged(a, "error", f"stage {a.stage} produced no metrics (it did not run or it failed)")
    if a.config is not None:
        if a.config not in configs:
            return Judged(a, "error", f"{a.stage} has no config {a.config} (it has {', '.join(configs)})")
        configs = [a.config]
    if a.regress and base is None:
        return Judged(a, "error", "a regression bound needs a baseline run (--baseline RUN_ID)")
    observed: dict[str, float] = {}
    failing = []
    for config in configs:
        value = current[(a.stage, config)].get(a.metric)
        where = f"{a.stage}[{config}]" if config else a.stage
        if value is None or math.isnan(value):
            return Judged(a, "error", f"{where} has no metric {a.metric}", observed)
        if a.regress:
            assert base is not None
            ref = base.get((a.stage, config), {}).get(a.metric)
            if ref is None or math.isnan(ref):
                return Judged(a, "error", f"the baseline has no {where}.{a.metric}", observed)
            if ref == 0:
                return Judged(a, "error", f"the baseline's {where}.{a.metric} is 0: no % change", observed)
            change = (value - ref) / abs(ref) * 100
            value = change if lower_is_better(a.metric) else -change
        observed[config] = value
        if not OPS[a.op](value, a.value):
            failing.append(config)
    shown = "; ".join(f"{c or a.stage}: {_fmt(v)}{'%' if a.regress else ''}" for c, v in observed.items())
    if failing:
        return Judged(a, "fail", f"{shown} (fails in {', '.join(c or a.stage for c in failing)})", observed)
    return Judged(a, "pass", shown, observed)


def _fmt(x: float) -> str:
    return number(x)
