"""The calibration document is a model: the shipped file reads through it and writes back byte for byte, and
a malformed file is one line naming the file and the field."""

import json
from pathlib import Path

import pytest

from servelab.calibrate.calibration_file import CALIBRATED
from servelab.calibrate.document import CalibrationDocument
from servelab.engines import Engine
from servelab.errors import ServelabError


def test_the_shipped_calibration_writes_back_byte_for_byte(tmp_path):
    doc = CalibrationDocument.read(CALIBRATED)
    assert doc.text() == CALIBRATED.read_text()
    doc.write(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == CALIBRATED.read_bytes()
    # typed all the way down: engines by Engine, kept fits and verdicts agree
    assert set(doc.engines) == {e for e, v in doc.verdicts.items() if v.kept}
    assert all(isinstance(e, Engine) for e in doc.engines) and doc.provenance.sources[0].rows_used > 0
    assert doc.provenance_line == doc.provenance.line(doc.rows_used)


def _broken(tmp_path: Path, edit) -> Path:
    data = json.loads(CALIBRATED.read_text())
    edit(data)
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda d: d["verdicts"]["trtllm"].pop("kept"), "verdicts.trtllm.kept: Field required"),
        (lambda d: d["engines"].update(tgi=d["engines"]["trtllm"]), "engines.tgi.[key]: Input should be"),
        (lambda d: d["errors"]["fitted (in sample)"]["ttft"].update(n="many"), "ttft.n: Input should be"),
        (lambda d: d.update(calibration_format=3), "calibration_format 3; this reads 2"),
    ],
)
def test_a_malformed_calibration_is_one_line(tmp_path, edit, says):
    path = _broken(tmp_path, edit)
    with pytest.raises(ServelabError) as e:
        CalibrationDocument.read(path)
    assert str(path) in str(e.value) and says in str(e.value) and "\n" not in str(e.value)


def test_a_calibration_replayed_as_sent_says_so_and_one_without_writes_no_such_key(tmp_path):
    doc = CalibrationDocument.read(CALIBRATED)
    assert "as_sent" not in doc.provenance.settings.model_dump() and not doc.provenance.settings.as_sent
    sent = doc.model_copy(deep=True)
    sent.provenance.settings.as_sent = True
    sent.write(tmp_path / "sent.json")
    again = CalibrationDocument.read(tmp_path / "sent.json")
    assert again.provenance.settings.as_sent and not again.provenance.settings.aic_mixed_chunk
    assert '"as_sent": true' in (tmp_path / "sent.json").read_text()
