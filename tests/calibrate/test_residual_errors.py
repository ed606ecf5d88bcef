"""accuracy/residual_errors.py: the leave-one-family-out table of a residuals file, by engine and family,
with an engine's refit rows and vLLM's rows priced now put in place of the file's."""

import json

from tests.accuracy_python import ACCURACY, run_accuracy_python

SCRIPT = str(ACCURACY / "residual_errors.py")


def _row(i: str, engine: str, family: str, pred_ttft: float, pred_tpot: float = 10.0) -> dict:
    return {
        "id": i,
        "engine": engine,
        "family": family,
        "ttft_ms": 100.0,
        "tpot_ms": 10.0,
        "pred_ttft_ms": pred_ttft,
        "pred_tpot_ms": pred_tpot,
    }


def test_refit_rows_and_vllm_prices_replace_the_files(tmp_path):
    shipped = tmp_path / "calibrated.residuals.json"
    rows = [
        _row("a", "trtllm", "llama", 110.0),
        _row("b", "trtllm", "qwen", 80.0),
        _row("c", "vllm", "llama", 150.0),
    ]
    shipped.write_text(json.dumps({"rows": rows}))
    refit = tmp_path / "refit.residuals.json"
    refit.write_text(json.dumps({"rows": [_row("b", "trtllm", "qwen", 95.0)]}))
    vllm = tmp_path / "vllm.json"
    vllm.write_text(json.dumps({"c": [120.0, 12.0]}))
    out = tmp_path / "table.json"

    run_accuracy_python([SCRIPT, str(shipped), "--out", str(out)])
    before = json.loads(out.read_text())
    assert abs(before["trtllm/qwen"]["ttft"]["median"] - 0.2) < 1e-9
    assert abs(before["vllm"]["ttft"]["median"] - 0.5) < 1e-9 and before["all"]["ttft"]["n"] == 3

    printed = run_accuracy_python(
        [SCRIPT, str(shipped), "--rows", str(refit), "--vllm", str(vllm), "--out", str(out)]
    )
    after = json.loads(out.read_text())
    assert abs(after["trtllm/qwen"]["ttft"]["median"] - 0.05) < 1e-9  # the refit's row
    assert after["trtllm/llama"] == before["trtllm/llama"]  # a row the refit does not name is kept
    assert (
        abs(after["vllm"]["ttft"]["median"] - 0.2) < 1e-9
        and abs(after["vllm"]["tpot"]["median"] - 0.2) < 1e-9
    )
    assert printed.splitlines()[1].split()[:2] == ["all", "3"]


def test_a_missing_or_malformed_residuals_file_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.residuals.json"
    bad.write_text(json.dumps({"rows": [{"id": 1}]}))
    for path in (tmp_path / "absent.json", bad):
        err = run_accuracy_python([SCRIPT, str(path)], returncode=2)
        assert err.count("\n") == 1 and err.startswith(f"error: {path}: expected residual files")
