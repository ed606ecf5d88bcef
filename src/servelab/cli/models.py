"""`servelab models`: the embedded model specs.

Library code and rich are imported inside the commands (start-up time): cli/main.py imports every command
module whatever the command.
"""

from typing import Any

import typer

from servelab.cli._common import (
    Col,
    CsvOpt,
    JsonOpt,
    KvDtypeOpt,
    WeightDtypeOpt,
    print_json,
    print_table,
)
from servelab.readable import value as value_text

app = typer.Typer(no_args_is_help=False, invoke_without_command=True, help="List and show model specs.")


@app.callback()
def models(ctx: typer.Context, as_json: bool = JsonOpt, as_csv: bool = CsvOpt) -> None:
    """List the embedded models (and the checkpoint ids that map to them)."""
    if ctx.invoked_subcommand:
        return
    from servelab.specs import list_checkpoints, list_models, load_model  # noqa: PLC0415  # start-up time

    ids_by_model: dict[str, list[str]] = {}
    for ckpt, entry in list_checkpoints().items():
        ids_by_model.setdefault(entry.model, []).append(ckpt)
    rows: list[dict[str, Any]] = []
    for name in list_models():
        m = load_model(name)
        rows.append(
            {
                "name": name,
                "attention": m.attention.kind.value,
                "layers": m.num_layers,
                "total_params": m.total_params,
                "active_params": m.active_params,
                "kv_bytes_per_token": round(m.kv_bytes_per_token, 1),
                "checkpoints": ids_by_model.get(name, []),
            }
        )
    if as_json:
        print_json("servelab.models", {"models": rows})
        return
    columns = (
        Col("name", key=True),
        Col("attention", key=True, drop=1),
        Col("layers", "right", key=True, drop=2),
        Col("total", "right", key=True),
        Col("active", "right", key=True),
        Col("KV B/token", "right", key=True, drop=3),
        Col("checkpoint ids", key=True),
    )
    table_rows = [
        (
            r["name"],
            r["attention"],
            str(r["layers"]),
            f"{r['total_params'] / 1e9:,.1f}B",
            f"{r['active_params'] / 1e9:,.1f}B",
            f"{r['kv_bytes_per_token']:,.0f}",
            "\n".join(r["checkpoints"]),
        )
        for r in rows
    ]
    print_table(columns, table_rows, "Embedded models (servelab models show NAME for details)", as_csv=as_csv)


@app.command("show")
def show(
    name: str = typer.Argument(..., help="Embedded name, checkpoint id or config.json path"),
    weight_dtype: str = WeightDtypeOpt,
    kv_dtype: str = KvDtypeOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Show one model spec: parameters, precision, KV bytes per token."""
    from servelab.specs import load_model  # noqa: PLC0415  # start-up time

    summary = load_model(name, weight_dtype=weight_dtype, kv_dtype=kv_dtype).summary()
    if as_json:
        print_json("servelab.model", summary)
        return
    rows = [
        (key, value_text(value) if isinstance(value, int | float | dict | list | None) else str(value))
        for key, value in summary.items()
    ]
    print_table((Col("key", key=True), Col("value")), rows, summary["name"], show_header=False)
