"""`servelab sweep`: expand recipes into benchmark jobs and emit a JSON matrix, a CI pipeline or shell scripts."""

from pathlib import Path

import typer


def _split(values: list[str] | None) -> list[str]:
    """Repeatable options also take comma-separated lists (InferenceX passes several values at once)."""
    return [v for item in values or [] for v in item.split(",") if v]


def sweep(
    keys: list[str] = typer.Argument(None, help="Config keys or globs (default: every key)."),
    mode: str = typer.Option(
        "full-sweep", "--mode", help="full-sweep | test-config (keys required, --conc allowed)."
    ),
    model_prefix: list[str] = typer.Option(None, "--model-prefix"),
    precision: list[str] = typer.Option(None, "--precision"),
    framework: list[str] = typer.Option(None, "--framework"),
    runner: list[str] = typer.Option(None, "--runner", help="Runner labels or globs."),
    seq_lens: list[str] = typer.Option(None, "--seq-lens", help="e.g. 1k1k,8k1k"),
    scenario_type: list[str] = typer.Option(None, "--scenario-type"),
    node_type: str = typer.Option(None, "--node-type", help="single-node | multi-node"),
    min_conc: int = typer.Option(None, "--min-conc"),
    max_conc: int = typer.Option(None, "--max-conc"),
    max_tp: int = typer.Option(None, "--max-tp"),
    max_ep: int = typer.Option(None, "--max-ep"),
    conc: list[str] = typer.Option(None, "--conc", help="test-config: exactly these concurrencies."),
    step_size: int = typer.Option(2, "--step-size", help="Ladder factor (doubling by default)."),
    lowest_conc: bool = typer.Option(
        False, "--lowest-conc", help="Keep only the lowest concurrency of each arm."
    ),
    evals_only: bool = typer.Option(False, "--evals-only", help="Only rows marked to run evals."),
    all_evals: bool = typer.Option(False, "--all-evals", help="Every row runs evals."),
    no_evals: bool = typer.Option(False, "--no-evals", help="No row runs evals."),
    fmt: str = typer.Option("json", "--format", help="json | github | buildkite | sh"),
    out: Path = typer.Option(None, "--out", help="Output file (json/github/buildkite) or directory (sh)."),
    launcher: str = typer.Option(
        "direct", "--launcher", help="sh/buildkite: direct (engine on the host) | docker"
    ),
    directory: Path = typer.Option(None, "--dir", help="Recipe store (default: the shipped recipes)."),
) -> None:
    """Expand recipes into jobs (one per concurrency), each with a fingerprint of what it runs."""
    from pydantic import ValidationError

    from servelab.errors import ServelabError
    from servelab.recipes.inferencex import format_validation_error
    from servelab.recipes.pipelines import emit
    from servelab.recipes.store import open_store
    from servelab.recipes.sweep import Filters, expand

    try:
        filters = Filters(
            mode=mode,
            model_prefix=_split(model_prefix),
            precision=_split(precision),
            framework=_split(framework),
            runner=_split(runner),
            seq_lens=_split(seq_lens),
            scenario_type=_split(scenario_type),
            node_type=node_type,
            min_conc=min_conc,
            max_conc=max_conc,
            max_tp=max_tp,
            max_ep=max_ep,
            conc=[int(c) for c in _split(conc)],
            step_size=step_size,
            lowest_conc=lowest_conc,
            evals_only=evals_only,
            all_evals=all_evals,
            no_evals=no_evals,
        )
    except ValidationError as e:
        raise ServelabError(format_validation_error("sweep options", e)) from None
    except ValueError:
        raise ServelabError("--conc: expected integers") from None
    jobs = expand(open_store(directory), keys or [], filters)
    if not jobs:
        raise ServelabError("no jobs match these keys and filters")
    typer.echo(emit(jobs, fmt, out, launcher), nl=False)
