"""perfdb/data/efficiencies.json is read through its model: it writes back byte for byte, a fitted entry
replaces the defaults key by key, and a malformed file or system override is one line naming the field."""

import json

import pytest

from servelab.errors import ServelabError
from servelab.perfdb.efficiencies import EFFICIENCIES_FILE, efficiencies, read_efficiencies
from servelab.perfdb.roofline import Roofline
from servelab.specs import load_system


def test_the_shipped_file_reads_and_writes_back_unchanged():
    f = read_efficiencies()
    assert f.text() == EFFICIENCIES_FILE.read_text()
    fit = f.systems["h200_sxm"]
    assert f.with_system("h200_sxm", fit.model_dump(by_alias=True, exclude_unset=True)).text() == f.text()
    h200 = efficiencies("h200_sxm")
    assert h200.memory == fit.memory != f.default.memory and h200.tile_quantized  # the default's
    assert efficiencies("no_such_system") == f.default


def test_a_malformed_file_is_one_line(tmp_path):
    data = json.loads(EFFICIENCIES_FILE.read_text())
    data["systems"]["h200_sxm"]["memory"] = "fast"
    path = tmp_path / "efficiencies.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ServelabError) as e:
        read_efficiencies(path)
    assert str(e.value).startswith(f"{path}: systems.h200_sxm.memory: Input should be a valid number")
    assert "\n" not in str(e.value)


def test_a_system_override_of_no_such_efficiency_is_one_line():
    system = load_system("h200_sxm").model_copy(update={"efficiencies": {"memroy": 0.5}})
    with pytest.raises(ServelabError, match=r"^system h200_sxm: efficiencies: memroy: Extra inputs"):
        Roofline(system)
