"""The fresh closed-loop results (tests/data/closed_loop_fresh, scripts/refresh_closed_loop_fresh.py):
each row of points.csv is its pinned result file, carries what a replay needs, repeats nothing of
tests/data/closed_loop, and sits on the side of the split that the committed rule gives it. Nothing here
prices a row: the held-out part stays unseen until the next attempt at issue 30 ends."""

import csv
import hashlib
import json
from pathlib import Path

import pytest

from servelab.calibrate import closed_loop_split as split
from servelab.engines import MODELLED, engine_of
from servelab.specs.system import list_systems

DATA = Path(__file__).resolve().parents[1] / "data"
FRESH = DATA / "closed_loop_fresh"
OLD = DATA / "closed_loop"
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "refresh_closed_loop_fresh.py"

# The rule as the script's docstring states it, written out again here so that the test checks the pinned
# split against the statement rather than against the script's own code.
SALT = "servelab closed-loop fresh split 2026-12-06|"
GROUP_FIELDS = (
    "source",
    "mode",
    "system",
    "engine",
    "engine_version",
    "model",
    "precision",
    "tp",
    "ep",
    "dp_attention",
    "pp",
    "prefill_workers",
    "prefill_tp",
    "prefill_ep",
    "decode_workers",
    "decode_tp",
    "decode_ep",
    "isl",
    "osl",
)
LAYOUT = {
    "agg": ("tp", "ep", "pp"),
    "disagg": ("prefill_workers", "prefill_tp", "prefill_ep", "decode_workers", "decode_tp", "decode_ep"),
}


def _rows() -> list[dict[str, str]]:
    with open(FRESH / "points.csv", newline="") as f:
        return list(csv.DictReader(f))


def _heldout(path: Path) -> set[str]:
    return {line for line in path.read_text().splitlines() if line and not line.startswith("#")}


def _result(row: dict[str, str]) -> dict:
    return json.loads((FRESH / row["file"]).read_text())


def test_every_row_is_its_pinned_result_file():
    rows = _rows()
    assert len(rows) == len({r["id"] for r in rows}) == 27
    files = {p.relative_to(FRESH).as_posix() for p in FRESH.glob("inferencex/*/**/*.json")}
    assert files == {r["file"] for r in rows}, "a pinned result without a row, or a row without its file"
    for row in rows:
        data = _result(row)
        metrics = data.get("metrics", data)  # together_runner nests them; benchmark_serving does not
        conc = data["conc"] if "conc" in data else data["max_concurrency"]
        assert int(row["concurrency"]) == conc, row["id"]
        assert float(row["ttft_median_ms"]) == metrics["median_ttft_ms"], row["id"]
        assert float(row["tpot_median_ms"]) == metrics["median_tpot_ms"], row["id"]
        assert row["file"] == f"inferencex/{row['upstream_commit'][:9]}/{row['upstream_path']}"


def test_every_row_carries_what_a_replay_needs():
    systems = set(list_systems())
    for row in _rows():
        assert row["system"] in systems, row["id"]
        assert engine_of(row["engine"]) in MODELLED, row["id"]
        assert row["mode"] in LAYOUT, row["id"]
        for name in ("engine_version", "image", "precision", "kv_cache_dtype", "settings_from", "model"):
            assert row[name], f"{row['id']}: no {name}"
        assert row["model"].count("/") == 1, f"{row['id']}: {row['model']} is not a checkpoint id"
        for name in (*LAYOUT[row["mode"]], "isl", "osl", "concurrency", "num_prompts", "completed"):
            assert int(row[name]) >= 1, f"{row['id']}: {name}"
        assert row["dp_attention"] in ("true", "false") and row["ignore_eos"] in ("true", "false")
        assert 0 <= float(row["random_range_ratio"]) <= 1
        assert int(row["num_prompts"]) == 10 * int(row["concurrency"])  # InferenceX's 10 prompts per client
        for name in ("ttft_median_ms", "tpot_median_ms", "ttft_p99_ms", "tpot_p99_ms"):
            assert float(row[name]) > 0, f"{row['id']}: {name}"
        assert 0 < float(row["mean_input_tokens"]) <= int(row["isl"])
        assert 0 < float(row["mean_output_tokens"]) <= int(row["osl"])


def _old_ids_and_values() -> tuple[set[str], set[tuple[float, float]]]:
    ids = _heldout(OLD / "heldout.txt")
    values = set()
    with open(OLD / "aiconfigurator" / "silicon_sample_rows.csv", newline="") as f:
        for row in csv.DictReader(f):
            ids.add(row["id"])
            values.add((round(float(row["silicon_ttft_ms"]), 3), round(float(row["silicon_tpot_ms"]), 3)))
    for path in (OLD / "inferencex" / "results").glob("*.json"):
        data = json.loads(path.read_text())
        ids.add(path.name)
        # these results are in seconds (benchmark_serving's raw statistics); the fresh rows in milliseconds
        values.add((round(1000 * data["median_ttft"], 3), round(1000 * data["median_tpot"], 3)))
    return ids, values


def test_no_fresh_row_repeats_a_row_of_the_closed_loop_data():
    old_ids, old_values = _old_ids_and_values()
    # the old data were read, not an empty glob (silicon_sample repeats measurements: fewer values than ids)
    assert len(old_ids) > 4000 and len(old_values) > 3000
    rows = _rows()
    for row in rows:
        assert row["id"] not in old_ids
        assert Path(row["upstream_path"]).name not in old_ids
        pair = (round(float(row["ttft_median_ms"]), 3), round(float(row["tpot_median_ms"]), 3))
        assert pair not in old_values, f"{row['id']} measured the same as a pinned closed_loop row"
    settings_and_values = [
        tuple(row[f] for f in (*GROUP_FIELDS, "concurrency", "ttft_median_ms", "tpot_median_ms"))
        for row in rows
    ]
    assert len(set(settings_and_values)) == len(rows), "the same result pinned twice"


def _held_out_by_rule(row: dict[str, str]) -> bool:
    key = "|".join(row[f] for f in GROUP_FIELDS)
    return int(hashlib.sha256((SALT + key).encode()).hexdigest()[:8], 16) < 2**31


def test_the_split_file_is_what_the_rule_gives():
    rows = _rows()
    expected = {row["id"] for row in rows if _held_out_by_rule(row)}
    assert _heldout(FRESH / "heldout.txt") == expected
    groups: dict[tuple[str, ...], set[bool]] = {}
    for row in rows:
        groups.setdefault(tuple(row[f] for f in GROUP_FIELDS), set()).add(row["id"] in expected)
    assert all(len(sides) == 1 for sides in groups.values()), "a sweep split across both parts"
    assert 0 < len(expected) < len(rows)


def test_the_package_states_the_rule_this_test_checks():
    assert (split.FRESH_SALT, split.FRESH_GROUP_FIELDS, split.FRESH_HELD_OUT_SHARE) == (
        SALT,
        GROUP_FIELDS,
        0.5,
    )
    old_salt = (Path(__file__).resolve().parents[2] / "scripts" / "refresh_closed_loop.py").read_text()
    assert SALT not in old_salt, "the fresh split must not reuse the old split's hash"
    assert "servelab.calibrate.closed_loop_split import FRESH_GROUP_FIELDS" in SCRIPT.read_text()
    for row in _rows():
        assert split.fresh_held_out(row) == _held_out_by_rule(row)


@pytest.mark.parametrize("name", ["UPSTREAM.md", "heldout.txt", "inferencex/LICENSE"])
def test_the_pin_says_where_it_came_from(name):
    text = (FRESH / name).read_text()
    assert text.strip()
    if name == "UPSTREAM.md":
        for row in _rows():
            assert row["upstream_commit"] in text
