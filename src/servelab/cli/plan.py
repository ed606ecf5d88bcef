"""`servelab plan`: rank deployments of a model on N GPUs under TTFT / TPOT limits (aggregated and
disaggregated).

Options that set a PlanRequest field take their default and help from it; library errors name fields, which
this module names as flags.
"""

import atexit
import csv
import gc
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from pydantic import ValidationError

from servelab.cli._common import Col, console, print_json, print_table
from servelab.errors import ServelabError
from servelab.predict.plan import Plan, PlanError, PlanRequest, explain, make_plan
from servelab.predict.plan.report import render_html
from servelab.predict.plan.request import INTERACTIVE_TPOT_MS, INTERACTIVE_TTFT_MS
from servelab.predict.provenance import describe_shares, roofline_warning
from servelab.readable import typed
from servelab.readable import value as value_text
from servelab.userfiles import refuse_overwriting_inputs

if TYPE_CHECKING:  # rich imported by the helpers that print (servelab.cli._common says why)
    from rich.console import Console

FLAGS = {"rank": "--explain"}  # names whose flag is not the field name hyphenated


def flag(name: str) -> str:
    return FLAGS.get(name, "--" + name.replace("_", "-"))


def _option(name: str, *short: str) -> Any:
    field = PlanRequest.model_fields[name]
    return typer.Option(field.default, flag(name), *short, help=field.description)


def plan(
    model: str = typer.Argument(
        PlanRequest.model_fields["model"].default, help=PlanRequest.model_fields["model"].description
    ),
    system: str = _option("system", "-s"),
    gpus: int = _option("gpus", "-n"),
    isl: int = _option("isl"),
    osl: int = _option("osl"),
    ttft_ms: float | None = typer.Option(
        None,
        "--ttft-ms",
        help=f"TTFT limit in ms (default {typed(INTERACTIVE_TTFT_MS)}: interactive serving)",
    ),
    tpot_ms: float | None = typer.Option(
        None,
        "--tpot-ms",
        help=f"TPOT limit in ms (default {typed(INTERACTIVE_TPOT_MS)}: interactive serving)",
    ),
    no_sla: bool = typer.Option(False, "--no-sla", help="No TTFT / TPOT limits: rank by throughput alone"),
    e2e_ms: float | None = _option("e2e_ms"),
    request_rate: float | None = _option("request_rate"),
    sla_stat: str = _option("sla_stat"),
    backend: str = _option("backend"),
    mode: str = _option("mode"),
    top: int = _option("top"),
    weight_dtype: str | None = _option("weight_dtype"),
    kv_dtype: str | None = _option("kv_dtype"),
    prefix_hit_rate: float = _option("prefix_hit_rate"),
    spec_tokens: int = _option("spec_tokens"),
    acceptance: float = _option("acceptance"),
    max_num_batched_tokens: int | None = typer.Option(
        None, "--max-num-batched-tokens", help="Engine token budget per step"
    ),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", help="Engine limit on running sequences"),
    calibration: str | None = _option("calibration"),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON"),
    as_csv: bool = typer.Option(False, "--csv", help="Print the candidates as CSV (numbers unformatted)"),
    report: str | None = typer.Option(
        None, "--report", help="Write an HTML report (Pareto chart + table) here"
    ),
    explain_rank: int | None = typer.Option(
        None, "--explain", min=1, help="Explain the candidate of this rank"
    ),
    save_dir: Path | None = typer.Option(
        None,
        "--save-dir",
        help="Write a recipe, launch.sh and a Kubernetes manifest for the --save-top best deployments",
    ),
    save_top: int = typer.Option(
        3,
        "--save-top",
        min=1,
        help="Distinct deployments (parallel split and replicas) --save-dir writes, best first",
    ),
) -> None:
    """Search parallel configs, replicas, concurrency and prefill/decode splits; rank by output tok/s per
    GPU."""
    model_file = model if Path(model).exists() else None
    refuse_overwriting_inputs({"--report": report}, {"MODEL": model_file, "--calibration": calibration})
    engine = {
        k: v
        for k, v in {"max_num_batched_tokens": max_num_batched_tokens, "max_num_seqs": max_num_seqs}.items()
        if v is not None
    }
    if no_sla and (ttft_ms is not None or tpot_ms is not None):
        raise ServelabError("--no-sla: drop --ttft-ms and --tpot-ms, or drop --no-sla")
    given = {k: v for k, v in {"ttft_ms": ttft_ms, "tpot_ms": tpot_ms}.items() if v is not None}
    sla = {"ttft_ms": None, "tpot_ms": None} if no_sla else given
    try:
        req = PlanRequest(
            model=model,
            system=system,
            gpus=gpus,
            isl=isl,
            osl=osl,
            **sla,
            e2e_ms=e2e_ms,
            request_rate=request_rate,
            sla_stat=sla_stat,
            backend=backend,
            mode=mode,
            top=top,
            weight_dtype=weight_dtype,
            kv_dtype=kv_dtype,
            prefix_hit_rate=prefix_hit_rate,
            spec_tokens=spec_tokens,
            acceptance=acceptance,
            engine=engine,
            calibration=calibration,
        )
    except ValidationError as e:
        raise ServelabError.from_validation(e, as_options=True, flags=FLAGS) from None
    for key, value in engine.items():
        if value < 1:
            raise ServelabError(f"{flag(key)}: must be at least 1, got {value}")
    if save_dir is not None and save_dir.exists() and not save_dir.is_dir():
        # refused before the search, not after it: the plan takes seconds and could not be saved
        raise ServelabError(f"--save-dir: {save_dir} is not a directory (give a directory, new or existing)")
    # The plan's objects (op keys, priced steps, simulated requests: hundreds of thousands of plain data)
    # live to the end of the process. The collector stays off from here (make_plan pauses it and would turn
    # it back on; the first allocation after that walked them all, 0.1 s of a default plan): this process
    # only prints the plan and ends. Frozen at exit, they are freed without the last collection's walk.
    gc.disable()
    atexit.register(gc.freeze)
    try:
        result = make_plan(req)
        explained = explain(result, explain_rank) if explain_rank is not None else None
    except PlanError as e:
        raise ServelabError(e.named(flag)) from None
    if report:
        try:
            Path(report).write_text(render_html(result), encoding="utf-8")
        except OSError as e:
            raise ServelabError(f"--report: cannot write {report} ({e.strerror})") from None
    saved = _save(result, save_dir, save_top) if save_dir else []
    if as_json:
        data = result.model_dump(mode="json")
        if explained is not None:
            data["explain"] = explained
        if save_dir:
            data["saved"] = [
                {"rank": p.rank, "directory": str(p.directory) if p.directory else None, "note": p.note}
                for p in saved
            ]
        print_json("servelab.plan", data)
        return
    if as_csv:
        _print_csv(result)
        return
    _print(result, explained, report)
    for pick in saved:
        if pick.directory is None:
            console().print(f"[dim]rank {pick.rank} not saved: {pick.note}[/dim]")
        else:
            console().print(f"rank {pick.rank}: recipe.yaml, launch.sh and k8s.yaml in {pick.directory}")


def _save(result: Plan, directory: Path, top: int) -> list[Any]:
    from servelab.recipes.from_plan import picks, save_picks  # noqa: PLC0415  # start-up (recipe schema)
    from servelab.recipes.recipe_store import open_store  # noqa: PLC0415  # start-up time

    try:
        return save_picks(result, directory, picks(result, top), open_store())
    except OSError as e:
        raise ServelabError(f"--save-dir: cannot write {e.filename} ({e.strerror})") from None
    except ServelabError as e:
        raise ServelabError(f"--save-dir: {e}") from None


CSV_FIELDS = (
    "rank", "mode", "parallel", "replicas", "concurrency", "ttft_ms", "tpot_ms", "tok_s_per_gpu",
    "tok_s_per_gpu_low", "tok_s_per_gpu_high", "tok_s_per_user", "request_rate", "memory_headroom_gib",
    "pareto",
)  # fmt: skip


def _print_csv(result: Plan) -> None:
    """Every candidate shown in the table, one row each, with the numbers as computed."""
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for c in result.candidates:
        if c.rank <= result.request.top or c.pareto:
            row = c.model_dump(include=set(CSV_FIELDS) - {"parallel"}) | {"parallel": c.parallel["label"]}
            writer.writerow([row[f] for f in CSV_FIELDS])


COLUMNS = (
    Col("#", "right", key=True),
    Col("mode", key=True),
    Col("parallel", key=True),
    Col("conc", "right", key=True),
    Col("TTFT ms", "right", key=True),
    Col("TPOT ms", "right", key=True),
    Col("tok/s/GPU", "right", key=True),
    Col("tok/s/user", "right", key=True, drop=2),
    Col("req/s", "right", key=True, drop=3),
    Col("KV GiB/GPU", "right", key=True, drop=4),
    Col("band tok/s/GPU", "right", key=True, drop=5),
    Col("pareto", "right", key=True, drop=1),
)


def _print(result: Plan, explained: dict[str, Any] | None, report: str | None) -> None:
    out = console()
    req = result.request
    title = f"{result.model} on {req.gpus}x {result.system} ({result.backend}), {req.isl}/{req.osl} tokens"
    out.print(_sla_line(req))
    rows = [
        (
            str(c.rank),
            c.mode,
            c.parallel["label"] + (f" x{c.replicas}" if c.mode == "agg" and c.replicas > 1 else ""),
            str(c.concurrency),
            f"{c.ttft_ms:,.0f}",
            f"{c.tpot_ms:,.1f}",
            f"{c.tok_s_per_gpu:,.0f}",
            f"{c.tok_s_per_user:,.1f}",
            f"{c.request_rate:,.2f}",
            f"{c.memory_headroom_gib:,.1f}",
            f"{c.tok_s_per_gpu_low:,.0f}-{c.tok_s_per_gpu_high:,.0f}",
            "*" if c.pareto else "",
        )
        for c in result.candidates
        if c.rank <= req.top or c.pareto
    ]
    print_table(COLUMNS, rows, title)
    k = result.considered.model_dump()
    out.print(
        f"[dim]{k['configs']} configs, {k['simulations']} simulations, {k['meeting_sla']} points meet the "
        f"SLA, {k['pareto']} on the Pareto front; {len(result.dropped)} configs dropped (memory or "
        f"validity); {result.wall_ms:,.0f} ms[/dim]"
    )
    for note in result.notes:
        out.print(f"[dim]{note}[/dim]")
    out.print(f"[dim]engine profile: {result.engine.source}[/dim]")
    best = result.candidates[0]
    out.print(f"[dim]kernel time by source (rank 1): {describe_shares(best.kernel_time_by_source)}[/dim]")
    warning = roofline_warning(best.kernel_time_by_source)
    if warning:
        out.print(f"[yellow]{warning}[/yellow]")
    out.print(
        f"best: {best.mode} {best.parallel['label']} at concurrency {best.concurrency}; "
        f"limits: {'; '.join(best.limits)}"
    )
    if explained:
        _print_explain(out, explained)
    if report:
        out.print(f"report written to {report}")


def _sla_line(req: PlanRequest) -> str:
    rate = f"; at least {typed(req.request_rate)} requests/s" if req.request_rate else ""
    if req.default_sla:
        return (
            f"SLA (default, interactive): {req.sla_text()} at the {req.sla_stat}{rate}; "
            "--ttft-ms / --tpot-ms to change, --no-sla for throughput only"
        )
    limits = [
        f"{name} <= {typed(value)} ms" + ("" if field in req.model_fields_set else " (default)")
        for name, field, value in (
            ("TTFT", "ttft_ms", req.ttft_ms),
            ("TPOT", "tpot_ms", req.tpot_ms),
            ("E2E", "e2e_ms", req.e2e_ms),
        )
        if value is not None
    ]
    if not limits:
        return (
            f"SLA: none (--no-sla){rate}; ranked by throughput alone, the pareto column marks the trade-off"
        )
    return f"SLA: {' and '.join(limits)} at the {req.sla_stat}{rate}"


def _print_explain(out: "Console", ex: dict[str, Any]) -> None:
    out.print(
        f"\n[bold]why rank {ex['rank']} ({ex['mode']} {ex['parallel']}, "
        f"concurrency {ex['concurrency']})[/bold]"
    )
    for key, value in ex["time"].items():
        if key.endswith("_us"):
            total = sum(value.values()) or 1.0
            print_table(
                (Col("part", key=True), Col("ms", "right", key=True), Col("%", "right", key=True)),
                ((name, f"{us / 1000:,.3f}", f"{100 * us / total:.1f}") for name, us in value.items()),
                key.removesuffix("_us").replace("_", " ") + " (time per part)",
            )
        else:
            out.print(f"{key.replace('_', ' ')}: {value_text(value)}")
    out.print("limits: " + "; ".join(ex["limits"]))
    for line in ex["versus"]:
        out.print(f"- {line}")
