"""Shared CLI helpers: JSON output, rich tables, and the common model/system/parallel options."""

import json
import sys

import typer


def print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def console():
    from rich.console import Console

    return Console()


def gib(x: float) -> str:
    return f"{x:,.1f}"


ModelArg = typer.Argument(
    ..., help="Embedded name (servelab models), checkpoint id, or path to a config.json"
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
    from pydantic import ValidationError

    from servelab.errors import ServelabError
    from servelab.specs import Parallel, load_model, load_system

    spec = load_model(model, weight_dtype=weight_dtype, kv_dtype=kv_dtype)
    sys_spec = load_system(system)
    try:
        parallel = Parallel(tp=tp, ep=ep, dp_attn=dp_attn, pp=pp)
    except ValidationError as e:
        err = e.errors()[0]
        raise ServelabError(f"--{err['loc'][0]}: {err['msg']}") from None
    return spec, sys_spec, parallel
