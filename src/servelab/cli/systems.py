"""`servelab systems`: the embedded GPU systems.

Library code and rich are imported inside the commands (start-up time): cli/main.py imports every command
module whatever the command.
"""

import typer

from servelab.cli._common import Col, CsvOpt, JsonOpt, print_json, print_table
from servelab.readable import number
from servelab.readable import value as value_text

app = typer.Typer(no_args_is_help=False, invoke_without_command=True, help="List and show GPU systems.")


@app.callback()
def systems(ctx: typer.Context, as_json: bool = JsonOpt, as_csv: bool = CsvOpt) -> None:
    """List the systems servelab knows."""
    if ctx.invoked_subcommand:
        return
    from servelab.specs import list_systems, load_system  # noqa: PLC0415  # start-up time

    specs = [load_system(n) for n in list_systems()]
    if as_json:
        print_json("servelab.systems", {"systems": [s.summary() for s in specs]})
        return
    columns = (
        Col("name", key=True),
        Col("GPU"),
        Col("HBM GiB", "right", key=True),
        Col("HBM TB/s", "right", key=True),
        Col("bf16 TF", "right", key=True, drop=2),
        Col("fp8 TF", "right", key=True, drop=1),
        Col("fp4 TF", "right", key=True, drop=3),
        Col("GPUs/node", "right", key=True, drop=5),
        Col("NVLink domain", "right", key=True, drop=4),
        Col("measured", "right", key=True, drop=6),
    )
    rows = [
        (
            s.name,
            s.gpu_name,
            number(s.hbm_gib, 6),
            number(s.hbm_bw_tbs, 6),
            number(s.peak_tflops["bf16"], 6),
            number(s.peak_tflops["fp8"], 6),
            number(s.peak_tflops["fp4"], 6) if s.supports_fp4 else "-",
            str(s.gpus_per_node),
            str(s.nvlink_domain),
            str(len(s.measured)) if s.measured else "-",
        )
        for s in specs
    ]
    print_table(columns, rows, "Systems (datasheet figures; measured ceilings marked)", as_csv=as_csv)


@app.command("show")
def show(name: str = typer.Argument(...), as_json: bool = JsonOpt) -> None:
    """Show one system, with its measured ceilings and where they came from."""
    from servelab.specs import load_system  # noqa: PLC0415  # start-up time

    summary = load_system(name).summary()
    if as_json:
        print_json("servelab.system", summary)
        return
    rows = []
    for key, value in summary.items():
        if key == "measured":
            for mkey, m in value.items():
                rows.append((f"measured.{mkey}", f"{number(m['value'], 6)}  ({m['what']}; {m['source']})"))
        else:
            rows.append((key, value_text(value)))
    print_table((Col("key", key=True), Col("value")), rows, summary["name"], show_header=False)
