"""AIConfigurator as a data source and a yardstick: its `systems/silicon_sample.csv` (PyPI
`aiconfigurator-core`, pinned) holds the measured rows the engine calibration fits; its own agg-mode estimate
of the same rows is the error to beat. Both run in a venv of their own (never the project's), created on first
use."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from servelab.calibrate.fit import rel_errors, summary
from servelab.calibrate.rows import Case, concurrency_of
from servelab.errors import ServelabError

AIC_PACKAGE = "aiconfigurator-core"
AIC_VERSION = "0.12.0"
CACHE = Path(".cache")  # under the working directory, as the repository's .gitignore expects
AIC_VENV = CACHE / "aic-venv"


def aic_csv(venv: Path = AIC_VENV) -> tuple[Path, str]:
    """Install aiconfigurator-core into its own venv (once) and return the sample file and the package
    version."""
    py = venv / "bin" / "python"
    if not py.exists():
        made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
        if made.returncode != 0:
            raise ServelabError(
                f"{venv}: cannot make a venv for {AIC_PACKAGE} ({made.stderr.strip()[-200:]})"
            )
    probe = [
        "-c",
        (
            "import importlib.metadata as m, aiconfigurator_core, pathlib; "
            "print(m.version('aiconfigurator-core')); "
            "print(pathlib.Path(aiconfigurator_core.__file__).parent / 'systems' / 'silicon_sample.csv')"
        ),
    ]
    got = subprocess.run([str(py), *probe], capture_output=True, text=True, check=False)
    if got.returncode != 0 or got.stdout.split()[:1] != [AIC_VERSION]:
        install = [str(py), "-m", "pip", "install", "--quiet", f"{AIC_PACKAGE}=={AIC_VERSION}"]
        done = subprocess.run(install, capture_output=True, text=True, check=False)
        got = subprocess.run([str(py), *probe], capture_output=True, text=True, check=False)
        if done.returncode != 0 or got.returncode != 0:
            why = (done.stderr or got.stderr).strip().splitlines()[-1:] or ["no message"]
            raise ServelabError(
                f"{AIC_PACKAGE}=={AIC_VERSION} could not be installed into {venv} ({why[0]}); "
                "without network pass a local silicon_sample.csv with --csv FILE",
                field="aic_sample",
            )
    version, path = got.stdout.split()[:2]
    return Path(path), version


# AIConfigurator's own agg-mode estimate of each row, run inside its venv (PyPI `aiconfigurator`, same
# version). A row is asked as written; when AIConfigurator cannot load the model id or the engine version, it
# is asked again with the id of its bundled config and its default version, and the answer says which.
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
