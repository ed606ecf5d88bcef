"""`servelab recipes`: list, show, validate, render, lock and import typed serving recipes."""

import json
import shlex
from pathlib import Path

import typer
from pydantic import ValidationError

from servelab.cli._common import Col, CsvOpt, JsonOpt, StoreDirOpt, echo_notes, print_json, print_table
from servelab.errors import ServelabError
from servelab.recipes.ladder import concurrencies
from servelab.recipes.yamlio import dump_yaml

app = typer.Typer(
    no_args_is_help=True, help="Typed serving recipes: list, show, validate, render the launch command."
)


@app.command("list")
def list_(directory: Path = StoreDirOpt, as_json: bool = JsonOpt, as_csv: bool = CsvOpt) -> None:
    """List config keys with their model, runner, engine and job count."""
    from servelab.recipes.recipe_store import open_store  # noqa: PLC0415  # start-up time

    store = open_store(directory)
    echo_notes(store)
    rows = []
    for key, r in store.recipes.items():
        arms = list(r.arms())
        jobs = sum(len(concurrencies(a)) for *_, a in arms)
        rows.append((key, r.model, r.runner, r.framework, r.precision, str(len(arms)), str(jobs)))
    if as_json:
        names = ("key", "model", "runner", "framework", "precision", "arms", "jobs")
        listed = [
            {n: int(v) if n in ("arms", "jobs") else v for n, v in zip(names, row, strict=True)}
            for row in rows
        ]
        print_json("servelab.recipes", {"recipes": listed})
        return
    columns = (
        Col("key", key=True),
        Col("model"),
        Col("runner", key=True, drop=2),
        Col("framework", key=True),
        Col("precision", key=True, drop=1),
        Col("arms", "right", key=True, drop=3),
        Col("jobs", "right", key=True),
    )
    print_table(columns, rows, as_csv=as_csv)


@app.command()
def show(
    key: str,
    as_: str = typer.Option("servelab", "--as", help="servelab | inferencex | workload | json"),
    directory: Path = StoreDirOpt,
    as_json: bool = typer.Option(
        False, "--json", help="Print the recipe as one JSON answer (schema servelab.recipe)."
    ),
) -> None:
    """Print one recipe: in servelab's format, as an InferenceX master entry, or as perf-eval workloads (one
    YAML document per server layout)."""
    from servelab.recipes.recipe_store import open_store  # noqa: PLC0415  # start-up time
    from servelab.recipes.workload import recipe_to_workloads  # noqa: PLC0415  # start-up time

    store = open_store(directory)
    echo_notes(store)
    recipe = store.get(key)
    if as_json:
        print_json("servelab.recipe", {"key": key, "recipe": recipe.dump(), "source": store.files[key]})
        return
    if as_ == "servelab":
        typer.echo(dump_yaml({key: recipe.dump()}), nl=False)
    elif as_ == "json":
        typer.echo(json.dumps({key: recipe.dump()}, indent=2))
    elif as_ == "inferencex":
        typer.echo(dump_yaml({key: recipe.to_master().dump()}), nl=False)
    elif as_ == "workload":
        docs = recipe_to_workloads(key, recipe, store.runner_labels.gpu_for_label(recipe.runner))
        typer.echo("---\n".join(dump_yaml(d) for d in docs), nl=False)
    else:
        raise ServelabError(f"--as {as_!r}: expected servelab, inferencex, workload or json")


@app.command()
def validate(
    file: Path = typer.Argument(
        None, help="A recipe, InferenceX master or perf-eval workload file; default: the store."
    ),
    directory: Path = StoreDirOpt,
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also print memory notes per arm."),
    as_json: bool = JsonOpt,
) -> None:
    """Validate recipes against the model and system specs (heads divide, fits in memory, precision runs).
    Exit 2 when any recipe has an error (with --json too, after the report)."""
    from servelab.recipes.importers import load_any  # noqa: PLC0415  # start-up time
    from servelab.recipes.lock import stale_keys  # noqa: PLC0415  # start-up time
    from servelab.recipes.recipe_store import RUNNERS, open_store  # noqa: PLC0415  # start-up time
    from servelab.recipes.validate import validate_recipe, validate_store  # noqa: PLC0415  # start-up time

    beside = file is not None and directory is None and (file.parent / RUNNERS).is_file()
    # a master file in an InferenceX checkout's configs/ is judged against the runners.yaml beside it
    store = open_store(file.parent if beside else directory)
    echo_notes(store)
    stale: list[str] = []
    if file is None:
        reports = validate_store(store)
        # an InferenceX checkout (read tolerantly) has no servelab lock: its own changelog gate applies there
        stale = stale_keys(store) if store.notes is None else []
    elif beside:
        reports = validate_store(store, [k for k, f in store.files.items() if f.endswith("/" + file.name)])
    else:
        recipes, notes = load_any(file, store.runner_labels)
        for n in notes:
            typer.echo(f"note: {n}", err=as_json)
        reports = [validate_recipe(k, r, store.runner_labels) for k, r in recipes.items()]
    stale_error = "fingerprint differs from fingerprints.lock; run `servelab recipes lock` and add a "
    stale_error += "perf-changelog.yaml entry"
    if as_json:
        found = [
            {"key": r.key, "ok": not r.errors, "errors": r.errors, "warnings": r.warnings, "notes": r.notes}
            for r in reports
        ]
        found += [
            {"key": k, "ok": False, "errors": [stale_error], "warnings": [], "notes": []} for k in stale
        ]
        print_json("servelab.recipes.validate", {"recipes": found})
        n_bad = sum(not r["ok"] for r in found)
        if n_bad:
            raise ServelabError(f"{n_bad} recipe(s) with errors")
        return
    n_err = 0
    for rep in reports:
        status = "FAIL" if rep.errors else "ok"
        typer.echo(f"{status:4} {rep.key}")
        for e in rep.errors:
            typer.echo(f"     error: {e}")
        for w in rep.warnings:
            typer.echo(f"     warning: {w}")
        if verbose:
            for n in rep.notes:
                typer.echo(f"     {n}")
        n_err += len(rep.errors)
    for key in stale:
        typer.echo(f"FAIL {key}\n     error: {stale_error}")
        n_err += 1
    if n_err:
        raise ServelabError(f"{n_err} problem(s) in {len(reports)} recipe(s)")


@app.command()
def render(
    key: str,
    tp: int = typer.Option(None, "--tp", help="Tensor parallel size (default: the recipe's first arm)."),
    ep: int = typer.Option(1, "--ep", help="Expert parallel size."),
    dp_attn: bool = typer.Option(
        False, "--dp-attn", help="Attention data parallel (tp replicas of one TP rank)."
    ),
    pp: int = typer.Option(1, "--pp", help="Pipeline parallel stages."),
    isl: int = typer.Option(None, "--isl", help="Input length (default: the recipe's first seq-len)."),
    osl: int = typer.Option(None, "--osl", help="Output length (default: the recipe's first seq-len)."),
    conc: int = typer.Option(
        None, "--conc", help="Job concurrency, for flags that depend on it (default: the arm's lowest)."
    ),
    port: int = typer.Option(None, "--port", help="Server port in the command (default: the recipe's)."),
    as_json: bool = typer.Option(False, "--json", help="Print {argv, env, files} as JSON."),
    directory: Path = StoreDirOpt,
) -> None:
    """Print the exact launch command and environment for one topology of a recipe."""
    from servelab.recipes.engines import JobPoint  # noqa: PLC0415  # start-up time
    from servelab.recipes.engines import render as render_launch  # noqa: PLC0415  # start-up time
    from servelab.recipes.inferencex import (  # noqa: PLC0415  # start-up time
        MAX_CONC,
        SearchSpaceEntry,
        SeqLenConfig,
    )
    from servelab.recipes.ladder import concurrencies  # noqa: PLC0415  # start-up time
    from servelab.recipes.recipe_store import open_store  # noqa: PLC0415  # start-up time
    from servelab.recipes.schema import ClientSpec  # noqa: PLC0415  # start-up time
    from servelab.recipes.sweep import MODEL_LEN_MARGIN  # noqa: PLC0415  # start-up time

    store = open_store(directory)
    echo_notes(store)
    recipe = store.get(key)
    scenario, seq, _, first = next(recipe.arms())
    if scenario == "agentic-coding":
        # an agentic job's launch follows its row (KV offload tier, DRAM budget from runners.yaml)
        raise ServelabError(
            f"{key}: an agentic-coding key; its launches depend on each job's KV offload settings: "
            f"`servelab sweep {key} --format json` prints them (launch)"
        )
    isl = seq.isl if isl is None else isl
    osl = seq.osl if osl is None else osl
    try:  # the options are checked by the models whose fields they set, with the same bounds
        arm = SearchSpaceEntry(tp=1 if tp is None else tp, ep=ep, dp_attn=dp_attn, pp=pp, conc_list=[1])
        SeqLenConfig(isl=isl, osl=osl, search_space=[arm])
        if port is not None:
            ClientSpec(port=port)
    except ValidationError as e:
        raise ServelabError.from_validation(e, as_options=True) from None
    if conc is not None and not 1 <= conc <= MAX_CONC:
        raise ServelabError(f"--conc: expected a concurrency from 1 to {MAX_CONC:,}, got {conc}")
    chosen = first if tp is None else arm
    job = JobPoint(isl=isl, osl=osl, conc=concurrencies(chosen)[0] if conc is None else conc)
    launch = render_launch(recipe, chosen, isl + osl + MODEL_LEN_MARGIN, port, job=job)
    if as_json:
        print_json("servelab.launch", launch.model_dump())
        return
    for k, v in launch.env.items():
        typer.echo(f"export {k}={shlex.quote(v)}")
    for name in recipe.secret_env:
        typer.echo(f"# {name} comes from the runner environment")
    for rel, content in launch.files.items():
        typer.echo(f"# file {rel}:\n" + "".join(f"#   {line}\n" for line in content.splitlines()), nl=False)
    typer.echo(shlex.join(launch.argv))


@app.command()
def lock(
    directory: Path = StoreDirOpt,
    check: bool = typer.Option(False, "--check", help="Only report stale keys (exit 2 when any)."),
    as_json: bool = JsonOpt,
) -> None:
    """Record each key's fingerprint in fingerprints.lock (compared by `servelab changelog validate`)."""
    from servelab.recipes.lock import compute_fingerprints, stale_keys  # noqa: PLC0415  # start-up time
    from servelab.recipes.recipe_store import LOCK, lock_text, open_store  # noqa: PLC0415  # start-up time

    store = open_store(directory)
    echo_notes(store)
    if check:
        stale = stale_keys(store)
        if as_json:
            print_json(
                "servelab.recipes.lock", {"up_to_date": not stale, "keys": len(store.recipes), "stale": stale}
            )
        if stale:
            raise ServelabError(f"{LOCK} is stale for {', '.join(stale)}; run `servelab recipes lock`")
        if not as_json:
            typer.echo(f"{LOCK} is up to date ({len(store.recipes)} keys)")
        return
    fps = compute_fingerprints(store)
    path = Path(store.source.root) / LOCK
    try:
        path.write_text(lock_text(fps))
    except OSError as e:
        raise ServelabError(f"{path}: cannot write ({e.strerror or e})") from None
    if as_json:
        print_json("servelab.recipes.lock", {"written": str(path), "keys": len(fps)})
        return
    typer.echo(f"wrote {len(fps)} fingerprints to {path}")


@app.command("import")
def import_(
    file: Path,
    image: str = typer.Option(None, "--image", help="Image for workload files (they name none)."),
    directory: Path = StoreDirOpt,
    as_json: bool = typer.Option(False, "--json", help="Print the recipes and the notes as JSON."),
) -> None:
    """Convert an InferenceX master YAML or a perf-eval workload file to servelab recipes, printed as YAML."""
    from servelab.recipes.importers import load_any  # noqa: PLC0415  # start-up time
    from servelab.recipes.recipe_store import open_store  # noqa: PLC0415  # start-up time

    store = open_store(directory)
    echo_notes(store)
    recipes, notes = load_any(file, store.runner_labels, image=image)
    if as_json:
        print_json(
            "servelab.recipes.import", {"recipes": {k: r.dump() for k, r in recipes.items()}, "notes": notes}
        )
        return
    for n in notes:
        typer.echo(f"# note: {n}")
    typer.echo(dump_yaml({k: r.dump() for k, r in recipes.items()}), nl=False)
