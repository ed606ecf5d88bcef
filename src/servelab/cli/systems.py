"""`servelab systems`: the embedded GPU systems.

Library code and rich are imported inside the commands (start-up time): cli/main.py imports every command
module whatever the command.
"""

import typer

from servelab.cli._common import JsonOpt, console, print_json

app = typer.Typer(no_args_is_help=False, invoke_without_command=True, help="List and show GPU systems.")


@app.callback()
def systems(ctx: typer.Context, as_json: bool = JsonOpt) -> None:
    """List the systems servelab knows."""
    if ctx.invoked_subcommand:
        return
    from servelab.specs import list_systems, load_system  # noqa: PLC0415  start-up time

    specs = [load_system(n) for n in list_systems()]
    if as_json:
        print_json([s.summary() for s in specs])
        return
    from rich.table import Table  # noqa: PLC0415  start-up time

    table = Table(title="Systems (datasheet figures; measured ceilings marked)")
    for col in (
        "name",
        "GPU",
        "HBM GiB",
        "HBM TB/s",
        "bf16 TF",
        "fp8 TF",
        "fp4 TF",
        "GPUs/node",
        "NVLink domain",
        "measured",
    ):
        table.add_column(col)
    for s in specs:
        table.add_row(
            s.name,
            s.gpu_name,
            f"{s.hbm_gib:g}",
            f"{s.hbm_bw_tbs:g}",
            f"{s.peak_tflops['bf16']:g}",
            f"{s.peak_tflops['fp8']:g}",
            f"{s.peak_tflops['fp4']:g}" if s.supports_fp4 else "-",
            str(s.gpus_per_node),
            str(s.nvlink_domain),
            str(len(s.measured)) if s.measured else "-",
        )
    console().print(table)


@app.command("show")
def show(name: str = typer.Argument(...), as_json: bool = JsonOpt) -> None:
    """Show one system, with its measured ceilings and where they came from."""
    from servelab.specs import load_system  # noqa: PLC0415  start-up time

    summary = load_system(name).summary()
    if as_json:
        print_json(summary)
        return
    from rich.table import Table  # noqa: PLC0415  start-up time

    table = Table(title=summary["name"], show_header=False)
    for key, value in summary.items():
        if key == "measured":
            for mkey, m in value.items():
                table.add_row(f"measured.{mkey}", f"{m['value']:g}  ({m['what']}; {m['source']})")
        else:
            table.add_row(key, str(value))
    console().print(table)
