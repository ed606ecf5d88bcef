"""Shared CLI helpers: JSON output, tables that never cut their key columns, options derived from model
fields, and the common model/system/parallel options."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Literal

import typer
from pydantic import BaseModel, ValidationError

from servelab.errors import ServelabError
from servelab.readable import given_width

if TYPE_CHECKING:  # rich imported where a table or console is made: a --json answer shows none (0.03 s)
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text


@dataclass(frozen=True)
class Schema:
    """One kind of --json answer: its version (raised when a key changes meaning or goes) and the command that
    answers with it. docs/output.md lists every one with its keys (tests/cli/test_json_contract.py)."""

    version: int
    command: str


# Every --json answer is one JSON object (one per line for `db query --batch`) whose first two keys are
# "schema" (a name below) and "schema_version"; a list is under a named key of it.
SCHEMAS: dict[str, Schema] = {
    "servelab.models": Schema(1, "servelab models"),
    "servelab.model": Schema(1, "servelab models show"),
    "servelab.systems": Schema(1, "servelab systems"),
    "servelab.system": Schema(1, "servelab systems show"),
    "servelab.memory": Schema(1, "servelab memory"),
    "servelab.estimate": Schema(1, "servelab estimate"),
    "servelab.plan": Schema(1, "servelab plan"),
    "servelab.db.query": Schema(1, "servelab db query"),
    "servelab.db.status": Schema(1, "servelab db status"),
    "servelab.db.accuracy": Schema(1, "servelab db accuracy"),
    "servelab.db.merge": Schema(1, "servelab db merge"),
    "servelab.db.fit": Schema(1, "servelab db fit"),
    "servelab.db.validate": Schema(1, "servelab db validate"),
    "servelab.db.compare_repeat": Schema(1, "servelab db compare-repeat"),
    "servelab.collect.plan": Schema(1, "servelab collect --dry-run"),
    "servelab.collect.report": Schema(1, "servelab collect"),
    "servelab.collect.engine_plan": Schema(1, "servelab collect --engine ... --dry-run"),
    "servelab.collect.engine_reports": Schema(1, "servelab collect --engine ..."),
    "servelab.bench": Schema(1, "servelab bench"),
    "servelab.recipes": Schema(1, "servelab recipes list"),
    "servelab.recipe": Schema(1, "servelab recipes show"),
    "servelab.recipes.validate": Schema(1, "servelab recipes validate"),
    "servelab.launch": Schema(1, "servelab recipes render"),
    "servelab.recipes.lock": Schema(1, "servelab recipes lock"),
    "servelab.recipes.import": Schema(1, "servelab recipes import"),
    "servelab.jobs": Schema(2, "servelab sweep, servelab changelog jobs"),
    "servelab.changelog.validate": Schema(1, "servelab changelog validate"),
    "servelab.results.runs": Schema(1, "servelab results list"),
    "servelab.results.run": Schema(1, "servelab results show"),
    "servelab.results.compare": Schema(1, "servelab results compare A B"),
    "servelab.results.predicted": Schema(1, "servelab results compare A --predicted / --twin"),
    "servelab.results.export": Schema(1, "servelab results export --output"),
    "servelab.results.import": Schema(1, "servelab results import"),
    "servelab.results.push": Schema(1, "servelab results push"),
    "servelab.report": Schema(1, "servelab report"),
    "servelab.run.plan": Schema(1, "servelab run --dry-run"),
    "servelab.run": Schema(1, "servelab run"),
    "servelab.calibration": Schema(1, "servelab calibrate engines"),
    "servelab.roofline": Schema(1, "servelab calibrate roofline"),
}


def json_answer(schema: str, data: dict) -> dict:
    """A --json answer: the schema's name and version first, then `data`'s keys."""
    return {"schema": schema, "schema_version": SCHEMAS[schema].version, **data}


def echo_notes(store: Any) -> None:
    """One `note:` line on stderr for each thing a tolerant read of the store kept without a meaning for
    servelab (an InferenceX checkout's new names and fields, duplicate keys; recipe_store.RecipeStore)."""
    for line in getattr(store, "notes", None) or ():
        typer.echo(f"note: {line}", err=True)


def print_json(schema: str, data: dict, *, indent: int | None = 2) -> None:
    """Print one --json answer (`indent` None: on one line, as `db query --batch` prints each)."""
    sys.stdout.write(json.dumps(json_answer(schema, data), indent=indent, default=str) + "\n")


def console() -> Console:
    from rich.console import Console  # noqa: PLC0415  (lazy: see the imports)

    return Console()


def printable(text: object, newlines: bool = False) -> str:
    """Control characters (an escape sequence, a carriage return, a bidi override, NUL) shown escaped, so
    what a user or a file named cannot rewrite the terminal; line breaks kept with `newlines`."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() or (newlines and c == "\n") else repr(c)[1:-1] for c in s)


def plain(text: object) -> Text:
    """Text for rich that is shown as written: never read as markup (`x[/]y`) or emoji codes, control
    characters escaped (a cell may hold several lines). Every user-supplied string that reaches rich goes
    through here."""
    from rich.text import Text  # noqa: PLC0415  (lazy: see the imports)

    return Text(printable(text, newlines=True))


def gib(x: float) -> str:
    return f"{x:,.1f}"


@dataclass(frozen=True)
class Col:
    """A table column. A key column (a name another command takes, the answer itself) is printed whole on one
    line; when the terminal is too narrow, columns with a `drop` rank leave first (highest rank first), and
    the rest wrap."""

    header: str
    justify: Literal["left", "right"] = "left"
    key: bool = False
    drop: int = 0  # 0: always shown


def print_table(
    columns: Sequence[Col],
    rows: Iterable[Sequence[str]],
    title: str | None = None,
    *,
    show_header: bool = True,
    file: IO[str] | None = None,
    as_csv: bool = False,
) -> None:
    """Print a table that fits the width it is given: a terminal's, or in a pipe or a file COLUMNS when set
    (a CI log's); secondary columns leave (named in a footnote) before any key is cut, and the other cells
    wrap. A pipe without COLUMNS gets the table at its natural width, every cell whole.
    `as_csv`: every column as CSV (a header row, then the rows), for spreadsheets and scripts."""
    cells = [list(r) for r in rows]
    if as_csv:
        writer = csv.writer(file or sys.stdout, lineterminator="\n")
        writer.writerow([c.header for c in columns])
        writer.writerows(cells)
        return
    from rich.console import Console  # noqa: PLC0415  (lazy: see the imports)

    out = Console(file=file)
    shown = list(range(len(columns)))
    table = _table(columns, cells, shown, title, show_header)
    natural = _natural_width(out, table)
    if not out.is_terminal:
        out = Console(file=file, width=given_width() or natural)
    by_rank = sorted((i for i, c in enumerate(columns) if c.drop), key=lambda i: -columns[i].drop)
    hidden = []
    while natural > out.width and by_rank:
        i = by_rank.pop(0)
        shown.remove(i)
        hidden.append(columns[i].header)
        table = _table(columns, cells, shown, title, show_header)
        natural = _natural_width(out, table)
    out.print(table)
    if hidden:
        out.print(f"[dim]not shown at this width: {', '.join(hidden)} (--json shows all)[/dim]")


def _table(
    columns: Sequence[Col], rows: list[list[str]], shown: list[int], title: str | None, show_header: bool
) -> Table:
    from rich.table import Table  # noqa: PLC0415  (lazy: see the imports)

    table = Table(title=plain(title) if title is not None else None, show_header=show_header)
    for i in shown:
        c = columns[i]
        table.add_column(plain(c.header), justify=c.justify, no_wrap=c.key, overflow="fold")
    for r in rows:  # cells hold names users and files gave: plain text, never markup
        table.add_row(*(plain(r[i]) for i in shown))
    return table


def _natural_width(out: Console, table: Table) -> int:
    return out.measure(table, options=out.options.update_width(10_000)).maximum


def field_option(model: type[BaseModel], name: str, *param_decls: str, help: str | None = None) -> Any:
    """A typer.Option for one field of `model`, with the field's default and help: declared once, there.

    The option is `--name-with-hyphens` unless `param_decls` says otherwise. A list field (a repeatable
    option) defaults to None, which typer reads as "not given"; the caller turns that into the empty list.
    """
    field = model.model_fields[name]
    default = None if field.default_factory is not None else field.default
    decls = param_decls or (f"--{name.replace('_', '-')}",)
    return typer.Option(default, *decls, help=help or field.description)


ModelArg = typer.Argument(
    ...,
    help="Embedded name (servelab models), checkpoint id, path to a config.json, or a Hugging Face id (the "
    "local hub cache, else the hub)",
)
SystemOpt = typer.Option("h200_sxm", "--system", "-s", help="System name (servelab systems)")
TpOpt = typer.Option(1, "--tp", help="Tensor parallel size (GPUs per pipeline stage)")
EpOpt = typer.Option(1, "--ep", help="Expert parallel size (MoE layers)")
DpAttnOpt = typer.Option(
    False, "--dp-attn", help="Attention data parallel: tp attention replicas of one rank each"
)
PpOpt = typer.Option(1, "--pp", help="Pipeline parallel stages")
WeightDtypeOpt = typer.Option(
    None, "--weight-dtype", help="Override weight dtype: bf16, fp8, fp8_block, mxfp4, nvfp4, int4"
)
KvDtypeOpt = typer.Option(None, "--kv-dtype", help="Override KV-cache dtype: bf16 or fp8")
JsonOpt = typer.Option(False, "--json", help="Print JSON")
CalibrationOpt = typer.Option(
    None,
    "--calibration",
    help="Engine calibration file (servelab calibrate engines --out); default: the one servelab ships",
    show_default=False,
)
CsvOpt = typer.Option(False, "--csv", help="Print the table as CSV")
StoreDirOpt = typer.Option(
    None,
    "--dir",
    help="Recipe store (default: $SERVELAB_RECIPES_DIR, ./configs when it holds one, else the shipped "
    "recipes).",
)


def load_deployment(
    model: str,
    system: str,
    weight_dtype,
    kv_dtype,
    tp: int = 1,
    ep: int = 1,
    dp_attn: bool = False,
    pp: int = 1,
    engine: str | None = None,
):
    """The model, system and layout of a deployment; `engine`: the one that serves it, whose own KV-cache
    format the model takes where kv_dtype is not given (servelab.engines.with_engine_kv)."""
    from servelab.engines import with_engine_kv  # noqa: PLC0415  # start-up time
    from servelab.specs import Parallel, load_model, load_system  # noqa: PLC0415  # start-up time

    spec = load_model(model, weight_dtype=weight_dtype, kv_dtype=kv_dtype)
    sys_spec = load_system(system)
    if engine is not None and kv_dtype is None:
        spec = with_engine_kv(spec, engine, sys_spec.compute_capability)
    try:
        parallel = Parallel(tp=tp, ep=ep, dp_attn=dp_attn, pp=pp)
    except ValidationError as e:
        raise ServelabError.from_validation(e, as_options=True) from None
    return spec, sys_spec, parallel
