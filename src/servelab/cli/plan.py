"""`servelab plan`: rank deployments of a model on N GPUs under TTFT / TPOT limits (aggregated and disaggregated)."""

import typer


def plan(
    model: str = typer.Argument(
        "sgl-project/DeepSeek-V4-Flash-FP8", help="Model name, checkpoint id or config.json"
    ),
    system: str = typer.Option("h200_sxm", "--system", "-s", help="System name (servelab systems)"),
    gpus: int = typer.Option(8, "--gpus", "-n", help="GPUs to deploy on"),
    isl: int = typer.Option(8192, "--isl", help="Input tokens per request"),
    osl: int = typer.Option(1024, "--osl", help="Output tokens per request"),
    ttft_ms: float = typer.Option(None, "--ttft-ms", help="TTFT limit in ms"),
    tpot_ms: float = typer.Option(None, "--tpot-ms", help="TPOT limit in ms"),
    sla_stat: str = typer.Option(
        "mean", "--sla-stat", help="Statistic the limits apply to: mean, p50, p90, p99"
    ),
    backend: str = typer.Option("vllm", "--backend", help="torch | vllm | sglang | trtllm"),
    mode: str = typer.Option("both", "--mode", help="agg | disagg | both"),
    top: int = typer.Option(
        10, "--top", help="Candidates to list (Pareto-front ones are always in the JSON)"
    ),
    weight_dtype: str = typer.Option(None, "--weight-dtype", help="Override weight dtype"),
    kv_dtype: str = typer.Option(None, "--kv-dtype", help="Override KV-cache dtype: bf16 or fp8"),
    prefix_hit_rate: float = typer.Option(
        0.0, "--prefix-hit-rate", help="Fraction of each prompt in the prefix cache"
    ),
    spec_tokens: int = typer.Option(0, "--spec-tokens", help="Speculative (MTP / draft) tokens per step"),
    acceptance: float = typer.Option(0.7, "--acceptance", help="Per-token acceptance rate of draft tokens"),
    max_num_batched_tokens: int = typer.Option(
        None, "--max-num-batched-tokens", help="Engine token budget per step"
    ),
    max_num_seqs: int = typer.Option(None, "--max-num-seqs", help="Engine limit on running sequences"),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON"),
    report: str = typer.Option(None, "--report", help="Write an HTML report (Pareto chart + table) here"),
    explain: int = typer.Option(None, "--explain", help="Explain the candidate of this rank"),
) -> None:
    """Search parallel configs, replicas, concurrency and prefill/decode splits; rank by output tok/s per GPU."""
    from pydantic import ValidationError

    from servelab.errors import ServelabError
    from servelab.predict.search import PlanRequest, make_plan

    engine = {
        k: v
        for k, v in {"max_num_batched_tokens": max_num_batched_tokens, "max_num_seqs": max_num_seqs}.items()
        if v is not None
    }
    try:
        req = PlanRequest(
            model=model,
            system=system,
            gpus=gpus,
            isl=isl,
            osl=osl,
            ttft_ms=ttft_ms,
            tpot_ms=tpot_ms,
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
        )
    except ValidationError as e:
        err = e.errors()[0]
        raise ServelabError(f"--{str(err['loc'][0]).replace('_', '-')}: {err['msg']}") from None
    for key, value in engine.items():
        if value < 1:
            raise ServelabError(f"--{key.replace('_', '-')}: must be at least 1, got {value}")
    result = make_plan(req)
    explained = None
    if explain is not None:
        from servelab.predict.explain import explain as do_explain

        explained = do_explain(result.context, result, explain)
    if report:
        from pathlib import Path

        from servelab.results.report_plan import render_html

        try:
            Path(report).write_text(render_html(result), encoding="utf-8")
        except OSError as e:
            raise ServelabError(f"--report: cannot write {report} ({e.strerror})") from None
    if as_json:
        from servelab.cli._common import print_json

        data = result.model_dump(mode="json")
        if explained is not None:
            data["explain"] = explained
        print_json(data)
        return
    _print(result, explained, report)


def _print(result, explained, report) -> None:
    from rich.table import Table

    from servelab.cli._common import console

    out = console()
    req = result.request
    sla = (
        " and ".join(
            s
            for s in (
                f"TTFT <= {req.ttft_ms:g} ms" if req.ttft_ms else "",
                f"TPOT <= {req.tpot_ms:g} ms" if req.tpot_ms else "",
            )
            if s
        )
        or "no SLA"
    )
    table = Table(
        title=f"{result.model} on {req.gpus}x {result.system} ({result.backend}), {req.isl}/{req.osl} tokens, "
        f"{sla} ({req.sla_stat})"
    )
    for col in (
        "#",
        "mode",
        "parallel",
        "conc",
        "TTFT ms",
        "TPOT ms",
        "tok/s/GPU",
        "tok/s/user",
        "KV GiB/GPU",
        "band tok/s/GPU",
        "pareto",
    ):
        table.add_column(col, justify="right" if col not in ("mode", "parallel") else "left")
    for c in result.candidates:
        if c.rank > req.top and not c.pareto:
            continue
        table.add_row(
            str(c.rank),
            c.mode,
            c.parallel["label"] + (f" x{c.replicas}" if c.mode == "agg" and c.replicas > 1 else ""),
            str(c.concurrency),
            f"{c.ttft_ms:,.0f}",
            f"{c.tpot_ms:,.1f}",
            f"{c.tok_s_per_gpu:,.0f}",
            f"{c.tok_s_per_user:,.1f}",
            f"{c.memory_headroom_gib:,.1f}",
            f"{c.tok_s_per_gpu_low:,.0f}-{c.tok_s_per_gpu_high:,.0f}",
            "*" if c.pareto else "",
        )
    out.print(table)
    k = result.considered
    out.print(
        f"[dim]{k['configs']} configs, {k['simulations']} simulations, {k['meeting_sla']} points meet the SLA, "
        f"{k['pareto']} on the Pareto front; {len(result.dropped)} configs dropped (memory or validity); "
        f"{result.wall_ms:,.0f} ms[/dim]"
    )
    for note in result.notes:
        out.print(f"[dim]{note}[/dim]")
    best = result.candidates[0]
    out.print(
        f"best: {best.mode} {best.parallel['label']} at concurrency {best.concurrency}; limits: {'; '.join(best.limits)}"
    )
    if explained:
        _print_explain(out, explained)
    if report:
        out.print(f"report written to {report}")


def _print_explain(out, ex: dict) -> None:
    from rich.table import Table

    out.print(
        f"\n[bold]why rank {ex['rank']} ({ex['mode']} {ex['parallel']}, concurrency {ex['concurrency']})[/bold]"
    )
    for key, value in ex["time"].items():
        if key.endswith("_us"):
            total = sum(value.values()) or 1.0
            t = Table(title=key.removesuffix("_us").replace("_", " ") + " (time per part)")
            for col in ("part", "ms", "%"):
                t.add_column(col, justify="right")
            for name, us in value.items():
                t.add_row(name, f"{us / 1000:,.3f}", f"{100 * us / total:.1f}")
            out.print(t)
        else:
            out.print(f"{key.replace('_', ' ')}: {value}")
    out.print("limits: " + "; ".join(ex["limits"]))
    for line in ex["versus"]:
        out.print(f"- {line}")
