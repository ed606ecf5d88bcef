"""perfdb/data/efficiencies.json is read through its model: it writes back byte for byte, a fitted entry
replaces the defaults key by key, a system without a fit or shipped tables borrows the reference system's fit,
and a malformed file or system override is one line naming the field."""

import json

import pytest

from servelab.errors import ServelabError
from servelab.perfdb.efficiencies import (
    EFFICIENCIES_FILE,
    REFERENCE_SYSTEM,
    efficiencies,
    fit_for,
    has_shipped_tables,
    read_efficiencies,
)
from servelab.perfdb.keys import Gemm
from servelab.perfdb.roofline import Roofline
from servelab.specs import load_system

GEMM = Gemm(64, 4096, 4096)


def test_the_shipped_file_reads_and_writes_back_unchanged():
    f = read_efficiencies()
    assert f.text() == EFFICIENCIES_FILE.read_text()
    fit = f.systems["h200_sxm"]
    assert f.with_system("h200_sxm", fit.model_dump(by_alias=True, exclude_unset=True)).text() == f.text()
    h200 = efficiencies("h200_sxm")
    assert h200.memory == fit.memory != f.default.memory and h200.tile_quantized  # the default's
    assert efficiencies("no_such_system") == f.default


def test_an_nvidia_gpu_without_a_fit_or_tables_borrows_the_reference_fit():
    f = read_efficiencies()
    reference = efficiencies(REFERENCE_SYSTEM)
    assert reference.kernel_us < f.default.kernel_us  # what the borrowers gain: half the launch floor
    for name in ("b200_sxm", "gb300"):
        system = load_system(name)
        assert name not in f.systems and not has_shipped_tables(name) and system.compute_capability
        assert fit_for(system) == REFERENCE_SYSTEM
        roof = Roofline(system)
        assert roof.eff == reference and "with h200_sxm's fitted efficiencies" in roof.latency(GEMM).note
    # shipped tables without a fit, and an AMD GPU: the defaults, their answers unchanged
    for name in ("h100_sxm", "mi355x"):
        assert fit_for(load_system(name)) == name and Roofline(load_system(name)).eff == f.default
    assert fit_for(load_system("h200_sxm")) == "h200_sxm"


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
