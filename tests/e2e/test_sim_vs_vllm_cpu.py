"""servelab's aggregated-serving simulator against a real engine: vLLM's V1 engine (CPU build) serving a tiny
Llama here. The simulator gets the engine's step costs measured from the server's own /metrics (requests unlike
the checked ones), then predicts TTFT and TPOT of `servelab bench` closed-loop runs at concurrency 1, 4, 16 and
two input/output lengths; the runs are measured twice. The harness is bench/sim_vs_vllm_cpu.py (it also
regenerates the table in docs/accuracy.md, section 3).

Tolerances (why these numbers): on this 2-core machine the engine, its API process and the client share two
cores with whatever else runs, so a point measured twice differs (the run-to-run spread recorded in the result)
and three full runs of this check differed more than that (docs/accuracy.md, section 3 has all three). A point must
be within max(floor, 2 x its own measured spread):
- At concurrency 1: TPOT floor 50 % (worst error over three runs 42 %), TTFT floor 60 % (worst 49 %).
- Above concurrency 1: within a factor of 3.5 either way, TTFT and TPOT. The requests all have the same length
  (the simulator is given exactly that), and on two busy cores the engine sees them staggered by scheduling
  jitter, so TTFT swings between 'one prefill' and 'a whole wave' from run to run (worst 3.2x), and the measured
  TPOT at concurrency 16 moved between 0.8 and 2.7 ms across full runs. The band still fails a scheduler that
  queues wrongly by an order of magnitude, and the trend test below must hold.
"""

import importlib
import json
import os
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
FLOOR = {"ttft_ms": 0.60, "tpot_ms": 0.50}
FACTOR_ABOVE_C1 = 3.5
MAX_STEP_FIT_ERROR = 0.25  # servelab's step model must reproduce the measured steps within this (median)


def harness():
    if str(ROOT / "bench") not in sys.path:
        sys.path.insert(0, str(ROOT / "bench"))
    return importlib.import_module("sim_vs_vllm_cpu")


@pytest.fixture(scope="module")
def check(vllm_server, tiny_llama):
    result = harness().check_server(vllm_server.url, vllm_server.model, tiny_llama, passes=2, reps=4)
    out = os.environ.get("SERVELAB_SIM_CHECK_OUT")
    if out:
        Path(out).write_text(json.dumps(result, indent=1))
    return result


def test_step_model_reproduces_measured_steps(check):
    assert check["profile"]["fit_error"] <= MAX_STEP_FIT_ERROR, check["step_costs"]


@pytest.mark.parametrize("metric", ["ttft_ms", "tpot_ms"])
def test_simulator_matches_measured_points(check, metric):
    misses = []
    for p in check["points"]:
        m = p[metric]
        if p["concurrency"] > 1:
            ratio = m["predicted"] / m["measured"]
            if not 1 / FACTOR_ABOVE_C1 <= ratio <= FACTOR_ABOVE_C1:
                misses.append(f"c={p['concurrency']} {p['isl']}/{p['osl']}: predicted {m['predicted']:.2f} ms, "
                              f"measured {m['measured']:.2f} ms (x{ratio:.2f} outside x{FACTOR_ABOVE_C1} either way)")
            continue
        tol = max(FLOOR[metric], 2 * (m["spread"] or 0.0))
        if abs(m["error"]) > tol:
            misses.append(f"c={p['concurrency']} {p['isl']}/{p['osl']}: predicted {m['predicted']:.2f} ms, "
                          f"measured {m['measured']:.2f} ms ({m['error']:+.0%} > {tol:.0%})")
    assert not misses, "\n".join(misses)


def test_concurrency_trend_agrees(check):
    """Beyond per-point tolerance: going from concurrency 1 to 16 must move TTFT and TPOT the same way in the
    simulator as on the engine (the queueing a mean-field formula gets wrong)."""
    for isl, osl in {(p["isl"], p["osl"]) for p in check["points"]}:
        pts = sorted((p for p in check["points"] if (p["isl"], p["osl"]) == (isl, osl)), key=lambda p: p["concurrency"])
        lo, hi = pts[0], pts[-1]
        for metric in ("ttft_ms", "tpot_ms"):
            meas = hi[metric]["measured"] / lo[metric]["measured"]
            pred = hi[metric]["predicted"] / lo[metric]["predicted"]
            assert (meas > 1.1) <= (pred > 1.0), f"{isl}/{osl} {metric}: measured x{meas:.2f}, predicted x{pred:.2f}"
