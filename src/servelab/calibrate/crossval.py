"""Leave-one-family-out cross-validation: how well an engine's fit predicts a model family it never saw
(families: servelab.calibrate.families)."""

import numpy as np

from servelab.calibrate.fit import Linearized, Price, errors_of, fit, summary
from servelab.calibrate.rows import ENGINES, Case


def leave_one_family_out(
    cases: list[Case],
    start: dict[str, dict[str, float]],
    price: Price,
    iters: int,
    lins: dict[str, tuple[list[Case], Linearized]] | None = None,
) -> dict:
    """For each engine and each model family: fit on the engine's other families, predict the left-out one
    with the real predictor. `lins` (engine -> (cases, Linearized)) reuses the linearizations of the full
    fits."""
    ttft_all: list[float] = []
    tpot_all: list[float] = []
    out: dict = {"by_family": {}, "params": {}, "rows": {}}
    for engine in ENGINES:
        mine = [c for c in cases if c.engine == engine]
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
            out["rows"].update({c.row_id: (a, b) for c, a, b in zip(test, ttft, tpot, strict=True)})
            ttft_all.extend(ttft)
            tpot_all.extend(tpot)
            out["params"][f"{engine}/{family}"] = params
            out["by_family"][f"{engine}/{family}"] = {
                "ttft": summary(ttft),
                "tpot": summary(tpot),
                "trained_on": int(train.size),
            }
    out["ttft"], out["tpot"] = np.array(ttft_all), np.array(tpot_all)
    return out
