"""`servelab changelog`: validate a change to the performance changelog and expand it into jobs."""

import json
import sys
from collections import Counter
from pathlib import Path

import typer

from servelab.cli._common import JsonOpt, field_option, print_json
from servelab.cli.sweep import (
    AccountOpt,
    LauncherOpt,
    OutOpt,
    PartitionOpt,
    SbatchArgOpt,
    TimeOpt,
    slurm_options,
)
from servelab.errors import ServelabError
from servelab.recipes.emit import FORMATS, emit
from servelab.recipes.filters import Filters
from servelab.userfiles import refuse_overwriting_inputs

app = typer.Typer(
    no_args_is_help=True, help="The append-only performance changelog that triggers benchmark runs."
)

INFERENCEX = "inferencex"
# Formats that write a script per job: a job without a launch (not-renderable) cannot be one.
SCRIPTED = ("sh", "buildkite", "slurm")
DirOpt = typer.Option(
    None,
    "--dir",
    help="Recipe store (default: $SERVELAB_RECIPES_DIR, ./configs when it holds one, else the shipped "
    "recipes); read at the refs when it is committed in this checkout.",
)
ChangelogOpt = typer.Option(
    None,
    "--changelog",
    help="The changelog file, relative to the current directory (default: the store's own when the store is "
    "committed here, else the one beside the store, else ./perf-changelog.yaml); read at the refs.",
)
BaseRefOpt = typer.Option(..., "--base-ref", help="Git ref before the change (e.g. origin/main).")
HeadRefOpt = typer.Option("HEAD", "--head-ref", help="Git ref with the change.")
AllEvalsOpt = typer.Option(
    False, "--all-evals", help="Every new entry also runs evals on every eval-eligible row (a PR label)."
)
EvalsOnlyOpt = typer.Option(False, "--evals-only", help="No throughput jobs, only eval jobs (a PR label).")


def _checked_change(base_ref: str, head_ref: str, directory, changelog, suffix: str, **rules):
    """The change between the refs; every rule it breaks printed on stderr, then one error line."""
    from servelab.recipes.changelog import open_change  # noqa: PLC0415  # start-up time

    change = open_change(directory, base_ref, head_ref, changelog=changelog, **rules)
    for p in change.problems:
        print(f"changelog: {p}", file=sys.stderr)
    if change.problems:
        raise ServelabError(f"changelog validation failed: {len(change.problems)} problem(s){suffix}")
    return change


@app.command()
def validate(
    base_ref: str = BaseRefOpt,
    head_ref: str = HeadRefOpt,
    strict: bool = typer.Option(
        False,
        "--strict",
        help="InferenceX's merge rules instead of its pull-request gate: every entry typed, history byte for "
        "byte, one empty line between entries, pr-links checked.",
    ),
    pr_link: str = typer.Option(
        None,
        "--pr-link",
        help="With --strict: this change's own PR URL; new entries must use it or XXX (else a pull URL).",
    ),
    all_evals: bool = AllEvalsOpt,
    evals_only: bool = EvalsOnlyOpt,
    directory: Path = DirOpt,
    changelog: Path = ChangelogOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Check the change against the changelog rules (and the recorded fingerprints where a lock exists)."""
    if pr_link is not None and not strict:
        raise ServelabError("--pr-link: the merge rules check pr-links; add --strict")
    suffix = f" between {base_ref} and {head_ref}"
    rules = {"strict": strict, "pr_link": pr_link, "all_evals": all_evals, "evals_only": evals_only}
    change = _checked_change(base_ref, head_ref, directory, changelog, suffix, **rules)
    n = len(change.added)
    if as_json:
        print_json(
            "servelab.changelog.validate",
            {"ok": True, "rules": "merge" if strict else "gate", "new_entries": n, "notes": change.notes},
        )
        return
    for note in change.notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(f"ok: {n} new entr{'y' if n == 1 else 'ies'}" + (" (merge rules)" if strict else ""))


@app.command()
def jobs(
    base_ref: str = BaseRefOpt,
    head_ref: str = HeadRefOpt,
    fmt: str = typer.Option(
        "json",
        "--format",
        help="json | github | buildkite | sh | slurm, or inferencex (process_changelog.py's structure: "
        "throughput rows by node kind and seq-len, eval rows apart).",
    ),
    out: Path = OutOpt,
    launcher: str = LauncherOpt,
    partition: str = PartitionOpt,
    account: str = AccountOpt,
    time: str = TimeOpt,
    sbatch_arg: list[str] = SbatchArgOpt,
    all_evals: bool = AllEvalsOpt,
    evals_only: bool = EvalsOnlyOpt,
    trim: bool = typer.Option(
        False,
        "--trim-conc",
        help="Run each curve's lowest concurrency only, as InferenceX trims a sweep-enabled pull request.",
    ),
    max_jobs: int = field_option(
        Filters, "max_jobs", help="Refuse to expand more jobs than this, per group of keys."
    ),
    directory: Path = DirOpt,
    changelog: Path = ChangelogOpt,
    as_json: bool = typer.Option(
        False, "--json", help="Print the jobs as one JSON answer (schema servelab.jobs) on stdout."
    ),
) -> None:
    """Expand the entries the change added into the jobs to run (validates the change first): throughput
    jobs without evals, then eval-only jobs (their scripts run the evals, not the throughput bench). sh,
    buildkite and slurm leave out jobs without a launch, with a note per reason."""
    from servelab.recipes.changelog import matrix  # noqa: PLC0415  # start-up time

    if max_jobs < 1:
        raise ServelabError(f"--max-jobs {max_jobs}: expected at least 1")
    if fmt not in (*FORMATS, INFERENCEX):
        raise ServelabError(f"--format {fmt!r}: expected {', '.join((*FORMATS, INFERENCEX))}")
    if as_json and (fmt != "json" or out is not None):
        raise ServelabError("--json: prints the jobs as JSON on stdout (no --format or --out)")
    slurm = slurm_options(fmt, partition, account, time, sbatch_arg)
    from servelab.recipes.recipe_store import resolve_dir  # noqa: PLC0415  # start-up time

    refuse_overwriting_inputs({"--out": out}, {"--dir": resolve_dir(directory), "--changelog": changelog})
    rules = {"all_evals": all_evals, "evals_only": evals_only, "trim_conc": trim, "max_jobs": max_jobs}
    change = _checked_change(base_ref, head_ref, directory, changelog, "; no jobs emitted", **rules)
    if fmt == INFERENCEX:
        text = json.dumps(matrix(change, change.jobs, base_ref, head_ref), indent=1) + "\n"
        if out is None:
            typer.echo(text, nl=False)
            return
        try:
            out.write_text(text)
        except OSError as e:
            raise ServelabError(f"{out}: cannot write ({e.strerror or e})") from None
        typer.echo(f"wrote the job matrix to {out}")
        return
    found = change.jobs.all()
    if as_json:
        print_json("servelab.jobs", {"jobs": [j.to_json() for j in found]})
        return
    reasons = Counter(j.unrunnable for j in found if j.unrunnable and (j.not_renderable or fmt in SCRIPTED))
    for why, n in reasons.most_common():
        what = "are left out, having no launch" if fmt in SCRIPTED else "have no launch"
        typer.echo(f"note: {n} of {len(found)} jobs {what}: {why}", err=True)
    if fmt in SCRIPTED:
        found = [j for j in found if j.unrunnable is None]
        if reasons and not found:
            raise ServelabError(f"--format {fmt}: no job has a launch to script; --format json lists them")
    if not found:
        typer.echo("[]" if fmt == "json" else "", nl=fmt == "json")
        return
    typer.echo(emit(found, fmt, out, launcher, slurm), nl=False)
