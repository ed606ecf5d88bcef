"""Package data written by generators is read through its model: the shipped file reads, and a malformed one
is one line naming the file and the field."""

import json
from pathlib import Path

import pytest

from servelab.calibrate.inferencex_runs import RUNS_FILE, read_run_table
from servelab.calibrate.recipe_table import RECIPES_FILE, read_recipe_table
from servelab.errors import ServelabError


def _write(tmp_path: Path, source: Path, edit) -> Path:
    data = json.loads(source.read_text())
    edit(data)
    path = tmp_path / source.name
    path.write_text(json.dumps(data))
    return path


def _setting(data: dict) -> None:
    data["recipes"][0]["settings"]["kv_memory_fraction"] = "most"


def _engine(data: dict) -> None:
    data["recipes"][2]["engine"] = "tgi"


def _time(data: dict) -> None:
    data["runs"][1]["time"] = "yesterday"


def _search_space(data: dict) -> None:
    key = next(iter(data["runs"][0]["keys"]))
    data["runs"][0]["keys"][key]["search_space"][0] = [1024, 1024, 4]


@pytest.mark.parametrize(
    ("source", "read", "edit", "says"),
    [
        (
            RECIPES_FILE,
            read_recipe_table,
            _setting,
            "recipes.0.trtllm.settings.kv_memory_fraction: Input should",
        ),
        (RECIPES_FILE, read_recipe_table, _engine, "recipes.2: Input tag 'tgi' found using 'engine'"),
        (RUNS_FILE, read_run_table, _time, "runs.1.time: time data 'yesterday' does not match"),
        (RUNS_FILE, read_run_table, _search_space, "search_space.0.3: Field required"),
    ],
    ids=["recipe-setting", "recipe-engine", "run-time", "run-search-space"],
)
def test_a_malformed_data_file_is_one_line_naming_file_and_field(tmp_path, source, read, edit, says):
    assert read(source)  # the shipped file reads
    path = _write(tmp_path, source, edit)
    with pytest.raises(ServelabError) as e:
        read(path)
    message = str(e.value)
    assert message.startswith(f"{path}: ") and says in message and "\n" not in message
