"""Leave-one-family-out cross-validation: how well an engine's fit predicts a model family it never saw
(families: servelab.specs.families)."""

from collections.abc import Mapping

import numpy as np

from servelab.calibrate.fit import Linearized, fit, fit_engine, rel_errors, summary
from servelab.calibrate.params import FIT_START, PARAM_SETS, PARAMS
from servelab.calibrate.pool import SERIAL, Echo, Jobs, Price, price_rows
from servelab.calibrate.rows import ENGINES, Case
from servelab.engines import Engine


def leave_one_family_out(
    cases: list[Case],
    start: dict[str, dict[str, float]],
    price: Price,
    iters: int,
    lins: Mapping[Engine, tuple[list[Case], Linearized]] | None = None,
    jobs: Jobs = SERIAL,
) -> dict:
    """For each engine and each model family: fit on the engine's other families, predict the left-out one
    with the real predictor. `lins` (engine -> (cases, Linearized)) reuses the linearizations of the full
    fits."""
    folds = []  # (engine/family, its rows, the parameters fitted without them, rows trained on)
    for engine in ENGINES:
        mine = [c for c in cases if c.engine == engine]
        if not mine:
            continue
        if lins and engine in lins:
            mine, lin = lins[engine]
        else:
            lin = Linearized(mine, start[engine], price, jobs, f"cross-validation {engine}, linearization")
        for family in sorted({c.family for c in mine}):
            train = np.array([i for i, c in enumerate(mine) if c.family != family])
            test = [c for c in mine if c.family == family]
            if train.size:
                # a parameter the other families do not depend on (the MoE prompt cost, when the family
                # left out is the engine's only MoE family) keeps its documented 0, not the full fit's value
                unseen = lin.unpriced(train) & FIT_START.keys()
                params = fit(mine, lin.params, price, iters, lin=lin, rows=train)
                params = {n: v for n, v in params.items() if n not in unseen}
            else:  # no other family to fit on: the start, less the parameters moved off their defaults
                params = {n: v for n, v in start[engine].items() if n not in FIT_START}
            folds.append((f"{engine}/{family}", test, params, int(train.size)))
    # the fits cost no simulation; every left-out row is then priced in one batch
    tested = [c for _, test, _, _ in folds for c in test]
    preds = price_rows(
        [(c, params) for _, test, params, _ in folds for c in test],
        price,
        jobs,
        "cross-validation (each family at the fit without it)",
    )
    ttft_all = rel_errors(preds[:, 0], np.array([c.ttft_ms for c in tested]))
    tpot_all = rel_errors(preds[:, 1], np.array([c.tpot_ms for c in tested]))
    out: dict = {"by_family": {}, "params": {}, "rows": {}, "predicted": {}}
    at = 0
    for key, test, params, trained_on in folds:
        ttft, tpot = ttft_all[at : at + len(test)], tpot_all[at : at + len(test)]
        pred = preds[at : at + len(test)]
        at += len(test)
        out["rows"].update({c.row_id: (a, b) for c, a, b in zip(test, ttft, tpot, strict=True)})
        out["predicted"].update(
            {c.row_id: (float(p[0]), float(p[1])) for c, p in zip(test, pred, strict=True)}
        )
        out["params"][key] = params
        out["by_family"][key] = {"ttft": summary(ttft), "tpot": summary(tpot), "trained_on": trained_on}
    out["ttft"], out["tpot"] = ttft_all, tpot_all
    return out


def fit_param_sets(
    cases: list[Case],
    start: dict[str, dict[str, float]],
    price: Price,
    iters: int,
    jobs: Jobs = SERIAL,
    sets: dict[str, tuple[str, ...]] = PARAM_SETS,
    echo: Echo | None = None,
) -> dict[str, dict]:
    """Each parameter set fitted on each engine's rows and cross-validated leaving one family out: set name
    -> {"fitted": engine -> parameters, "cv": leave_one_family_out's result}. A set fits its own parameters
    (and any terms EngineProfile lacks that `start` carries); the others stay out of the parameter dicts, so
    the pricer takes their documented defaults."""
    out = {}
    for k, (name, names) in enumerate(sets.items()):
        own = {e: {k: v for k, v in p.items() if k in names or k not in PARAMS} for e, p in start.items()}
        fitted, lins = {}, {}
        for engine in ENGINES:
            mine = [c for c in cases if c.engine == engine]
            if mine:
                fitted[engine], lin = fit_engine(mine, own[engine], price, iters, jobs)
                lins[engine] = (mine, lin)
                if echo:
                    which = f"parameter set {name} ({k + 1} of {len(sets)})"
                    echo(f"fitted {engine} on {len(mine)} rows, {which}")
        out[name] = {"fitted": fitted, "cv": leave_one_family_out(cases, own, price, iters, lins, jobs)}
    return out
