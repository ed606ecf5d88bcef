"""`servelab results export`: CSV and Parquet as one flat row per metric value; JSON as whole runs
(provenance, stages and metrics nested), since JSON can carry the nesting."""

import csv
import dataclasses
from pathlib import Path
from typing import TextIO

from servelab.errors import ServelabError
from servelab.results.store import Run, Store

FORMATS = ("csv", "json", "parquet")
ROW_FIELDS = (
    "run_id",
    "run_name",
    "outcome",
    "created_at",
    "stage",
    "config",
    "repetition",
    "metric",
    "value",
    "unit",
    "source",
)


def metric_rows(store: Store, runs: list[Run]) -> list[dict]:
    rows = []
    for run in runs:
        for m in store.metrics(run.id):
            rows.append(
                {
                    "run_id": run.id,
                    "run_name": run.name,
                    "outcome": run.outcome,
                    "created_at": run.created_at,
                    "stage": m.stage,
                    "config": m.config,
                    "repetition": m.repetition,
                    "metric": m.name,
                    "value": m.value,
                    "unit": m.unit,
                    "source": m.source,
                }
            )
    return rows


def run_record(store: Store, run: Run) -> dict:
    """A run with everything the store holds about it, as plain JSON-able data."""
    return dataclasses.asdict(run) | {
        "stages": [dataclasses.asdict(s) for s in store.stages(run.id)],
        "metrics": [dataclasses.asdict(m) for m in store.metrics(run.id)],
    }


def write_csv(rows: list[dict], out: TextIO) -> None:
    writer = csv.DictWriter(out, fieldnames=ROW_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)


def write_parquet(rows: list[dict], path: Path) -> None:
    try:
        import pyarrow as pa  # noqa: PLC0415 - optional and slow to import; only Parquet export needs it
        import pyarrow.parquet as pq  # noqa: PLC0415
    except ImportError as e:
        raise ServelabError(
            "Parquet export needs pyarrow (pip install pyarrow); export as csv or json instead"
        ) from e
    schema = pa.schema(
        [
            (f, pa.int64() if f == "repetition" else pa.float64() if f == "value" else pa.string())
            for f in ROW_FIELDS
        ]
    )
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
