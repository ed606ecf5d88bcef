"""The error a calibration file stands for: its kept fits judged on the families they never saw, the engines
whose fit was not kept at the documented defaults (what servelab then prices them with)."""

from types import SimpleNamespace

import numpy as np

from servelab.calibrate.calibration_file import as_written_errors


def test_kept_engines_take_their_cross_validated_error_the_others_their_defaults():
    cases = [SimpleNamespace(row_id=f"r{i}", engine=e) for i, e in enumerate(("vllm", "trtllm", "vllm"))]
    before = (np.array([0.5, 0.6, 0.7]), np.array([0.05, 0.06, 0.07]))
    cv_rows = {"r0": (0.1, 0.01), "r1": (9.0, 9.0), "r2": (0.3, 0.03)}
    verdicts = {"vllm": {"kept": True}, "trtllm": {"kept": False}}
    ttft, tpot = as_written_errors(cases, before, cv_rows, verdicts)
    assert ttft.tolist() == [0.1, 0.6, 0.3]
    assert tpot.tolist() == [0.01, 0.06, 0.03]
