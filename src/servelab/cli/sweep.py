"""`servelab sweep`: expand recipes into benchmark jobs; emit a JSON matrix, CI pipeline, shell or sbatch
scripts."""

from collections import Counter
from pathlib import Path

import typer
from pydantic import ValidationError

from servelab.cli._common import CalibrationOpt, StoreDirOpt, echo_notes, field_option, print_json
from servelab.errors import ServelabError
from servelab.progress import Steps
from servelab.recipes.emit import emit
from servelab.recipes.filters import Filters
from servelab.recipes.pipelines import DEFAULT_LAUNCHER
from servelab.recipes.slurm import SlurmOptions
from servelab.userfiles import refuse_overwriting_inputs

# The output options of every command that emits jobs (sweep, changelog jobs).
FormatOpt = typer.Option("json", "--format", help="json | github | buildkite | sh | slurm | k8s")
OutOpt = typer.Option(None, "--out", help="Output file (json/github/buildkite) or directory (sh/slurm/k8s).")
LauncherOpt = typer.Option(
    DEFAULT_LAUNCHER, "--launcher", help="sh/buildkite/slurm: direct (engine on the host) | docker"
)
PartitionOpt = field_option(SlurmOptions, "partition")
AccountOpt = field_option(SlurmOptions, "account")
TimeOpt = field_option(SlurmOptions, "time")
SbatchArgOpt = field_option(SlurmOptions, "sbatch_arg")


def slurm_options(
    fmt: str, partition: str | None, account: str | None, time: str, sbatch_arg: list[str] | None
) -> SlurmOptions | None:
    """The --format slurm options, checked (one line naming the option); refused with another format."""
    given = [
        flag
        for flag, value in (
            ("--partition", partition),
            ("--account", account),
            ("--time", time != SlurmOptions().time),
            ("--sbatch-arg", sbatch_arg),
        )
        if value
    ]
    if fmt != "slurm":
        if given:
            raise ServelabError(f"{given[0]}: only --format slurm writes sbatch scripts")
        return None
    try:
        return SlurmOptions(partition=partition, account=account, time=time, sbatch_arg=sbatch_arg or [])
    except ValidationError as e:
        raise ServelabError.from_validation(e, as_options=True) from None


def _split(values: list[str] | None) -> list[str]:
    """Repeatable options also take comma-separated lists (InferenceX passes several values at once)."""
    return [v for item in values or [] for v in item.split(",") if v]


def sweep(
    keys: list[str] = typer.Argument(None, help="Config keys or globs (default: every key)."),
    config_keys: list[str] = typer.Option(None, "--config-keys", help="The same, as InferenceX names it."),
    mode: str = field_option(Filters, "mode"),
    model_prefix: list[str] = field_option(Filters, "model_prefix"),
    precision: list[str] = field_option(Filters, "precision"),
    framework: list[str] = field_option(Filters, "framework"),
    runner_type: list[str] = field_option(Filters, "runner_type", "--runner-type", "--runner"),
    runner_node_filter: str = field_option(Filters, "runner_node_filter"),
    seq_lens: list[str] = field_option(Filters, "seq_lens", help="e.g. 1k1k,8k1k"),
    scenario_type: list[str] = field_option(Filters, "scenario_type"),
    node_type: str = field_option(Filters, "node_type"),
    single_node: bool = typer.Option(False, "--single-node", help="Only single-node keys (--node-type)."),
    multi_node: bool = typer.Option(False, "--multi-node", help="Only multinode keys (--node-type)."),
    min_conc: int = field_option(Filters, "min_conc"),
    max_conc: int = field_option(Filters, "max_conc"),
    max_tp: int = field_option(Filters, "max_tp"),
    max_ep: int = field_option(Filters, "max_ep"),
    conc: list[str] = field_option(Filters, "conc"),
    step_size: int = field_option(Filters, "step_size"),
    lowest_conc: bool = field_option(Filters, "lowest_conc"),
    evals_only: bool = field_option(Filters, "evals_only"),
    all_evals: bool = field_option(Filters, "all_evals"),
    no_evals: bool = field_option(Filters, "no_evals"),
    max_jobs: int = field_option(Filters, "max_jobs"),
    fmt: str = FormatOpt,
    out: Path = OutOpt,
    launcher: str = LauncherOpt,
    partition: str = PartitionOpt,
    account: str = AccountOpt,
    time: str = TimeOpt,
    sbatch_arg: list[str] = SbatchArgOpt,
    directory: Path = StoreDirOpt,
    predict: bool = typer.Option(
        False, "--predict", help="Add each job's simulated twin as `predicted` (prints --json)."
    ),
    calibration: Path = CalibrationOpt,
    as_json: bool = typer.Option(
        False, "--json", help="Print the jobs as one JSON answer (schema servelab.jobs) on stdout."
    ),
    skip_unrunnable: bool = typer.Option(
        False,
        "--skip-unrunnable",
        help="sh/slurm: write the jobs that can run and leave out those with no launch (the notes say why), "
        "rather than refusing the whole sweep.",
    ),
) -> None:
    """Expand recipes into jobs, row for row as InferenceX's generate_sweep_configs.py, each with a
    fingerprint of what it runs."""
    from servelab.recipes.recipe_store import open_store, resolve_dir  # noqa: PLC0415  # start-up time
    from servelab.recipes.sweep import expand  # noqa: PLC0415  # start-up time

    refuse_overwriting_inputs({"--out": out}, {"--dir": resolve_dir(directory), "--calibration": calibration})
    slurm = slurm_options(fmt, partition, account, time, sbatch_arg)
    try:
        concs = [int(c) for c in _split(conc)]
    except ValueError:
        raise ServelabError("--conc: expected integers") from None
    if single_node != multi_node:  # InferenceX's flags; both (or neither) mean every key
        if node_type is not None:
            raise ServelabError("give --node-type or --single-node/--multi-node, not both")
        node_type = "single-node" if single_node else "multi-node"
    try:
        filters = Filters(
            mode=mode,
            model_prefix=_split(model_prefix),
            precision=_split(precision),
            framework=_split(framework),
            runner_type=_split(runner_type),
            runner_node_filter=runner_node_filter,
            seq_lens=_split(seq_lens),
            scenario_type=_split(scenario_type),
            node_type=node_type,
            min_conc=min_conc,
            max_conc=max_conc,
            max_tp=max_tp,
            max_ep=max_ep,
            conc=concs,
            step_size=step_size,
            lowest_conc=lowest_conc,
            evals_only=evals_only,
            all_evals=all_evals,
            no_evals=no_evals,
            max_jobs=max_jobs,
        )
    except ValidationError as e:
        raise ServelabError.from_validation(e, as_options=True) from None
    store = open_store(directory)
    echo_notes(store)
    jobs = expand(store, [*(keys or []), *_split(config_keys)], filters)
    if not jobs:
        # as InferenceX's generator: an empty matrix is an answer ([]), not an error; a script needs a job
        if fmt in ("sh", "slurm") and not (predict or as_json):
            raise ServelabError("no jobs match these keys and filters")
        typer.echo("note: no jobs match these keys and filters", err=True)
    if store.checkout is not None:  # one line per launch script of the checkout that changed
        for line in store.checkout.notes.values():
            typer.echo(f"note: {line}", err=True)
        for line in store.checkout.warnings.values():
            typer.echo(f"warning: {line}", err=True)
    reasons = Counter(j.not_renderable for j in jobs if j.not_renderable)
    for why, n in reasons.most_common():
        typer.echo(f"note: {n} of {len(jobs)} jobs have no launch: {why}", err=True)
    if (predict or as_json) and (fmt != "json" or out is not None):
        flag = "--predict" if predict else "--json"
        raise ServelabError(f"{flag}: prints the jobs as JSON on stdout (no --format or --out)")
    if predict:
        from servelab.recipes.predict_jobs import predict_jobs  # noqa: PLC0415  # start-up time

        steps = Steps("sweep --predict: jobs simulated", len(jobs))
        predicted = predict_jobs(store, jobs, calibration, done=steps.advance)
        steps.finish()
        print_json("servelab.jobs", {"jobs": predicted})
        return
    if as_json:
        print_json("servelab.jobs", {"jobs": [j.to_json() for j in jobs]})
        return
    if skip_unrunnable:
        jobs = _runnable(jobs, fmt)
    typer.echo(emit(jobs, fmt, out, launcher, slurm), nl=False)


def _runnable(jobs: list, fmt: str) -> list:
    """The jobs `servelab run` can run; how many were left out is said in one line."""
    if fmt not in ("sh", "slurm"):
        raise ServelabError(f"--skip-unrunnable: applies to the sh and slurm formats, not {fmt}")
    kept = [j for j in jobs if j.unrunnable is None]
    if not kept:
        raise ServelabError(
            f"--skip-unrunnable: none of the {len(jobs)} jobs can run (the notes above say why)"
        )
    if len(kept) < len(jobs):
        left = len(jobs) - len(kept)
        typer.echo(
            f"note: --skip-unrunnable: {left} of {len(jobs)} jobs left out (the notes above say why)",
            err=True,
        )
    return kept
