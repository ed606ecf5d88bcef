"""Shared CLI helpers: JSON output, tables that never cut their key columns, options derived from model
fields, and the common model/system/parallel options."""

import csv
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import IO, Any, Literal

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.table import Table

from servelab.errors import ServelabError


def print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def console() -> Console:
    return Console()


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
    """Print a table that fits: on a terminal, secondary columns leave (named in a footnote) before any key
    is cut; in a pipe or a file, at the table's natural width, every cell whole, whatever COLUMNS says.
    `as_csv`: every column as CSV (a header row, then the rows), for spreadsheets and scripts."""
    cells = [list(r) for r in rows]
    if as_csv:
        writer = csv.writer(file or sys.stdout, lineterminator="\n")
        writer.writerow([c.header for c in columns])
        writer.writerows(cells)
        return
    out = Console(file=file)
    shown = list(range(len(columns)))
    table = _table(columns, cells, shown, title, show_header)
    natural = _natural_width(out, table)
    if not out.is_terminal:
        Console(file=file, width=natural).print(table)
        return
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
        out.print(f"[dim]not shown at this width: {', '.join(hidden)} (a pipe or --json shows all)[/dim]")


def _table(
    columns: Sequence[Col], rows: list[list[str]], shown: list[int], title: str | None, show_header: bool
) -> Table:
    table = Table(title=title, show_header=show_header)
    for i in shown:
        c = columns[i]
        table.add_column(c.header, justify=c.justify, no_wrap=c.key, overflow="fold")
    for r in rows:
        table.add_row(*(r[i] for i in shown))
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
    None, "--weight-dtype", help="Override weight dtype: bf16, fp8, fp8_block, mxfp4, nvfp4"
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
):
    from servelab.specs import Parallel, load_model, load_system  # noqa: PLC0415  # start-up time

    spec = load_model(model, weight_dtype=weight_dtype, kv_dtype=kv_dtype)
    sys_spec = load_system(system)
    try:
        parallel = Parallel(tp=tp, ep=ep, dp_attn=dp_attn, pp=pp)
    except ValidationError as e:
        raise ServelabError.from_validation(e, as_options=True) from None
    return spec, sys_spec, parallel
