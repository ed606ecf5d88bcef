"""Shared CLI helpers: JSON output, rich tables, options derived from model fields, and the common
model/system/parallel options."""

import json
import sys
from typing import Any

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console

from servelab.errors import ServelabError


def print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def console() -> Console:
    return Console()


def gib(x: float) -> str:
    return f"{x:,.1f}"


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
