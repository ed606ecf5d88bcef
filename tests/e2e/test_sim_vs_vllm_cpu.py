"""servelab's aggregated-serving simulator against a real engine: vLLM's V1 engine (CPU build) serving a tiny
Llama here. The simulator gets the engine's step costs measured from the server's own /metrics (requests
unlike the checked ones, one round before every checked run), then predicts the engine's own TTFT and TPOT
means for closed-loop runs at 1, 4 and 16 clients and two input/output lengths, each run twice. The harness is
accuracy/sim_vs_vllm_cpu.py, run here as a program against the suite's server; docs/accuracy.md, section 3 has
the runs behind these numbers.

Each run is predicted at the concurrency the engine saw (Little's law on vLLM's end-to-end histogram): on two
cores the clients often cannot hold their count of requests inside the engine (16 clients delivered 15 in one
pass and 1 in the next). TTFT is compared inside the engine core (vLLM's queue + prefill time histograms), the
part the simulator models: vLLM's API process in front of it waits for CPU under load, and a CI run failed at
x5.06 when the whole TTFT was compared. Tolerances, a margin over the worst of 72 runs (six full checks):
- One client: engine TTFT within a factor of 2.5 either way (worst seen x1.66 in four more checks), TPOT
  within a factor of 2 (worst x1.49). A lone prefill of 100-150 tokens takes 1.6-2.6 ms here; the fitted step
  model prices it high.
- 4 or 16 clients: TPOT within a factor of 2.5 (worst x1.72), engine TTFT within a factor of 6 (worst x3.52).
  Both are predicted low when the clients deliver part of their load (TTFT by up to 3.5x with 16 clients seen
  as 2-6 in the engine: they arrive in convoys, not as a steady loop); with the load delivered the worst is
  x2.2. Since every point also runs once unmeasured first (cold step shapes), three checks saw at most x2.15.
  The factors still fail a scheduler that queues wrongly by an order of magnitude, and the trend test below
  must hold.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
# (one client, 4 or 16 clients): a prediction within a factor of x either way of the measured mean
FACTOR = {"engine_ttft_ms": (2.5, 6.0), "tpot_ms": (2.0, 2.5)}
MAX_STEP_FIT_ERROR = 0.25  # servelab's step model must reproduce the measured steps within this (median)


HARNESS = ROOT / "accuracy" / "sim_vs_vllm_cpu.py"


@pytest.fixture(scope="module")
def check(vllm_server, tiny_llama, tmp_path_factory):
    out = Path(os.environ.get("SERVELAB_SIM_CHECK_OUT") or tmp_path_factory.mktemp("sim") / "check.json")
    run = subprocess.run(
        [
            sys.executable,
            str(HARNESS),
            "--base-url",
            vllm_server.url,
            "--served-model-name",
            vllm_server.model,
            "--model-dir",
            str(tiny_llama),
            "--passes",
            "2",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=850,  # below the suite's 900 s per-test limit, which this module fixture counts against
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(out.read_text())


def test_step_model_reproduces_measured_steps(check):
    assert check["profile"]["fit_error"] <= MAX_STEP_FIT_ERROR, check["step_costs"]


@pytest.mark.parametrize("metric", ["engine_ttft_ms", "tpot_ms"])
def test_simulator_matches_measured_runs(check, metric):
    misses = []
    for r in check["runs"]:
        m = r[metric]
        ratio = m["predicted"] / m["measured"]
        limit = FACTOR[metric][r["concurrency"] > 1]
        if not 1 / limit <= ratio <= limit:
            misses.append(
                f"c={r['concurrency']} (engine saw {r['seen_concurrency']}) {r['isl']}/{r['osl']} pass "
                f"{r['pass']}: predicted {m['predicted']:.2f} ms, measured {m['measured']:.2f} ms "
                f"(x{ratio:.2f} outside x{limit} either way)"
            )
    assert not misses, "\n".join(misses)


def test_concurrency_trend_agrees(check):
    """Beyond per-run tolerance: from the lightest to the heaviest load the engine saw, TTFT and TPOT must
    move the same way in the simulator as on the engine (the queueing a mean-field formula gets wrong)."""
    for isl, osl in {(r["isl"], r["osl"]) for r in check["runs"]}:
        runs = sorted(
            (r for r in check["runs"] if (r["isl"], r["osl"]) == (isl, osl)),
            key=lambda r: r["seen_concurrency"],
        )
        lo, hi = runs[0], runs[-1]
        if hi["seen_concurrency"] < 4:
            continue  # the clients never loaded the engine (reported in the result); nothing to compare
        for metric in ("engine_ttft_ms", "tpot_ms"):
            meas = hi[metric]["measured"] / lo[metric]["measured"]
            pred = hi[metric]["predicted"] / lo[metric]["predicted"]
            assert (meas > 1.1) <= (pred > 1.0), (
                f"{isl}/{osl} {metric}: measured x{meas:.2f}, predicted x{pred:.2f}"
            )
