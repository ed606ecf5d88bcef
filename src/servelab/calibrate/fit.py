"""Fitting engine parameters: a robust loss of log(predicted / measured), minimised by Nelder-Mead on a
linearization of the predictor."""

import math
from collections.abc import Callable

import numpy as np

from servelab.calibrate.params import BOUNDS, FIT_START, PARAMS, TTFT_TERMS
from servelab.calibrate.pool import SERIAL, Jobs, Price, price_rows
from servelab.calibrate.rows import Case


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
    """Robust loss of log-ratio residuals: quadratic below `scale`, linear above (outliers do not steer the
    fit)."""
    z = (r / scale) ** 2
    return 2 * scale**2 * (np.sqrt(1 + z) - 1)


def nelder_mead(
    f: Callable[[np.ndarray], float], x0: np.ndarray, step: float = 0.7, iters: int = 120, tol: float = 1e-4
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


def to_params(x: np.ndarray, names: tuple[str, ...] = PARAMS) -> dict[str, float]:
    out = {}
    for name, v in zip(names, x, strict=False):
        lo, hi = BOUNDS[name]
        out[name] = float(min(max(math.exp(v), lo), hi))
    return out


def from_params(params: dict[str, float]) -> np.ndarray:
    return np.array([math.log(params[name]) for name in params])


def loss(cases: list[Case], params: dict[str, float], price: Price, jobs: Jobs = SERIAL) -> float:
    """Mean robust loss of log(pred / measured), TTFT and TPOT weighted alike (exact: runs the predictor)."""
    preds = price_rows([(c, params) for c in cases], price, jobs, "loss")
    return _loss(preds, _measured(cases))


def _measured(cases: list[Case]) -> np.ndarray:
    return np.array([[c.ttft_ms, c.tpot_ms] for c in cases]).reshape(-1, 2)


def _loss(preds: np.ndarray, meas: np.ndarray) -> float:
    if preds.size == 0:
        return 0.0
    return float(np.mean(soft_l1(np.log(np.maximum(preds, 1e-3 * meas) / meas))))


class Linearized:
    """Each case's (TTFT, TPOT) as an affine function of the engine parameters around `params`.

    A step's time is affine in every fitted parameter (overheads add, gaps multiply kernel counts; the
    eager-launch term has one kink), and TTFT and TPOT are sums of step times, so a finite-difference Jacobian
    predicts the simulator closely near the point. Fitting on it costs microseconds instead of a simulation
    per row; every error the calibration reports is then measured with the real predictor at the fitted
    parameters."""

    def __init__(
        self,
        cases: list[Case],
        params: dict[str, float],
        price: Price,
        jobs: Jobs = SERIAL,
        phase: str = "linearization",
    ):
        self.params = dict(params)
        self.names = tuple(params)
        # the parameters the simulator sees, each moved by its finite-difference step
        steps = {n: max(0.3 * params[n], 10 * BOUNDS[n][0]) for n in self.names if n not in TTFT_TERMS}
        points = [params, *(dict(params, **{n: params[n] + d}) for n, d in steps.items())]
        # every row at every point in one batch, so that the workers stay busy from one point to the next
        priced = price_rows([(c, p) for p in points for c in cases], price, jobs, phase)
        at = priced.reshape(len(points), len(cases), 2)
        self.base = at[0]
        self.jac = np.zeros((len(cases), 2, len(self.names)))
        for k, name in enumerate(self.names):
            if name in TTFT_TERMS:  # added to TTFT outside the simulator: the derivative is known
                self.jac[:, 0, k] = [TTFT_TERMS[name](c) for c in cases]
        for j, (name, step) in enumerate(steps.items(), start=1):
            self.jac[:, :, self.names.index(name)] = (at[j] - self.base) / step

    def predict(self, params: dict[str, float], rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        d = np.array([params[n] - self.params[n] for n in self.names])
        return self.base[rows] + self.jac[rows] @ d

    def unpriced(self, rows: np.ndarray | slice = slice(None)) -> set[str]:
        """Parameters none of these rows depends on (moe_prompt_token_us on dense models): a fit cannot
        learn them there."""
        return {n for k, n in enumerate(self.names) if not np.any(self.jac[rows][:, :, k])}


def fit(
    cases: list[Case],
    start: dict[str, float],
    price: Price,
    iters: int = 120,
    rounds: int = 2,
    lin: Linearized | None = None,
    rows: np.ndarray | None = None,
    jobs: Jobs = SERIAL,
    phase: str = "fit",
) -> dict[str, float]:
    """Minimise the robust loss over the parameters: Nelder-Mead on the linearized predictor, re-linearized at
    the result `rounds` times (pass `lin` and `rows` to fit a subset on an existing linearization, once)."""
    params = dict(start)
    for r in range(rounds if lin is None else 1):
        here = lin or Linearized(cases, params, price, jobs, f"{phase}, linearization {r + 1} of {rounds}")
        sel = rows if rows is not None else slice(None)
        meas = _measured(cases)[sel] if rows is None else _measured([cases[i] for i in rows])
        names = tuple(params)

        def objective(x, here=here, names=names, sel=sel, meas=meas):
            return _loss(here.predict(to_params(x, names), sel), meas)

        x, _ = nelder_mead(objective, from_params(params), iters=iters)
        params = to_params(x, names)
    return params


def fit_engine(
    cases: list[Case], start: dict[str, float], price: Price, iters: int, jobs: Jobs = SERIAL
) -> tuple[dict[str, float], Linearized]:
    """The engine's fit on all its rows, and the linearization at the fitted point (for cross-validation).
    A parameter that is 0 unless fitted (FIT_START) and that no row depends on is left out of the fit, so
    that it keeps its documented 0 (a fit on dense rows alone says nothing of the MoE prompt cost)."""
    phase = f"fit {cases[0].engine}" if cases else "fit"
    params = fit(cases, start, price, iters, jobs=jobs, phase=phase)
    lin = Linearized(cases, params, price, jobs, f"{phase}, linearization at the fit")
    unpriced = lin.unpriced() & FIT_START.keys()
    return {n: v for n, v in params.items() if n not in unpriced}, lin


def errors_of(
    cases: list[Case], params: dict[str, float], price: Price, jobs: Jobs = SERIAL, phase: str = "errors"
) -> tuple[np.ndarray, np.ndarray]:
    preds = price_rows([(c, params) for c in cases], price, jobs, phase)
    ttft = rel_errors(preds[:, 0], np.array([c.ttft_ms for c in cases]))
    tpot = rel_errors(preds[:, 1], np.array([c.tpot_ms for c in cases]))
    return ttft, tpot
