"""`servelab changelog`: validate a change to the performance changelog and expand it into jobs."""

import sys
from pathlib import Path

import typer

from servelab.cli._common import JsonOpt, field_option, print_json
from servelab.cli.sweep import FormatOpt, LauncherOpt, OutOpt
from servelab.errors import ServelabError
from servelab.recipes.filters import Filters
from servelab.recipes.pipelines import emit

app = typer.Typer(
    no_args_is_help=True, help="The append-only performance changelog that triggers benchmark runs."
)

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
    "committed here, else ./perf-changelog.yaml); read at the refs.",
)
BaseRefOpt = typer.Option(..., "--base-ref", help="Git ref before the change (e.g. origin/main).")
HeadRefOpt = typer.Option("HEAD", "--head-ref", help="Git ref with the change.")


def _checked_change(base_ref: str, head_ref: str, directory, changelog, pr_link, suffix: str):
    """The change between the refs; every rule it breaks printed on stderr, then one error line."""
    from servelab.recipes.changelog import open_change  # noqa: PLC0415  # start-up time

    change = open_change(directory, base_ref, head_ref, pr_link, changelog)
    for p in change.problems:
        print(f"changelog: {p}", file=sys.stderr)
    if change.problems:
        raise ServelabError(f"changelog validation failed: {len(change.problems)} problem(s){suffix}")
    return change


@app.command()
def validate(
    base_ref: str = BaseRefOpt,
    head_ref: str = HeadRefOpt,
    pr_link: str = typer.Option(
        None, "--pr-link", help="This change's own PR URL; new entries must use it or XXX."
    ),
    directory: Path = DirOpt,
    changelog: Path = ChangelogOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Check the change against the ledger rules and the recorded fingerprints."""
    suffix = f" between {base_ref} and {head_ref}"
    change = _checked_change(base_ref, head_ref, directory, changelog, pr_link, suffix)
    if as_json:
        print_json({"ok": True, "new_entries": len(change.added)})
        return
    typer.echo(f"ok: {len(change.added)} new entr{'y' if len(change.added) == 1 else 'ies'}")


@app.command()
def jobs(
    base_ref: str = BaseRefOpt,
    head_ref: str = HeadRefOpt,
    fmt: str = FormatOpt,
    out: Path = OutOpt,
    launcher: str = LauncherOpt,
    max_jobs: int = field_option(
        Filters, "max_jobs", help="Refuse to expand more jobs than this, per entry."
    ),
    directory: Path = DirOpt,
    changelog: Path = ChangelogOpt,
) -> None:
    """Expand the entries the change added into the jobs to run (validates the change first)."""
    from servelab.recipes.changelog import jobs_for  # noqa: PLC0415  # start-up time

    change = _checked_change(base_ref, head_ref, directory, changelog, None, "; no jobs emitted")
    if max_jobs < 1:
        raise ServelabError(f"--max-jobs {max_jobs}: expected at least 1")
    found = jobs_for(change.head, change.added, max_jobs=max_jobs)
    if not found:
        typer.echo("[]" if fmt == "json" else "", nl=fmt == "json")
        return
    typer.echo(emit(found, fmt, out, launcher), nl=False)
