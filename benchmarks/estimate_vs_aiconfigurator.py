"""One static estimate: servelab in-process and as a whole process, against AIConfigurator in the same run.

    python benchmarks/estimate_vs_aiconfigurator.py

AIConfigurator (PyPI `aiconfigurator`, pinned below) is installed into its own venv under .cache/ on first
use, never into servelab's environment. Both tools answer the same question: Qwen3-32B on 2x H200, vLLM
backend, batch 8, 1024/1024 tokens, static mode.
"""

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from servelab.predict.engines import engine_profile
from servelab.predict.static import estimate_static
from servelab.specs import Parallel, load_model, load_system

ROOT = Path(__file__).resolve().parents[1]
AIC_VERSION = "0.12.0"
CANDIDATE_VENVS = [ROOT / ".cache/aic-plan-venv", ROOT / ".cache/aic-venv", ROOT / ".cache/aic-estimate-venv"]

AIC_SCRIPT = r"""
import json, logging, statistics, sys, time
logging.disable(logging.WARNING)
from aiconfigurator.cli.api import cli_estimate
from aiconfigurator.sdk.inference_session import InferenceSession
captured = {}
original = InferenceSession.run_static
def capture(self, *a, **kw):
    captured.update(session=self, args=a, kwargs=kw)
    return original(self, *a, **kw)
InferenceSession.run_static = capture
kw = dict(mode="static", backend_name="vllm", isl=1024, osl=1024, batch_size=8, tp_size=2)
api = []
for _ in range(3):
    t = time.perf_counter()
    r = cli_estimate("Qwen/Qwen3-32B", "h200_sxm", **kw)
    api.append(time.perf_counter() - t)
InferenceSession.run_static = original
s = captured["session"]
reused = []
for _ in range(20):
    t = time.perf_counter()
    s.run_static(*captured["args"], **captured["kwargs"])
    reused.append(time.perf_counter() - t)
print(json.dumps({"api_s": api, "reused_s": reused, "ttft_ms": r.ttft, "tpot_ms": r.tpot}))
"""


def aic_python() -> Path:
    for venv in CANDIDATE_VENVS:
        py = venv / "bin/python"
        if (
            py.exists()
            and subprocess.run([str(py), "-c", "import aiconfigurator"], capture_output=True).returncode == 0
        ):
            return py
    venv = CANDIDATE_VENVS[-1]
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin/python"), "-m", "pip", "install", "-q", f"aiconfigurator=={AIC_VERSION}"], check=True
    )
    return venv / "bin/python"


def servelab_in_process() -> dict:
    model, system, parallel, engine = (
        load_model("Qwen/Qwen3-32B"),
        load_system("h200_sxm"),
        Parallel(tp=2),
        engine_profile("vllm"),
    )
    first = time.perf_counter()
    result = estimate_static(model, system, parallel, engine, 8, 1024, 1024)
    first = time.perf_counter() - first
    n = 5000
    t = time.perf_counter()
    for _ in range(n):
        estimate_static(model, system, parallel, engine, 8, 1024, 1024)
    same = (time.perf_counter() - t) / n
    points = [
        (b, i, o)
        for b in (1, 2, 4, 8, 16, 32, 64, 128)
        for i in (512, 1000, 2000, 4000)
        for o in (128, 500, 1000)
    ]
    t = time.perf_counter()
    for b, i, o in points:
        estimate_static(model, system, parallel, engine, b, i, o)
    fresh = (time.perf_counter() - t) / len(points)
    return {
        "first_s": first,
        "same_point_s": same,
        "new_point_s": fresh,
        "ttft_ms": result.ttft_ms,
        "tpot_ms": result.tpot_ms,
    }


def servelab_process() -> list[float]:
    argv = [
        str(Path(sys.executable).parent / "servelab"),
        "estimate",
        "Qwen/Qwen3-32B",
        "--system",
        "h200_sxm",
        "--tp",
        "2",
        "--batch",
        "8",
        "--isl",
        "1024",
        "--osl",
        "1024",
        "--json",
    ]
    times = []
    for _ in range(7):
        t = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return times


def main():
    ours = servelab_in_process()
    proc = servelab_process()
    out = subprocess.run(
        [str(aic_python()), "-c", AIC_SCRIPT],
        capture_output=True,
        text=True,
        check=True,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    aic = json.loads(out.stdout.strip().splitlines()[-1])
    aic_reused, aic_api = statistics.median(aic["reused_s"]), statistics.median(aic["api_s"])
    print("question: Qwen3-32B, 2x h200_sxm, vllm, batch 8, 1024/1024, static")
    print(
        f"servelab  TTFT {ours['ttft_ms']:.1f} ms, TPOT {ours['tpot_ms']:.2f} ms; "
        f"AIConfigurator TTFT {aic['ttft_ms']:.1f} ms, TPOT {aic['tpot_ms']:.2f} ms"
    )
    print(f"{'':40s}{'servelab':>13s}{'AIConfigurator':>16s}{'ratio':>9s}")
    rows = [
        ("in-process, same point again", ours["same_point_s"], aic_reused),
        ("in-process, new point (op cache warm)", ours["new_point_s"], aic_reused),
        ("first call in a process", ours["first_s"], aic_api),
        ("whole process / API call", statistics.median(proc), aic_api),
    ]
    for label, a, b in rows:
        print(f"{label:40s}{a * 1e3:10.3f} ms{b * 1e3:13.3f} ms{b / a:8.1f}x")


if __name__ == "__main__":
    main()
