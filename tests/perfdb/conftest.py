"""Synthetic perf tables for the perfdb tests. synth.py sits beside this file: pytest puts this directory on
the import path (the tests folders are not packages), so `import synth` finds it here as in the tests."""

from pathlib import Path

import pytest
import synth

from servelab.perfdb.merge import merge
from servelab.perfdb.tables import load_tables
from servelab.specs import load_system


@pytest.fixture(scope="session")
def h200():
    return load_system("h200_sxm")


@pytest.fixture(scope="session")
def table_dir(tmp_path_factory) -> Path:
    """Synthetic tables merged the way real campaigns are: rows from known analytic functions."""
    root = tmp_path_factory.mktemp("perfdb")
    camp = synth.write_campaign(root / "campaign", synth.all_rows(), errors=2)
    into = root / "tables" / "h200_sxm" / "torch" / "2.11"
    merge([camp], into)
    return into


@pytest.fixture()
def tables(table_dir, h200):
    return load_tables(table_dir, h200)
