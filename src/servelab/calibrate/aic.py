"""AIConfigurator as a data source and a yardstick: its `systems/silicon_sample.csv` (PyPI
`aiconfigurator-core`, pinned) holds the measured rows the engine calibration fits; its own agg-mode estimate
of the same rows (PyPI `aiconfigurator`, same version) is the error to beat.

servelab never installs them. They come from an environment that already has them: this one, with the
`[aic]` extra (`pip install 'servelab[aic]'`), or another one named by its python (`--aic-python PATH`, say a
venv kept apart from the project's). Both are asked through that python in a subprocess: one path for both.
"""

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servelab.calibrate.fit import rel_errors, summary
from servelab.calibrate.rows import Case, concurrency_of
from servelab.errors import ServelabError

AIC_PACKAGE = "aiconfigurator-core"
AIC_ESTIMATOR = "aiconfigurator"
AIC_VERSION = "0.12.0"
CACHE = Path(".cache")  # AIConfigurator's answers, under the working directory, as .gitignore expects
HOW = "pip install 'servelab[aic]', or name the python of an environment that has it with --aic-python PATH"
# The version and package folder of a distribution, printed by the python that would run it.
_PROBE = (
    "import importlib.metadata as m, importlib.util as u, pathlib, sys; "
    "dist, module = sys.argv[1:3]; "
    "print(m.version(dist)); "
    "print(pathlib.Path(u.find_spec(module).origin).parent)"
)


@dataclass(frozen=True)
class AicPython:
    """The python that runs AIConfigurator, and how it was chosen (said in the run's log)."""

    path: Path
    origin: str


def aic_python(named: Path | None = None) -> AicPython:
    """`--aic-python PATH` when given; else this python when the `[aic]` extra is installed here; else one
    line saying how to get it."""
    if named is not None:
        if not (named.is_file() and os.access(named, os.X_OK)):
            raise ServelabError(f"{named} is not an executable file (a python)", field="aic_python")
        return AicPython(named, "--aic-python")
    if importlib.util.find_spec("aiconfigurator_core") is None:
        raise ServelabError(
            f"AIConfigurator ({AIC_PACKAGE} {AIC_VERSION}) is not installed here: {HOW}; "
            "or fit on a local silicon_sample.csv with --csv FILE",
            field="aic_python",
        )
    return AicPython(Path(sys.executable), "this environment, the [aic] extra")


def _installed(py: AicPython, dist: str, module: str) -> Path:
    """The package folder of `dist` in that python's environment, at the pinned version; else one line."""
    got = subprocess.run(
        [str(py.path), "-c", _PROBE, dist, module], capture_output=True, text=True, check=False
    )
    lines = got.stdout.splitlines()
    if got.returncode == 0 and len(lines) >= 2 and lines[0] == AIC_VERSION:
        return Path(lines[1])
    found = f"has {dist} {lines[0]}" if got.returncode == 0 and lines else f"has no {dist}"
    raise ServelabError(
        f"{py.path} ({py.origin}) {found}; servelab's calibration uses {dist} {AIC_VERSION}: {HOW}",
        field="aic_python",
    )


def aic_csv(named: Path | None = None) -> tuple[Path, str, AicPython]:
    """AIConfigurator's silicon_sample.csv in the environment chosen by `aic_python`, its version and that
    python."""
    py = aic_python(named)
    path = _installed(py, AIC_PACKAGE, "aiconfigurator_core") / "systems" / "silicon_sample.csv"
    if not path.is_file():
        raise ServelabError(
            f"{path}: not found in {AIC_PACKAGE} {AIC_VERSION} ({py.path})", field="aic_python"
        )
    return path, AIC_VERSION, py


def predictions_cache(system: str) -> Path:
    return CACHE / f"aic-predictions-{system}.json"


def _cached(cache: Path) -> dict:
    return json.loads(cache.read_text()) if cache.is_file() else {}


def estimator_for(row_ids: list[str], system: str, named: Path | None = None) -> AicPython | None:
    """The python that will run AIConfigurator's estimate of the rows its cache has not answered, checked
    now (before the fit, not after it); None when the cache answers every row (nothing runs)."""
    done = _cached(predictions_cache(system))
    if all(i in done for i in row_ids):
        return None
    py = aic_python(named)
    _installed(py, AIC_ESTIMATOR, "aiconfigurator")
    return py


# AIConfigurator's own agg-mode estimate of each row, run by the python `estimator_for` chose (PyPI
# `aiconfigurator`, same version). A row is asked as written; when AIConfigurator cannot load the model id or
# the engine version, it is asked again with the id of its bundled config and its default version, and the
# answer says which.
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


def aic_predictions(rows: list[dict], system: str, py: AicPython | None) -> dict:
    """AIConfigurator's estimate per row id, cached in `predictions_cache(system)` by row id; `py` (from
    `estimator_for`) runs the rows the cache lacks."""
    cache = predictions_cache(system)
    done = _cached(cache)
    todo = [r for r in rows if r["id"] not in done]
    if todo:
        if py is None:
            raise ServelabError(
                f"{len(todo)} rows are not in {cache} and no AIConfigurator python was chosen"
            )
        payload = [dict(r, _concurrency=str(concurrency_of(r)), system=system) for r in todo]
        got = subprocess.run(
            [str(py.path), "-c", AIC_SCRIPT.replace('"h200_sxm"', repr(system))],
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


def compare_with_aic(cases: list[Case], aic: dict, cv_rows: dict) -> dict:
    """AIConfigurator's error next to servelab's cross-validated error, on the rows AIConfigurator
    answered."""
    answered = [c for c in cases if "ttft_ms" in aic.get(c.row_id, {})]
    a_ttft = rel_errors(
        np.array([aic[c.row_id]["ttft_ms"] for c in answered]), np.array([c.ttft_ms for c in answered])
    )
    a_tpot = rel_errors(
        np.array([aic[c.row_id]["tpot_ms"] for c in answered]), np.array([c.tpot_ms for c in answered])
    )
    s_err = np.array([cv_rows[c.row_id] for c in answered]).reshape(-1, 2)
    how: dict[str, int] = {}
    for c in answered:
        how[aic[c.row_id]["how"]] = how.get(aic[c.row_id]["how"], 0) + 1
    failures: dict[str, int] = {}
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
