"""Pricing calibration rows in worker processes (--jobs, servelab.calibrate.pool): the numbers are exactly
those of one process, in the rows' order, refusals included; a bad --jobs is one line."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from servelab.calibrate import pool
from servelab.calibrate.document import CalibrationDocument
from servelab.calibrate.engines import EngineFitOptions, calibrate_engines
from servelab.calibrate.fit import Linearized
from servelab.calibrate.params import PARAMS
from servelab.calibrate.pool import SERIAL, Jobs, price_rows, try_price_rows, workers_for
from servelab.calibrate.price import Pricer, defaults
from servelab.calibrate.rows import to_case
from servelab.calibrate.sources import Sources
from servelab.errors import ServelabError
from servelab.specs import load_system

ROOT = Path(__file__).parents[2]
TWO = Jobs(workers=2)
# (checkpoint, tp, concurrency): two model families, loads whose simulations differ in cost, and a 70B model
# in BF16 on one GPU, which servelab refuses (it does not fit)
DEPLOYMENTS = [
    ("meta-llama/Llama-3.1-8B-Instruct", 1, 1),
    ("meta-llama/Llama-3.1-8B-Instruct", 1, 32),
    ("meta-llama/Llama-3.1-8B-Instruct", 1, 8),
    ("Qwen/Qwen3-32B", 2, 4),
    ("Qwen/Qwen3-32B", 2, 16),
    ("Qwen/Qwen3-32B", 2, 1),
    ("meta-llama/Llama-3.1-70B", 1, 4),
]


def silicon_rows() -> list[dict]:
    """Rows in AIConfigurator's silicon_sample.csv format; the 'measurements' grow with the load."""
    rows = []
    for i, (checkpoint, tp, conc) in enumerate(DEPLOYMENTS):
        rows.append(
            {
                "id": f"row{i}",
                "silicon_data_source": f"test; silicon_concurrency={conc}",
                "backend": "vllm",
                "backend_version": "0.12.0",
                "model_path": checkpoint,
                "system": "h200_sxm",
                "mode": "agg",
                "isl": "1024",
                "osl": "128",
                "gemm_quant_mode": "bf16",
                "batch_size": str(conc),
                "tp_size": str(tp),
                "pp_size": "1",
                "attention_dp_size": "1",
                "moe_tp_size": str(tp),
                "moe_ep_size": "1",
                "silicon_ttft_ms": str(60.0 + 4.0 * conc),
                "silicon_tpot_ms": str(7.0 + 0.2 * conc),
            }
        )
    return rows


@pytest.fixture(scope="module")
def cases():
    return [to_case(r) for r in silicon_rows()]


@pytest.fixture(scope="module")
def price():
    return Pricer(load_system("h200_sxm"), "auto")


def test_rows_priced_in_workers_are_those_of_one_process(cases, price):
    start = defaults()["vllm"]
    moved = dict(start, step_overhead_us=start["step_overhead_us"] * 3)
    fits = cases[:-1]  # the last is refused
    rows = [(c, p) for p in (start, moved) for c in fits]
    one = np.array([price(c, p) for c, p in rows])
    assert np.array_equal(price_rows(rows, price, SERIAL), one)
    assert np.array_equal(price_rows(rows, price, TWO), one)  # the same bits, in the rows' order
    assert not np.array_equal(one[: len(fits)], one[len(fits) :])  # the two parameter sets differ

    # a refusal stays in its place with servelab's reason, in the workers as in one process
    every = [(c, start) for c in cases]
    serial, two = try_price_rows(every, price, SERIAL), try_price_rows(every, price, TWO)
    assert isinstance(two[-1], ServelabError) and "does not fit" in str(two[-1])
    assert str(two[-1]) == str(serial[-1]) and two[:-1] == serial[:-1]
    with pytest.raises(ServelabError, match="does not fit"):
        price_rows(every, price, TWO)


@pytest.mark.slow  # 1.1 s of CPU a case: a calibration fit in worker processes
def test_linearization_in_workers_is_that_of_one_process(cases, price):
    fits = cases[:-1]
    one = Linearized(fits, defaults()["vllm"], price)
    two = Linearized(fits, defaults()["vllm"], price, TWO)
    assert np.array_equal(one.base, two.base) and np.array_equal(one.jac, two.jac)
    assert np.count_nonzero(one.jac) > 0


def calibrate(tmp_path: Path, jobs: int, lines: list[str]) -> tuple[CalibrationDocument, str]:
    sample = tmp_path / "silicon_sample.csv"
    with open(sample, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(silicon_rows()[0]))
        writer.writeheader()
        writer.writerows(silicon_rows())
    report = tmp_path / f"rows-{jobs}.json"
    opts = EngineFitOptions(sources=Sources(csv=sample), iters=30, dry_run=True, report=report, jobs=jobs)
    return calibrate_engines(opts, echo=lines.append), report.read_text()


@pytest.fixture(scope="module")
def in_one_process(tmp_path_factory) -> tuple[CalibrationDocument, str]:
    """The calibration of the good rows in one process and its --report, fitted once for the tests that read
    them (a fit is seconds of CPU; the tests only read it)."""
    return calibrate(tmp_path_factory.mktemp("one"), 1, [])


@pytest.mark.slow
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="--jobs is capped at the cores: 1 core, 1 process")
def test_calibration_in_two_processes_gives_the_numbers_of_one(tmp_path):
    one_lines: list[str] = []
    two_lines: list[str] = []
    one, one_report = calibrate(tmp_path, 1, one_lines)
    two, two_report = calibrate(tmp_path, 2, two_lines)
    assert one.rows_used == 6 and one.rows_skipped == two.rows_skipped
    assert any(reason.startswith("servelab refuses") for reason in one.rows_skipped)
    for key in ("errors", "cv_by_family", "engines", "fitted_not_kept", "verdicts", "defaults_vs_written"):
        assert getattr(one, key) == getattr(two, key), key  # floats compared exactly
    assert set(one.cv_by_family) == {"vllm/llama", "vllm/qwen"}
    assert set(one.defaults_vs_written.as_written) == {"vllm", "vllm/llama", "vllm/qwen"}
    assert one_report == two_report  # every row's prediction at the fit
    # a progress line per phase: rows done / total, seconds, processes
    assert any(line.startswith("  cross-validation") and "6/6 rows" in line for line in two_lines)
    # a linearization prices the 6 rows at the fit's point and with each parameter moved
    n = 6 * (1 + len(PARAMS))
    rows = f"/{n} rows"
    assert any(f"fit vllm, linearization 1 of 2: {n}{rows}" in line for line in two_lines)
    assert all("2 processes" in line for line in two_lines if rows in line)
    assert all("1 process)" in line for line in one_lines if rows in line)


def test_jobs_zero_is_one_process_per_core():
    cores = os.cpu_count() or 1
    assert workers_for(0) == cores and workers_for(3) == min(3, cores)
    with pytest.raises(ServelabError, match="jobs: -2; expected 0"):
        workers_for(-2)


@pytest.mark.slow  # 8.0 s of CPU a case: a calibration fit in worker processes
def test_jobs_are_capped_by_the_cores_and_the_rows(tmp_path):
    """--jobs 100000 on 7 rows: never more processes than cores or rows (it forked 65 for 8 rows), said."""
    cores = os.cpu_count() or 1
    assert workers_for(100_000) == cores and workers_for(100_000, 3) == min(3, cores)
    lines: list[str] = []
    calibrate(tmp_path, 100_000, lines)
    cap = min(cores, len(DEPLOYMENTS))
    assert any(line.startswith(f"note: --jobs 100000: {cap} process") for line in lines), lines
    counts = [
        int(line.rsplit(", ", 1)[1].split()[0]) for line in lines if line.endswith(("process)", "processes)"))
    ]
    assert counts and max(counts) <= cap, counts


@pytest.mark.slow  # 0.9 s of CPU a case: a calibration fit in worker processes
@pytest.mark.parametrize(
    "command",
    [
        [sys.executable, "-m", "servelab.cli.main", "calibrate", "engines", "--dry-run"],
        [sys.executable, str(ROOT / "accuracy" / "calibrate_engines.py")],
    ],
    ids=["cli", "accuracy-script"],
)
def test_negative_jobs_is_one_line(command):
    r = subprocess.run([*command, "--jobs", "-1"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "--jobs: -1; expected 0 (one process per core)" in r.stderr
    assert r.stdout == ""


@pytest.mark.slow  # 4.2 s of CPU a case: a calibration fit in worker processes
def test_the_report_carries_each_rows_prediction_with_its_family_left_out(in_one_process):
    """--report: every row's prediction by the fit that never saw its model family; its errors are the ones
    the cross-validation reports, family by family."""
    doc, report = in_one_process
    rows = json.loads(report)
    for key, errors in doc.cv_by_family.items():
        engine, family = key.split("/")
        mine = [r for r in rows if r["engine"] == engine and r["family"] == family]
        ttft = [abs(r["family_left_out_ttft_ms"] - r["ttft_ms"]) / r["ttft_ms"] for r in mine]
        tpot = [abs(r["family_left_out_tpot_ms"] - r["tpot_ms"]) / r["tpot_ms"] for r in mine]
        assert float(np.median(ttft)) == pytest.approx(errors.ttft.median, rel=1e-6)
        assert float(np.median(tpot)) == pytest.approx(errors.tpot.median, rel=1e-6)


def test_the_reports_as_written_rows_are_the_as_written_errors(in_one_process):
    """--report's as_written_* fields are what the written file predicts for rows it never saw: their median
    and p90 errors are the summary's "as written, out of sample" line, kept fit or not."""
    doc, report = in_one_process
    rows = json.loads(report)
    written = doc.errors["as written, out of sample"]
    for metric in ("ttft", "tpot"):
        errors = [abs(r[f"as_written_{metric}_ms"] - r[f"{metric}_ms"]) / r[f"{metric}_ms"] for r in rows]
        summary = getattr(written, metric)
        assert float(np.median(errors)) == pytest.approx(summary.median, rel=1e-6)
        assert float(np.percentile(errors, 90)) == pytest.approx(summary.p90, rel=1e-6)


@pytest.mark.parametrize(
    ("param", "message"),
    [
        ("bogus=1", "'bogus=1': expected NAME=VALUE with NAME a field of EngineProfile"),
        ("moe_prompt_token_us=x", "'moe_prompt_token_us=x': expected a number after '='"),
    ],
)
def test_the_parameter_probe_refuses_a_bad_override_in_one_line(param, message):
    """accuracy/engine_params_probe.py: an override that is not an EngineProfile field, or not a number, is
    one line naming it and exit 2, before any row is read."""
    script = ROOT / "accuracy" / "engine_params_probe.py"
    r = subprocess.run(
        [sys.executable, str(script), "vllm", "gpt-oss", param], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr and r.stdout == ""


def test_a_long_phase_says_how_far_it_is_and_the_time_left(monkeypatch):
    """A progress line at most every PROGRESS_EVERY_S within a phase, with an estimate of the time left."""
    now = [1000.0]

    def clock() -> float:
        now[0] += 4.0  # each row (a chunk of one here) takes 4 s of a stand-in clock
        return now[0]

    monkeypatch.setattr(pool.time, "time", clock)
    lines: list[str] = []
    rows = [(None, {}) for _ in range(20)]
    jobs = pool.Jobs(1, lines.append, 1000.0)
    got = pool.try_price_rows(rows, lambda case, params: (1.0, 2.0), jobs, "fit")
    assert got == [(1.0, 2.0)] * 20
    assert len(lines) >= 3 and lines[-1].startswith("  fit: 20/20 rows, ")
    first = lines[0]
    assert first.startswith("  fit: ") and ", ETA " in first and "ETA" not in lines[-1]


@pytest.mark.slow  # 5.3 s of CPU a case: a calibration fit in worker processes
def test_out_defaults_to_the_working_directory_and_says_so(tmp_path):
    """Without --out the fit is written to ./calibrated.json, and the command says where, before the long fit
    (a written file inside the installed package would be lost on the next install and change every
    prediction of the environment)."""
    sample = tmp_path / "silicon_sample.csv"
    with open(sample, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(silicon_rows()[0]))
        writer.writeheader()
        writer.writerows(silicon_rows())
    shipped = ROOT / "src" / "servelab" / "predict" / "data" / "calibrated.json"
    before = shipped.read_bytes()
    r = subprocess.run(
        [sys.executable, "-m", "servelab.cli.main", "calibrate", "engines", "--csv", str(sample),
         "--iters", "5"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"note: no --out: the fit goes to {tmp_path / 'calibrated.json'} (predict with " \
        "--calibration calibrated.json)"  # fmt: skip
    assert "wrote calibrated.json (predictions read it with --calibration calibrated.json)" in lines
    assert CalibrationDocument.read(tmp_path / "calibrated.json").rows_used == 6
    assert shipped.read_bytes() == before


BAD_MEASUREMENTS = {"nan": "nan", "negative": "-5", "zero": "0", "infinite": "inf", "huge": "1e400"}


@pytest.mark.slow  # 8.0 s of CPU a case: a calibration fit in worker processes
def test_measurements_that_are_not_positive_finite_times_never_reach_a_calibration(tmp_path, in_one_process):
    """NaN, negative, zero and infinite TTFT / TPOT rows are dropped with a note naming the field; the fit is
    that of the good rows alone."""
    good = silicon_rows()
    bad = []
    for i, value in enumerate(BAD_MEASUREMENTS.values()):
        for key in ("silicon_ttft_ms", "silicon_tpot_ms"):
            bad.append(good[i % 6] | {"id": f"bad-{key}-{i}", key: value})
    sample = tmp_path / "silicon_sample.csv"
    with open(sample, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(good[0]))
        writer.writeheader()
        writer.writerows(good + bad)
    out = tmp_path / "calibrated.json"
    lines: list[str] = []
    opts = EngineFitOptions(sources=Sources(csv=sample), iters=30, out=out, jobs=1)
    doc = calibrate_engines(opts, echo=lines.append)
    assert doc.rows_used == 6
    reasons = {r: n for r, n in doc.rows_skipped.items() if "positive finite" in r}
    assert reasons == {
        "measured TTFT (ms) is not a positive finite number": len(BAD_MEASUREMENTS),
        "measured TPOT (ms) is not a positive finite number": len(BAD_MEASUREMENTS),
    }, doc.rows_skipped
    written = out.read_text()
    assert "NaN" not in written and "Infinity" not in written
    clean, _ = in_one_process
    assert doc.errors == clean.errors and doc.engines == clean.engines
    # beside the calibration, its rows' out-of-sample residuals: the rows of "as written, out of sample"
    residuals = json.loads((tmp_path / "calibrated.residuals.json").read_text())
    rows = residuals["rows"]
    assert len(rows) == 6 and residuals["provenance"]["command"] == doc.provenance.command
    errors = sorted(abs(r["pred_ttft_ms"] / r["ttft_ms"] - 1) for r in rows)
    written = doc.errors["as written, out of sample"].ttft
    assert written.median == pytest.approx((errors[2] + errors[3]) / 2, rel=1e-4)
    assert all(lo <= hi for r in rows for lo, hi in (r["kernel_band_ttft_ms"], r["kernel_band_tpot_ms"]))
