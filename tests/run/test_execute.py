"""The orchestrator with stand-in stages (a registry of fakes, attached to no real server): stage rows,
metrics and repetitions in the store, assertions, outcome and exit codes, resume, baseline regression."""

import json

import pytest

from servelab.errors import ServelabError
from servelab.recipes.workload import parse_workload
from servelab.recipes.yamlio import read_yaml
from servelab.results.store import Store
from servelab.run.execute import RunOptions, execute
from servelab.run.plan import from_workload
from servelab.run.stage import Stage, StageCall, StageFailed, StageName, StageOutput
from servelab.run.stages import stage_registry

ATTACHED = RunOptions(base_url="http://127.0.0.1:9", model="m")  # no server: the fakes never call it


class Fakes:
    """A stage registry whose stages return set values and count their calls."""

    def __init__(self, tpot=None, gsm8k=0.95, bfcl_fails=False):
        self.tpot = tpot or {}  # (config, repetition) -> median_tpot_ms
        self.gsm8k, self.bfcl_fails = gsm8k, bfcl_fails
        self.calls: list[tuple] = []

    def registry(self, **replaced):
        """Stand-in stage classes for this instance; `replaced` swaps a stage's run for a function of
        (target, call)."""
        runs = {"bench": self.bench, "gsm8k": self.run_gsm8k, "bfcl": self.run_bfcl} | replaced
        return stage_registry(*(_stage(StageName(name), fn) for name, fn in runs.items()))

    def bench(self, target, call: StageCall):
        point = next(p for p in call.plan.bench if p.config == call.config)
        self.calls.append(("bench", point.config, call.repetition))
        path = call.run_dir / f"bench-{point.config}-rep{call.repetition}.json"
        path.write_text("{}")
        tpot = self.tpot.get((point.config, call.repetition), 10.0)
        return StageOutput({"median_tpot_ms": tpot, "completed": 4.0}, {"median_tpot_ms": "ms"}, [path])

    def run_gsm8k(self, target, call: StageCall):
        self.calls.append(("gsm8k", call.config, 0))
        assert target.model == "m" and call.plan.lm_defaults.num_concurrent == 8 and call.run_dir.is_dir()
        if self.gsm8k is None:
            raise StageFailed("lm-eval crashed")
        return StageOutput({"exact_match": self.gsm8k})

    def run_bfcl(self, target, call: StageCall):
        self.calls.append(("bfcl", "", 0))
        assert call.plan.bfcl.test_categories == ["simple_python"]
        if self.bfcl_fails:
            raise StageFailed("bfcl-eval is not installed")
        return StageOutput({"accuracy": 0.5})


def _stage(stage_name: StageName, fn) -> type[Stage]:
    class Fake(Stage):
        name = stage_name

        def run(self, target, call):
            return fn(target, call)

    return Fake


@pytest.fixture
def plan_of(tmp_path, write_workload):
    def make(repetitions=None, assertions=(), **extra):
        return _plan(write_workload, tmp_path, repetitions, assertions, **extra)

    return make


def _plan(write_workload, tmp_path, repetitions=None, assertions=(), **extra):
    path = write_workload(
        tmp_path / "wl.yaml",
        lm_eval={"model_args": {"num_concurrent": 8}, "tasks": [{"name": "gsm8k", "num_fewshot": 5}]},
        bfcl={"test_categories": ["simple_python"]},
        **extra,
    )
    w = parse_workload(read_yaml(path), str(path))
    return from_workload(w, str(path), repetitions=repetitions, assertions=assertions)


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "store" / "results.db") as s:
        yield s


def test_everything_passes(plan_of, store):
    fakes = Fakes()
    plan = plan_of(assertions=["bench.median_tpot_ms <= 20", "gsm8k.exact_match >= 0.9"])
    result = execute(plan, store, ATTACHED, fakes.registry())
    assert (result.outcome, result.exit_code) == ("pass", 0)
    assert fakes.calls == plan.items()
    run = store.get_run(result.run_id)
    assert run.outcome == "pass" and run.name == "tiny" and run.ended_at
    rows = {(s.stage, s.config, s.repetition): s for s in store.stages(run.id)}
    assert rows[("bench", "s-conc-1", 0)].artifact == "bench-s-conc-1-rep0.json"
    assert {s.status for s in rows.values()} == {"pass"}
    metrics = store.metrics(run.id)
    assert {(m.stage, m.config, m.name) for m in metrics} >= {
        ("gsm8k", "gsm8k", "exact_match"),
        ("bfcl", "", "accuracy"),
    }
    assert {m.source for m in metrics} == {"measured"}
    assert json.loads((result.run_dir / "summary.json").read_text())["outcome"] == "pass"
    assert [j.outcome for j in result.judged] == ["pass", "pass"]


def test_a_failed_assertion_exits_1(plan_of, store):
    result = execute(plan_of(assertions=["gsm8k.exact_match >= 0.99"]), store, ATTACHED, Fakes().registry())
    assert (result.outcome, result.exit_code) == ("fail", 1)
    assert store.get_run(result.run_id).outcome == "fail"


def test_a_stage_error_exits_3_and_keeps_the_rest(plan_of, store):
    fakes = Fakes(bfcl_fails=True)
    result = execute(plan_of(assertions=["bfcl.accuracy >= 0.1"]), store, ATTACHED, fakes.registry())
    assert (result.outcome, result.exit_code) == ("error", 3)
    bfcl = next(r for r in result.rows if r.stage == "bfcl")
    assert bfcl.status == "error" and bfcl.detail == "bfcl-eval is not installed"
    assert result.judged[0].outcome == "error"
    assert any(m.stage == "bench" for m in store.metrics(result.run_id))  # what was measured is kept


def test_assertions_on_stages_left_out_are_skipped_not_errors(plan_of, store):
    """`--stages bench,gsm8k` of a workload that also asserts on BFCL: what ran passed, so the run passes."""
    plan = plan_of(assertions=["gsm8k.exact_match >= 0.9", "bfcl.accuracy >= 0.1", "bench.completed >= 4"])
    plan.stages = [StageName.BENCH, StageName.GSM8K]
    fakes = Fakes()
    result = execute(plan, store, ATTACHED, fakes.registry())
    assert (result.outcome, result.exit_code) == ("pass", 0)
    assert [j.outcome for j in result.judged] == ["pass", "skipped", "pass"]
    assert result.judged[1].detail == "stage bfcl is not run in this run"
    assert "bfcl" not in {stage for stage, _, _ in fakes.calls}


def test_an_assertion_on_a_stage_that_ran_and_produced_nothing_is_an_error(plan_of, store):
    plan = plan_of(assertions=["gsm8k.exact_match >= 0.9"])
    result = execute(plan, store, ATTACHED, Fakes(gsm8k=None).registry())
    assert result.exit_code == 3 and "stage gsm8k produced no metrics" in result.judged[0].detail


def test_repetitions_keep_every_run_and_report_median_and_ci(plan_of, store):
    tpot = {("s-conc-1", 0): 10.0, ("s-conc-1", 1): 30.0, ("s-conc-1", 2): 20.0}
    plan = plan_of(repetitions=3, assertions=["bench[s-conc-1].median_tpot_ms <= 20"])
    result = execute(plan, store, ATTACHED, Fakes(tpot=tpot).registry())
    raw = sorted(
        (m.repetition, m.value)
        for m in store.metrics(result.run_id)
        if (m.config, m.name) == ("s-conc-1", "median_tpot_ms")
    )
    assert raw == [(0, 10.0), (1, 30.0), (2, 20.0)]
    s = result.metrics["bench"]["s-conc-1"]["median_tpot_ms"]
    assert (s["n"], s["median"], s["ci_low"], s["ci_high"]) == (3, 20.0, 10.0, 30.0)
    assert s["ci_level"] == pytest.approx(0.75) and s["ci"] == "order-statistic CI of the median"
    assert result.judged[0].outcome == "pass" and result.judged[0].observed == {"s-conc-1": 20.0}
    one = execute(plan_of(), store, ATTACHED, Fakes().registry())
    assert one.metrics["bench"]["s-conc-1"]["median_tpot_ms"]["ci"] == "n too small"


def test_resume_reruns_only_what_did_not_pass(plan_of, store):
    plan = plan_of(assertions=["gsm8k.exact_match >= 0.9"])
    first = execute(plan, store, ATTACHED, Fakes(gsm8k=None).registry())
    assert first.exit_code == 3
    again = Fakes()
    second = execute(
        plan, store, RunOptions(**ATTACHED.__dict__ | {"resume": first.run_id[:12]}), again.registry()
    )
    assert again.calls == [("gsm8k", "gsm8k", 0)]
    assert second.run_id == first.run_id and (second.outcome, second.exit_code) == ("pass", 0)
    assert {s.status for s in store.stages(first.run_id)} == {"pass"}
    # the rows passed before are in the result too, in the plan's order: the whole run's table
    assert [(r.stage, r.config, r.repetition, r.status) for r in second.rows] == [
        (*item, "pass") for item in plan.items()
    ]
    finished = Fakes()
    third = execute(
        plan, store, RunOptions(**ATTACHED.__dict__ | {"resume": first.run_id}), finished.registry()
    )
    assert finished.calls == [] and (third.outcome, third.exit_code) == ("pass", 0)
    assert [(r.stage, r.config, r.repetition) for r in third.rows] == plan.items()
    assert third.metrics == second.metrics and [j.outcome for j in third.judged] == ["pass"]
    other = plan_of(name="other")
    with pytest.raises(ServelabError, match="resume it with its own source"):
        execute(other, store, RunOptions(**ATTACHED.__dict__ | {"resume": first.run_id}), Fakes().registry())


def test_regression_against_a_baseline_run(plan_of, store):
    base = execute(plan_of(), store, ATTACHED, Fakes().registry())  # median_tpot_ms 10
    slower = {("s-conc-1", 0): 10.8, ("s-conc-2", 0): 10.2}
    plan = plan_of(assertions=["bench.median_tpot_ms regress <= 5%"])
    opts = RunOptions(**ATTACHED.__dict__ | {"baseline": base.run_id})
    result = execute(plan, store, opts, Fakes(tpot=slower).registry())
    [j] = result.judged
    assert j.outcome == "fail" and j.observed == pytest.approx({"s-conc-1": 8.0, "s-conc-2": 2.0})
    assert result.exit_code == 1
    with pytest.raises(ServelabError, match="no run"):
        execute(plan, store, RunOptions(**ATTACHED.__dict__ | {"baseline": "nope"}), Fakes().registry())


def test_bad_input_seen_by_a_stage_is_a_stage_error(plan_of, store):
    def bad_task(target, call):
        raise ServelabError("lm-eval has no task 'gsm9k'")

    result = execute(plan_of(), store, ATTACHED, Fakes().registry(gsm8k=bad_task))
    row = next(r for r in result.rows if r.stage == "gsm8k")
    assert (row.status, row.detail) == ("error", "lm-eval has no task 'gsm9k'")
    assert result.exit_code == 3 and store.get_run(result.run_id).outcome == "error"


def test_an_unforeseen_failure_still_ends_the_run(plan_of, store):
    def broken(target, call):
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        execute(plan_of(), store, ATTACHED, Fakes().registry(bfcl=broken))
    [run] = store.list_runs()
    assert run.outcome == "error" and run.ended_at
    assert {s.stage for s in store.stages(run.id) if s.status == "pass"} == {"server", "bench", "gsm8k"}


def test_dotted_metric_names_of_bfcl(plan_of, store):
    def bfcl(target, call):
        return StageOutput({"overall.accuracy": 0.8, "simple_python.accuracy": 0.9})

    plan = plan_of(assertions=["bfcl.overall.accuracy >= 0.75", "bfcl.simple_python.accuracy >= 0.95"])
    result = execute(plan, store, ATTACHED, Fakes().registry(bfcl=bfcl))
    assert [j.outcome for j in result.judged] == ["pass", "fail"] and result.exit_code == 1
