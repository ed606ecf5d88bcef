"""The stages of `servelab run` are classes in one registry, keyed by name, with one signature; statuses are
an enum whose values are the ones the results store has always held."""

import sqlite3

import pytest

from servelab.errors import ServelabError
from servelab.results.schema import OUTCOMES, STAGE_STATUSES, RunOutcome, StageStatus
from servelab.results.store import Store
from servelab.run.plan import STAGES as PLAN_STAGES
from servelab.run.stage import Stage, StageName
from servelab.run.stages import STAGES, BenchStage, BfclStage, Gsm8kStage, stage_registry


def test_every_stage_name_has_its_class():
    assert list(STAGES) == [s.value for s in StageName] == [s.value for s in PLAN_STAGES]
    assert [STAGES.get(n) for n in StageName] == [BenchStage, Gsm8kStage, BfclStage]
    assert all(issubclass(STAGES.get(n), Stage) and STAGES.get(n).name == n for n in StageName)


def test_an_unknown_stage_is_one_line_listing_the_stages():
    with pytest.raises(ServelabError) as e:
        STAGES.get("gsm9k")
    message = str(e.value)
    assert "\n" not in message
    assert message == "unknown stage 'gsm9k' (did you mean gsm8k?); known stages: bench, gsm8k, bfcl"


def test_a_stage_registered_twice_is_refused():
    with pytest.raises(ValueError, match="stage 'bench' registered twice"):
        stage_registry(BenchStage, BenchStage)


def test_a_stage_without_run_cannot_be_made():
    class Half(Stage):
        name = StageName.BENCH

    with pytest.raises(TypeError, match="abstract"):
        Half()  # type: ignore[abstract]


def test_statuses_keep_the_values_the_store_holds(tmp_path):
    """The enums' values are the CHECK constraints the migrations wrote: an old store reads, and a status
    recorded through the enum reads back as the enum."""
    assert tuple(StageStatus) == STAGE_STATUSES and tuple(RunOutcome) == OUTCOMES
    with Store.open(tmp_path / "results.db") as store:
        run = store.start_run("r")
        store.record_stage(run, "bench", StageStatus.SKIPPED, config="c")
        raw = sqlite3.connect(tmp_path / "results.db").execute("SELECT status FROM stages").fetchone()[0]
        (stage,) = store.stages(run)
    assert raw == "skipped" and type(raw) is str
    assert stage.status is StageStatus.SKIPPED
