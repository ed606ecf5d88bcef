"""`servelab calibrate roofline`: the fitted roofline tracks the tables better than the datasheet-derived
start."""

import json

from clirun import servelab

from servelab.calibrate.roofline import EFF_PATH


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
