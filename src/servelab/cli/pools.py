"""The pools of a disaggregated deployment as the command line gives them (--prefill-tp ... --decode-workers),
one vocabulary for `servelab estimate --mode disagg` and `servelab bench --simulate`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer
from pydantic import ValidationError

from servelab.errors import ServelabError

if TYPE_CHECKING:
    from servelab.predict.plan.split import Split
    from servelab.specs import Parallel

DEFAULT_ROUTER = "round-robin"
_POOL_HELP = {
    "tp": "GPUs per {pool} worker (tp)",
    "ep": "{pool} worker's expert parallel",
    "dp_attn": "{pool} attention DP",
    "workers": "{pool} workers (1)",
}


def pool_option(pool: str, key: str, panel: str | None = None, mode: str = "disagg"):
    """The option --POOL-KEY (pool: prefill or decode; key: tp, ep, dp_attn, workers), declared once for every
    command that takes the pools; `mode`: what the help says it is for."""
    flag = f"--{pool}-{key.replace('_', '-')}"
    help_text = f"{mode}: {_POOL_HELP[key].format(pool=pool)}"
    if key == "dp_attn":
        return typer.Option(False, flag, help=help_text, rich_help_panel=panel)
    return typer.Option(None, flag, help=help_text, rich_help_panel=panel)


@dataclass(frozen=True)
class PoolOptions:
    """One pool's options as given (None: not given)."""

    tp: int | None
    ep: int | None
    dp_attn: bool
    workers: int | None

    def given(self) -> str | None:
        """The first option given (its field name), or None."""
        values = {"tp": self.tp, "ep": self.ep, "dp_attn": self.dp_attn or None, "workers": self.workers}
        return next((name for name, value in values.items() if value is not None), None)


def pool_parallel(name: str, opts: PoolOptions, needs: str = "--mode disagg") -> tuple[Parallel, int]:
    """The pool's worker layout and worker count; --NAME-tp is required, the rest default to 1 / off.
    `needs`: what asks for the pools, as the error names it."""
    from servelab.specs import Parallel  # noqa: PLC0415  # `servelab bench` without pools starts without it

    if opts.tp is None:
        raise ServelabError(
            f"{needs} needs each pool's layout: give --prefill-tp and --decode-tp", field=f"{name}_tp"
        )
    workers = 1 if opts.workers is None else opts.workers
    if workers < 1:
        raise ServelabError(f"expected at least 1 worker, got {workers}", field=f"{name}_workers")
    try:
        parallel = Parallel(tp=opts.tp, ep=1 if opts.ep is None else opts.ep, dp_attn=opts.dp_attn)
    except ValidationError as e:
        flags = {key: f"--{name}-{key.replace('_', '-')}" for key in ("tp", "ep", "dp_attn")}
        raise ServelabError.from_validation(e, as_options=True, flags=flags) from None
    return parallel, workers


@dataclass(frozen=True)
class Pools:
    """`servelab bench --simulate`'s disaggregated deployment: both pools and the router's policy."""

    prefill: PoolOptions
    decode: PoolOptions
    router: str | None

    def given(self) -> str | None:
        """The first option given (its field name, e.g. prefill_tp), or None: an aggregated deployment."""
        for name, pool in (("prefill", self.prefill), ("decode", self.decode)):
            field = pool.given()
            if field:
                return f"{name}_{field}"
        return "router" if self.router is not None else None

    def split(self, deployment: dict) -> Split:
        """The split, refusing the aggregated deployment's layout beside it (each pool has its own)."""
        from servelab.predict.plan.split import Split  # noqa: PLC0415  # start-up time, as above

        layout = (deployment["tp"], deployment["ep"], deployment["dp_attn"], deployment["pp"])
        if layout != (1, 1, False, 1):
            raise ServelabError(
                "--tp / --ep / --dp-attn / --pp: with a disaggregated deployment each pool has its own "
                "(--prefill-tp ..., --decode-tp ...)",
                field="tp",
            )
        needs = "a disaggregated --simulate"
        p_parallel, p_workers = pool_parallel("prefill", self.prefill, needs)
        d_parallel, d_workers = pool_parallel("decode", self.decode, needs)
        return Split(p_parallel, p_workers, d_parallel, d_workers)

    def policy(self):
        """The router's policy (a one-line error for an unknown one)."""
        from servelab.predict.serving.disagg import ROUTER_POLICIES  # noqa: PLC0415  # start-up time

        policy = self.router or DEFAULT_ROUTER
        if policy not in ROUTER_POLICIES:
            raise ServelabError(
                f"expected one of {', '.join(ROUTER_POLICIES)}, got {policy!r}", field="router"
            )
        return policy
