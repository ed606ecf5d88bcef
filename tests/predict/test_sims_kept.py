"""Simulations kept across processes (servelab.predict.serving.kept): a simulation read back is the one run
afresh, every field of it exactly (float bits included); it is read only for the same inputs; a malformed
entry is simulated again; a plan answered from kept simulations runs none and is the plan computed afresh."""

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest

import servelab
import servelab.predict.serving.aggregated as aggregated
from servelab import cachedir
from servelab.perfdb import price_cache
from servelab.perfdb.db import PerfDB, perfdb_for
from servelab.predict.engines import engine_profile
from servelab.predict.plan import PlanRequest, make_plan
from servelab.predict.serving import StepPricer, Workload
from servelab.predict.serving.aggregated import SimResult, simulate
from servelab.predict.static import prepare
from servelab.specs import Parallel, load_model, load_system

SRC = Path(servelab.__file__).resolve().parents[1]
FIELDS = [f for f in SimResult.__dataclass_fields__ if f not in ("wall_ms", "_distributions")]


def no_simulation(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("simulated again")

    monkeypatch.setattr(aggregated, "_simulate", fail)


def lane_inputs(engine_name: str = "vllm", spec_tokens: int = 0):
    """A Qwen3-32B TP2 lane on H200 (a new PerfDB each time: nothing of an earlier call in memory)."""
    PerfDB.clear_shared()
    system, model, parallel = load_system("h200_sxm"), load_model("qwen3-32b"), Parallel(tp=2)
    engine = engine_profile(engine_name)
    mem = prepare(model, system, parallel, engine.max_num_batched_tokens)
    return model, parallel, engine, mem, StepPricer(model, parallel, engine, perfdb_for(system), spec_tokens)


def fields_of(sim: SimResult) -> list[str]:
    return [repr(getattr(sim, f)) for f in FIELDS] + [repr(sim.percentiles)]


@pytest.mark.parametrize(
    "wl",
    [
        Workload(isl=1000, osl=200, concurrency=16, num_requests=48),
        Workload(isl=1000, osl=200, rate=5.0, num_requests=32),
    ],
    ids=["closed", "open"],
)
def test_a_kept_simulation_is_the_simulation_run_afresh(prices, monkeypatch, wl):
    monkeypatch.setenv(price_cache.ENV_SWITCH, "0")
    afresh = simulate(*lane_inputs()[:4], wl, lane_inputs()[4])
    monkeypatch.setenv(price_cache.ENV_SWITCH, "1")
    model, parallel, engine, mem, pricer = lane_inputs()
    cold = simulate(model, parallel, engine, mem, wl, pricer)  # simulated, then kept
    assert fields_of(cold) == fields_of(afresh)
    shapes = pricer.priced  # what `servelab estimate` reports as shapes_priced
    assert shapes > 0
    price_cache.save_all()
    assert [p.stem.split("-")[0] for p in prices.rglob("sim-*.prices")] == ["sim"]

    no_simulation(monkeypatch)
    model, parallel, engine, mem, pricer = lane_inputs()
    warm = simulate(model, parallel, engine, mem, wl, pricer)
    assert len(warm._distributions) == 12  # what the keeping process had made: every metric, every clock
    assert pricer.priced == shapes  # counted as the simulation counted them, though none was priced now
    assert fields_of(warm) == fields_of(afresh)
    assert warm.lane_workload == afresh.lane_workload == wl


def test_other_inputs_are_simulated_not_read(prices, monkeypatch):
    wl = Workload(isl=1000, osl=200, concurrency=16, num_requests=48)
    simulate(*lane_inputs()[:4], wl, lane_inputs()[4])
    price_cache.save_all()
    simulated = []
    run = aggregated._simulate

    def counted(*args, **kwargs):
        simulated.append(args)
        return run(*args, **kwargs)

    monkeypatch.setattr(aggregated, "_simulate", counted)
    model, parallel, engine, mem, pricer = lane_inputs()
    simulate(model, parallel, engine, mem, wl, pricer)
    assert simulated == []  # the same question: read
    simulate(model, parallel, engine, mem, wl.model_copy(update={"concurrency": 8}), pricer)
    simulate(model, parallel, engine, mem, wl, pricer, prefilled=True)
    simulate(*lane_inputs("sglang")[:4], wl, lane_inputs("sglang")[4])
    simulate(*lane_inputs()[:4], wl, lane_inputs(spec_tokens=2)[4])
    assert len(simulated) == 4


def test_a_malformed_entry_is_simulated_again(prices, monkeypatch):
    wl = Workload(isl=1000, osl=200, concurrency=16, num_requests=48)
    monkeypatch.setenv(price_cache.ENV_SWITCH, "0")
    afresh = simulate(*lane_inputs()[:4], wl, lane_inputs()[4])
    monkeypatch.setenv(price_cache.ENV_SWITCH, "1")
    simulate(*lane_inputs()[:4], wl, lane_inputs()[4])
    price_cache.save_all()
    (path,) = prices.rglob("sim-*.prices")
    data = marshal.loads(path.read_bytes())
    (tag,) = data["entries"]
    value = data["entries"][tag]
    data["entries"][tag] = (*value[:3], value[3][:-1], *value[4:])  # the lane statistics one field short
    path.write_bytes(marshal.dumps(data))
    again = simulate(*lane_inputs()[:4], wl, lane_inputs()[4])
    assert fields_of(again) == fields_of(afresh)


def test_nothing_is_kept_with_the_cache_off(prices, monkeypatch):
    monkeypatch.setenv(price_cache.ENV_SWITCH, "0")
    simulate(
        *lane_inputs()[:4], Workload(isl=1000, osl=200, concurrency=4, num_requests=24), lane_inputs()[4]
    )
    price_cache.save_all()
    assert not prices.exists()


@pytest.mark.slow  # 0.9 s of CPU a case: a whole plan search
@pytest.mark.parametrize("mode", ["agg", "disagg"])
def test_a_plan_from_kept_simulations_runs_none_and_is_the_plan_computed_afresh(prices, monkeypatch, mode):
    question = PlanRequest(model="qwen3-32b", system="h100_sxm", gpus=4, mode=mode)

    def plan_json() -> str:
        PerfDB.clear_shared()
        data = make_plan(question).model_dump(mode="json")
        data.pop("wall_ms")
        return json.dumps(data)

    monkeypatch.setenv(price_cache.ENV_SWITCH, "0")
    afresh = plan_json()
    monkeypatch.setenv(price_cache.ENV_SWITCH, "1")
    assert plan_json() == afresh
    price_cache.save_all()
    no_simulation(monkeypatch)
    assert plan_json() == afresh


WARM_PLAN = """
import sys
from servelab.predict.plan import PlanRequest, make_plan
make_plan(PlanRequest(model="qwen3-32b", system="h100_sxm", gpus=4, mode="both"))
print("numpy" in sys.modules)
"""


@pytest.mark.slow  # 2.3 s of CPU a case: a whole plan search
def test_a_plan_from_kept_prices_and_simulations_imports_no_numpy(tmp_path):
    """numpy (0.13 s to import) is imported when a table is read or a simulation runs (servelab.lazy_numpy):
    the first process does both, a second one asking the same question neither."""
    env = {**os.environ, cachedir.ENV_DIR: str(tmp_path), price_cache.ENV_SWITCH: "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    runs = [
        subprocess.run([sys.executable, "-c", WARM_PLAN], env=env, capture_output=True, text=True, check=True)
        for _ in range(2)
    ]
    assert [r.stdout.split() for r in runs] == [["True"], ["False"]]
