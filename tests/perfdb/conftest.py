import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import synth


@pytest.fixture(scope="session")
def h200():
    from servelab.specs import load_system

    return load_system("h200_sxm")


@pytest.fixture(scope="session")
def table_dir(tmp_path_factory) -> Path:
    """Synthetic tables merged the way real campaigns are: rows from known analytic functions."""
    from servelab.perfdb.merge import merge

    root = tmp_path_factory.mktemp("perfdb")
    camp = synth.write_campaign(root / "campaign", synth.all_rows(), errors=2)
    into = root / "tables" / "h200_sxm" / "torch" / "2.11"
    merge([camp], into)
    return into


@pytest.fixture()
def tables(table_dir, h200):
    from servelab.perfdb.tables import load_tables

    return load_tables(table_dir, h200)
