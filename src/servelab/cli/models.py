"""`servelab models`: the embedded model specs.

Library code and rich are imported inside the commands (start-up time): cli/main.py imports every command
module whatever the command.
"""

import typer

from servelab.cli._common import JsonOpt, KvDtypeOpt, WeightDtypeOpt, console, print_json

app = typer.Typer(no_args_is_help=False, invoke_without_command=True, help="List and show model specs.")


@app.callback()
def models(ctx: typer.Context, as_json: bool = JsonOpt) -> None:
    """List the embedded models (and the checkpoint ids that map to them)."""
    if ctx.invoked_subcommand:
        return
    from servelab.specs import list_checkpoints, list_models, load_model  # noqa: PLC0415  start-up time

    ids_by_model: dict[str, list[str]] = {}
    for ckpt, entry in list_checkpoints().items():
        ids_by_model.setdefault(entry["model"], []).append(ckpt)
    rows = []
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
        print_json(rows)
        return
    from rich.table import Table  # noqa: PLC0415  start-up time

    table = Table(title="Embedded models (servelab models show NAME for details)")
    for col in ("name", "attention", "layers", "total", "active", "KV B/token", "checkpoint ids"):
        table.add_column(
            col, justify="right" if col in ("layers", "total", "active", "KV B/token") else "left"
        )
    for r in rows:
        table.add_row(
            r["name"],
            r["attention"],
            str(r["layers"]),
            f"{r['total_params'] / 1e9:,.1f}B",
            f"{r['active_params'] / 1e9:,.1f}B",
            f"{r['kv_bytes_per_token']:,.0f}",
            "\n".join(r["checkpoints"]),
        )
    console().print(table)


@app.command("show")
def show(
    name: str = typer.Argument(..., help="Embedded name, checkpoint id or config.json path"),
    weight_dtype: str = WeightDtypeOpt,
    kv_dtype: str = KvDtypeOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Show one model spec: parameters, precision, KV bytes per token."""
    from servelab.specs import load_model  # noqa: PLC0415  start-up time

    summary = load_model(name, weight_dtype=weight_dtype, kv_dtype=kv_dtype).summary()
    if as_json:
        print_json(summary)
        return
    from rich.table import Table  # noqa: PLC0415  start-up time

    table = Table(title=summary["name"], show_header=False)
    for key, value in summary.items():
        if isinstance(value, int) and key.endswith(("params", "bytes")):
            value = f"{value:,}"
        table.add_row(key, str(value))
    console().print(table)
