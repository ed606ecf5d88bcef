"""`servelab estimate`: TTFT, TPOT and throughput of one deployment at one batch."""

from pathlib import Path
from typing import Any

import typer

from servelab.cli._common import (
    CalibrationOpt,
    Col,
    DpAttnOpt,
    EpOpt,
    JsonOpt,
    KvDtypeOpt,
    ModelArg,
    PpOpt,
    SystemOpt,
    TpOpt,
    WeightDtypeOpt,
    console,
    load_deployment,
    print_json,
    print_table,
)
from servelab.cli.estimate_disagg import estimate_disagg, print_disagg
from servelab.cli.explain_table import EXPLAINS_TWIN_ONLY, print_explain
from servelab.cli.pools import PoolOptions, pool_option
from servelab.engines import Engine
from servelab.errors import ServelabError
from servelab.predict.band_domain import Asked
from servelab.predict.bands import DISAGG_NO_CLAIM, attach_band, band_line
from servelab.predict.engines import engine_profile, fitted_params
from servelab.predict.provenance import describe_shares, roofline_warning
from servelab.predict.serving import Workload, estimate_aggregated
from servelab.predict.static import estimate_static
from servelab.readable import value as value_text

MAX_BATCH = 1 << 16
# predictions the calibration's residuals (of the simulated closed loop on aggregated rows) do not describe
STATIC_NO_CLAIM = "static mode (the measured bands are of the simulated closed loop: --mode agg)"


def estimate(
    model: str = ModelArg,
    system: str = SystemOpt,
    tp: int = TpOpt,
    ep: int = EpOpt,
    dp_attn: bool = DpAttnOpt,
    pp: int = PpOpt,
    batch: int = typer.Option(1, "--batch", "-b", help="Sequences (static) or concurrency (agg)"),
    isl: int = typer.Option(1024, "--isl", help="Input tokens per request"),
    osl: int = typer.Option(1024, "--osl", help="Output tokens per request"),
    mode: str = typer.Option("static", "--mode", help="static | agg | disagg"),
    backend: str = typer.Option(Engine.VLLM.value, "--backend", help="torch | vllm | sglang | trtllm"),
    weight_dtype: str = WeightDtypeOpt,
    kv_dtype: str = KvDtypeOpt,
    as_json: bool = JsonOpt,
    show_breakdown: bool = typer.Option(False, "--breakdown", help="Time per op kind"),
    explain: bool = typer.Option(
        False, "--explain", help="agg: where the predicted TTFT goes, term by term (JSON: explain)"
    ),
    calibration: Path | None = CalibrationOpt,
    num_prompts: int | None = typer.Option(
        None,
        "--num-prompts",
        min=1,
        help="agg, disagg: simulate a benchmark of this many prompts (every client starts at t=0, all "
        "counted) instead of the steady state",
    ),
    prefill_tp: int | None = pool_option("prefill", "tp"),
    prefill_ep: int | None = pool_option("prefill", "ep"),
    prefill_dp_attn: bool = pool_option("prefill", "dp_attn"),
    prefill_workers: int | None = pool_option("prefill", "workers"),
    decode_tp: int | None = pool_option("decode", "tp"),
    decode_ep: int | None = pool_option("decode", "ep"),
    decode_dp_attn: bool = pool_option("decode", "dp_attn"),
    decode_workers: int | None = pool_option("decode", "workers"),
) -> None:
    """Predict one deployment. Static mode: TTFT = one prefill of the batch, TPOT = mean decode step. Disagg
    mode: a prefill pool and a decode pool (--prefill-* / --decode-*) at concurrency --batch."""
    prefill = PoolOptions(prefill_tp, prefill_ep, prefill_dp_attn, prefill_workers)
    decode = PoolOptions(decode_tp, decode_ep, decode_dp_attn, decode_workers)
    if batch > MAX_BATCH:  # the aggregated simulator runs every sequence; beyond this it takes minutes
        raise ServelabError(f"at most {MAX_BATCH} sequences, got {batch}", field="batch")
    if num_prompts is not None and mode not in ("agg", "disagg"):
        raise ServelabError("--num-prompts: only with --mode agg or disagg", field="num_prompts")
    if explain and mode != "agg":
        raise ServelabError(EXPLAINS_TWIN_ONLY, field="explain")
    if mode == "disagg":
        if (tp, ep, dp_attn, pp) != (1, 1, False, 1):
            raise ServelabError(
                "--tp / --ep / --dp-attn / --pp: with --mode disagg, each pool has its own "
                "(--prefill-tp ..., --decode-tp ...)",
                field="tp",
            )
        if show_breakdown:
            raise ServelabError("only with --mode static or agg", field="breakdown")
        data = estimate_disagg(
            model, system, backend, weight_dtype, kv_dtype, calibration, prefill, decode, batch, isl, osl,
            num_prompts,
        )  # fmt: skip
        attach_band(data, backend, calibration, None, DISAGG_NO_CLAIM)
        if as_json:
            print_json("servelab.estimate", data)
        else:
            print_disagg(data)
        return
    for name, pool in (("prefill", prefill), ("decode", decode)):
        given = pool.given()
        if given:
            raise ServelabError("only with --mode disagg", field=f"{name}_{given}")
    spec, sys_spec, parallel = load_deployment(
        model, system, weight_dtype, kv_dtype, tp, ep, dp_attn, pp, engine=backend
    )
    engine = engine_profile(backend, sys_spec.hbm_gib, calibration=calibration, gpu_name=sys_spec.gpu_name)
    if mode == "static":
        result = estimate_static(
            spec, sys_spec, parallel, engine, batch, isl, osl, with_breakdown=show_breakdown
        )
    elif mode == "agg":
        bench = None
        if num_prompts is not None:
            bench = Workload(isl=isl, osl=osl, concurrency=batch, warmup=0, num_requests=num_prompts)
        result = estimate_aggregated(
            spec,
            sys_spec,
            parallel,
            engine,
            batch,
            isl,
            osl,
            with_breakdown=show_breakdown,
            workload=bench,
            explain=fitted_params(backend, calibration) if explain else None,
        )
    else:
        raise ServelabError(f"--mode: expected static, agg or disagg, got {mode!r}")
    data = result.model_dump(mode="json", exclude_none=True)
    asked = Asked.of(data["model"], data["system"], batch, isl, osl)
    attach_band(data, backend, calibration, asked, STATIC_NO_CLAIM if mode == "static" else "")
    if as_json:
        print_json("servelab.estimate", data)
        return
    _print(data)


def _print(data: dict[str, Any]) -> None:
    out = console()
    title = (
        f"{data['model']} on {data['gpus']}x {data['system']} ({data['parallel']}, {data['backend']}), "
        f"{data['mode']}: batch {data['batch']}, {data['isl']}/{data['osl']} tokens"
    )
    mem = data["memory"]
    rows = [
        ("TTFT ms", f"{data['ttft_ms']:,.1f}", f"{data['ttft_ms_low']:,.1f} - {data['ttft_ms_high']:,.1f}"),
        ("TPOT ms", f"{data['tpot_ms']:,.2f}", f"{data['tpot_ms_low']:,.2f} - {data['tpot_ms_high']:,.2f}"),
        ("output tok/s/GPU", f"{data['output_tokens_per_s_per_gpu']:,.0f}", ""),
        ("tok/s/user", f"{data['tokens_per_s_per_user']:,.1f}", ""),
        ("memory GiB/GPU", f"w {mem['weights_gib']:.1f} + kv {mem['kv_cache_gib']:.1f}", ""),
    ]
    columns = (
        Col("metric", "right", key=True),
        Col("value", "right", key=True),
        Col("band (low - high)", "right", key=True),
    )
    print_table(columns, rows, title)
    out.print(f"[dim]{band_line(data)}[/dim]")
    for key in ("ttft_ms", "tpot_ms", "e2el_ms", "itl_ms"):
        pct = data.get("percentiles", {}).get(key)
        if pct:
            out.print(f"{key}: " + ", ".join(f"{k} {v:,.2f}" for k, v in pct.items()))
    provenance = data["provenance"]
    shares = provenance["kernel_time_by_source"]
    ops = ", ".join(f"{s} {n}" for s, n in provenance["ops_by_source"].items())
    out.print(f"[dim]kernel time by source: {describe_shares(shares)} (ops: {ops})[/dim]")
    out.print(f"[dim]engine: {provenance['engine']}[/dim]")
    rates = provenance.get("simulation", {}).get("rates")
    if rates:
        out.print(f"[dim]throughput: {rates}[/dim]")
    warning = roofline_warning(shares)
    if warning:
        out.print(f"[yellow]{warning}[/yellow]")
    if data.get("breakdown"):
        for phase in ("prefill_us", "decode_us"):
            bd = data["breakdown"][phase]
            total = sum(bd.values()) or 1.0
            print_table(
                (Col("op", "right", key=True), Col("ms", "right", key=True), Col("%", "right", key=True)),
                ((name, f"{us / 1000:,.3f}", f"{100 * us / total:.1f}") for name, us in bd.items()),
                f"{phase.removesuffix('_us')} step: kernel time per op",
            )
        out.print(f"engine overhead us: {value_text(data['breakdown']['engine_overhead_us'])}")
    if data.get("explain"):
        print_explain(data["explain"])
