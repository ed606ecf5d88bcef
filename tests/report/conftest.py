"""Fixtures: a folder of result files (report_inputs.py says what they hold)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_inputs import record, vllm_result


@pytest.fixture
def write_json(tmp_path):
    def write(name: str, data) -> Path:
        path = tmp_path / name
        path.write_text(json.dumps(data))
        return path

    return write


@pytest.fixture
def sweep(write_json, tmp_path) -> list[Path]:
    """Three results at concurrency 1, 4 and 8; the first with its per-request records next to it."""
    paths = [write_json(f"conc{c}.json", vllm_result(c)) for c in (1, 4, 8)]
    records = [
        record(i, i * 0.1, [50_000 + 1000 * i, 60_000 + 1000 * i, 70_000 + 1000 * i], 3) for i in range(4)
    ]
    (tmp_path / "conc1.requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return paths
