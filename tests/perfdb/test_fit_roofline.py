"""`servelab calibrate roofline`: the fitted roofline tracks the tables better than the datasheet-derived
start."""

import json
import random

import pytest
from clirun import servelab

from servelab.calibrate.roofline import (
    EFF_PATH,
    FITTED_FAMILIES,
    GRIDS,
    Trials,
    load_rows,
    make_roofline,
    objective,
    start_params,
)
from servelab.errors import ServelabError
from servelab.perfdb.efficiencies import efficiencies
from servelab.perfdb.keys import Moe
from servelab.perfdb.roofline import Roofline
from servelab.perfdb.tables import load_tables, table_dirs
from servelab.specs import load_system


def test_fit_improves_the_roofline_and_records_provenance(table_dir):
    eff_before = EFF_PATH.read_text()
    r = servelab("calibrate", "roofline", "--tables", str(table_dir), "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout)
    assert (answer["schema"], answer["system"]) == ("servelab.roofline", "h200_sxm")
    entry = answer["fit"]
    prov = entry["_provenance"]
    before, after = prov["median_abs_log_error_before"], prov["median_abs_log_error_after"]
    assert sum(after.values()) < sum(before.values())
    assert prov["gpu_name"] == "NVIDIA H200" and prov["rows_used"]["gemm"] > 0
    assert 0 < entry["band_low"] < 1 < entry["band_high"]
    # --dry-run leaves the shipped file alone
    assert EFF_PATH.read_text() == eff_before
    # without --json: the same fit as two tables
    r = servelab("calibrate", "roofline", "--tables", str(table_dir), "--dry-run")
    assert r.returncode == 0, r.stderr
    assert f"{entry['gemm_compute']['bf16']:.3f}" in r.stdout and f"{entry['kernel_us']:.2f}" in r.stdout
    rows = [line.replace("│", " ").split() for line in r.stdout.splitlines()]
    for family, err in after.items():
        assert any(row[:1] == [family] and row[-1] == f"{err:.3f}" for row in rows)


def test_a_trial_prices_each_row_as_the_roofline_does():
    """The fit prices each row's work again at every trial (Trials): every row's time is the roofline's
    latency of its key, float for float, and so is the objective, at the start and off the grids."""
    system = load_system("h200_sxm")
    rows = load_rows(load_tables(table_dirs(system.name)[0], system, strict=True))
    assert set(rows) == set(FITTED_FAMILIES)
    start = start_params(efficiencies(system.name))
    trials = Trials(system, rows, start)
    rng = random.Random(3)
    for params in [
        start,
        *({k: rng.uniform(grid[0], grid[-1]) for k, grid in GRIDS.items()} for _ in range(3)),
    ]:
        r = make_roofline(system, params)
        for name, items in rows.items():
            assert r.priced_all(trials.works[name]) == [r.latency(k).us for k, _ in items], name
        assert trials.objective(params) == objective(system, params, rows)[0]


def test_only_the_fitted_families_split_into_work():
    r = Roofline(load_system("h200_sxm"))
    with pytest.raises(ServelabError, match="op moe: the roofline splits only gemm, "):
        r.work(Moe(tokens=8, hidden=7168, inter=2048, experts=256, topk=8, ep=8, dtype="fp8"))
