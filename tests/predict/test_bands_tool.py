"""accuracy/bands.py, the coverage tool: bad input (a residuals file or a priced file that is not what it
expects) is one line naming the file, exit 2."""

import json

import pytest
from accuracy_python import ACCURACY, run_accuracy_python

TOOL = str(ACCURACY / "bands.py")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "not JSON"),
        (json.dumps({"rows": [{"engine": "vllm"}]}), "expected provenance.settings.system"),
    ],
)
def test_a_bad_residuals_file_is_one_line_and_exit_2(tmp_path, content, message):
    bad = tmp_path / "bad.residuals.json"
    bad.write_text(content)
    err = run_accuracy_python([TOOL, "--residuals", str(bad)], returncode=2)
    assert err.count("\n") == 1 and str(bad) in err and message in err


def test_a_missing_residuals_file_is_one_line_and_exit_2(tmp_path):
    missing = tmp_path / "none.residuals.json"
    err = run_accuracy_python([TOOL, "--residuals", str(missing)], returncode=2)
    assert err.count("\n") == 1 and str(missing) in err


@pytest.mark.parametrize(
    ("content", "message"), [("not json", "expected the JSON"), ("[]", "an object 'points'")]
)
def test_a_bad_priced_file_is_one_line_and_exit_2(tmp_path, content, message):
    bad = tmp_path / "dev.json"
    bad.write_text(content)
    err = run_accuracy_python([TOOL, "--dev", str(bad)], returncode=2)
    assert err.count("\n") == 1 and f"--dev {bad}" in err and message in err


def test_a_missing_priced_file_is_one_line_and_exit_2(tmp_path):
    err = run_accuracy_python([TOOL, "--dev", str(tmp_path / "none.json")], returncode=2)
    assert err.count("\n") == 1 and "none.json" in err
