"""`servelab estimate --mode disagg`: one given disaggregated split (a prefill pool and a decode pool, each a
parallel layout and a worker count) at one concurrency, priced as `servelab plan` prices its disaggregated
points (predict.plan.split), each figure with where it comes from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servelab.cli._common import Col, console, print_table
from servelab.cli.pools import PoolOptions, pool_parallel
from servelab.engines import with_engine_kv
from servelab.errors import ServelabError
from servelab.predict.bands import band_line
from servelab.predict.engines import engine_profile
from servelab.predict.plan.context import SearchContext
from servelab.predict.plan.disagg import LINK_EFFICIENCY, TRANSFER_FLOOR_S
from servelab.predict.plan.search import point_sources
from servelab.predict.plan.split import Split, SplitPoint, price_given_split, split_context
from servelab.predict.provenance import describe_shares, roofline_warning
from servelab.specs import check_precision, load_model, load_system


def estimate_disagg(
    model: str,
    system: str,
    backend: str,
    weight_dtype: str | None,
    kv_dtype: str | None,
    calibration: Path | None,
    prefill: PoolOptions,
    decode: PoolOptions,
    concurrency: int,
    isl: int,
    osl: int,
    num_prompts: int | None = None,
) -> dict[str, Any]:
    """The estimate's answer (the --json data); with `num_prompts`, a benchmark of that many prompts from an
    idle deployment (price_given_split)."""
    p_parallel, p_workers = pool_parallel("prefill", prefill)
    d_parallel, d_workers = pool_parallel("decode", decode)
    split = Split(p_parallel, p_workers, d_parallel, d_workers)
    spec = load_model(model, weight_dtype=weight_dtype, kv_dtype=kv_dtype)
    if isl + osl > spec.max_context:
        raise ServelabError(
            f"isl {isl} + osl {osl} exceeds {spec.name}'s maximum context of {spec.max_context} tokens",
            field="isl",
        )
    sys_spec = load_system(system)
    if kv_dtype is None:
        spec = with_engine_kv(spec, backend, sys_spec.compute_capability)
    engine = engine_profile(backend, sys_spec.hbm_gib, calibration=calibration, gpu_name=sys_spec.gpu_name)
    spec = engine.model_as_served(spec)
    check_precision(spec, sys_spec)
    ctx = split_context(spec, sys_spec, engine, split, isl, osl)
    got = price_given_split(ctx, split, concurrency, num_prompts)
    return answer(ctx, split, got, num_prompts)


def answer(
    ctx: SearchContext, split: Split, got: SplitPoint, num_prompts: int | None = None
) -> dict[str, Any]:
    """The figures of a priced split, each with where it comes from."""
    p, d = got.point, got.point.disagg
    if d is None:  # a split point always carries its prefill side
        raise AssertionError("a disaggregated point without its prefill pool")
    osl = ctx.req.osl
    decode_sim = f"decode worker simulated closed loop, {p.concurrency_per_replica} clients, KV arrived"
    if got.bound == "decode":
        prefill_how = (
            f"prefill worker simulated open loop at {d.prefill_rate:,.2f} req/s (decode rate / workers)"
        )
        rate_how = (
            "decode workers' simulated rate by Little's law: clients / mean E2EL (the prefill pool keeps up)"
        )
        if num_prompts is not None:
            prefill_how += (
                f", plus the first wave's queue (the {got.clients} clients send at once to an idle "
                f"deployment) averaged over {num_prompts} prompts"
            )
    else:
        prefill_how = "prefill-bound: clients / rate (Little's law) less the time in decode"
        rate_how = "prefill workers' simulated saturated rate (the decode pool could serve more)"
    transfer_how = (
        f"KV bytes / ({d.link} x {LINK_EFFICIENCY:.2f} x min(prefill, decode GPUs) streams) "
        f"+ {TRANSFER_FLOOR_S * 1e6:.0f} us"
    )
    gpus = split.gpus
    benchmark = {} if num_prompts is None else {"num_prompts": num_prompts}
    return {
        "model": ctx.model.name,
        "system": ctx.system.name,
        "backend": ctx.engine.name,
        "mode": "disagg",
        "batch": got.clients,
        "isl": ctx.req.isl,
        "osl": osl,
        **benchmark,
        "gpus": gpus,
        "parallel": split.label(),
        "prefill": {
            "parallel": d.prefill.parallel.label(),
            "workers": split.prefill_workers,
            "gpus_per_worker": split.prefill.gpus,
            "capacity_requests_per_s": got.prefill_capacity,
        },
        "decode": {
            "parallel": p.config.parallel.label(),
            "workers": split.decode_workers,
            "gpus_per_worker": split.decode.gpus,
            "concurrency_per_worker": p.concurrency_per_replica,
        },
        "bound": got.bound,
        "ttft_ms": p.ttft[0],
        "ttft_ms_low": min(p.ttft[1], p.ttft[2]),
        "ttft_ms_high": max(p.ttft[1], p.ttft[2]),
        "ttft_parts_ms": {
            "prefill_queue_and_prefill": got.prefill_ms,
            "kv_transfer": got.transfer_ms,
            "decode_first_step": got.first_step_ms,
        },
        "kv_link": d.link,
        "tpot_ms": p.tpot[0],
        "tpot_ms_low": min(p.tpot[1], p.tpot[2]),
        "tpot_ms_high": max(p.tpot[1], p.tpot[2]),
        "request_rate": got.request_rate,
        "output_tokens_per_s_per_gpu": got.request_rate * osl / gpus,
        "tokens_per_s_per_user": 1000.0 / p.tpot[0] if p.tpot[0] > 0 else 0.0,
        "provenance": {
            "kernel_time_by_source": point_sources(ctx, p),
            "engine": ctx.engine.source,
            "figures": {
                "prefill_queue_and_prefill": prefill_how,
                "kv_transfer": transfer_how,
                "decode_first_step": decode_sim,
                "tpot": decode_sim,
                "request_rate": rate_how,
            },
        },
    }


def print_disagg(data: dict[str, Any]) -> None:
    """The answer as a table: each figure, its band and where it comes from."""
    out = console()
    pre, dec = data["prefill"], data["decode"]
    title = (
        f"{data['model']} on {data['gpus']}x {data['system']} ({data['backend']}), disagg: "
        f"prefill {pre['workers']}x {pre['parallel']} | decode {dec['workers']}x {dec['parallel']}, "
        f"concurrency {data['batch']}, {data['isl']}/{data['osl']} tokens"
    )
    parts, how = data["ttft_parts_ms"], data["provenance"]["figures"]
    rows = [
        ("TTFT ms", f"{data['ttft_ms']:,.1f}", f"{data['ttft_ms_low']:,.1f} - {data['ttft_ms_high']:,.1f}",
         "prefill + KV transfer + decode first step"),
        ("  prefill queue + prefill", f"{parts['prefill_queue_and_prefill']:,.1f}", "",
         how["prefill_queue_and_prefill"]),
        (f"  KV transfer ({data['kv_link']})", f"{parts['kv_transfer']:,.2f}", "", how["kv_transfer"]),
        ("  decode first step", f"{parts['decode_first_step']:,.1f}", "", how["decode_first_step"]),
        ("TPOT ms", f"{data['tpot_ms']:,.2f}", f"{data['tpot_ms_low']:,.2f} - {data['tpot_ms_high']:,.2f}",
         how["tpot"]),
        ("requests/s", f"{data['request_rate']:,.2f}", "", how["request_rate"]),
        ("output tok/s/GPU", f"{data['output_tokens_per_s_per_gpu']:,.0f}", "", "requests/s x osl / GPUs"),
        ("tok/s/user", f"{data['tokens_per_s_per_user']:,.1f}", "", "1000 / TPOT"),
    ]  # fmt: skip
    columns = (
        Col("metric", "right", key=True),
        Col("value", "right", key=True),
        Col("band (low - high)", "right", key=True),
        Col("from", "left", drop=1),
    )
    print_table(columns, rows, title)
    out.print(f"[dim]{band_line(data)}[/dim]")
    bound = (
        "decode pool"
        if data["bound"] == "decode"
        else "prefill pool (it cannot keep up with the decode pool)"
    )
    out.print(
        f"binding: the {bound}; prefill pool capacity {pre['capacity_requests_per_s']:,.2f} requests/s; "
        f"{dec['concurrency_per_worker']} requests per decode worker"
    )
    shares = data["provenance"]["kernel_time_by_source"]
    out.print(f"[dim]kernel time by source: {describe_shares(shares)}[/dim]")
    out.print(f"[dim]engine: {data['provenance']['engine']}[/dim]")
    warning = roofline_warning(shares)
    if warning:
        out.print(f"[yellow]{warning}[/yellow]")
