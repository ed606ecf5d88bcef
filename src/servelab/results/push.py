"""`servelab results push`: copy runs of one store into another, typically a machine's SQLite store into the
PostgreSQL store a team shares. Idempotent: a run the target has (by its id, or an import of the same file
from elsewhere) is left as it is, so pushing twice copies nothing the second time. A run still running is
left for a later push (its end is not known yet). Each run is copied whole or not at all.

Raw artifacts (bench JSON, per-request records, server logs) stay in the run folders of the source store;
the target gets the rows: provenance, stages with their artifacts' names, metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servelab.results.schema import RunOutcome
from servelab.results.store import Run, Store


@dataclass
class Pushed:
    copied: list[str] = field(default_factory=list)  # run ids written to the target now
    present: list[str] = field(default_factory=list)  # already there
    running: list[str] = field(default_factory=list)  # not pushed: still running


def push(source: Store, target: Store, runs: list[Run]) -> Pushed:
    """Copy `runs` (newest first, as the store lists them) of `source` into `target`, oldest first, so that
    the target lists them in the same order."""
    out = Pushed()
    oldest_first = list({r.id: r for r in runs}.values())[::-1]
    for run in sorted(oldest_first, key=lambda r: r.created_at):
        if run.outcome == RunOutcome.RUNNING:
            out.running.append(run.id)
        elif target.copy_run(run, source.stages(run.id), source.metrics(run.id)):
            out.copied.append(run.id)
        else:
            out.present.append(run.id)
    return out
