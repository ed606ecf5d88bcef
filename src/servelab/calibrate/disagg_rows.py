"""Measured disaggregated rows (AIConfigurator's silicon_sample.csv, `mode == disagg`) mapped onto one given
split and priced by predict.plan.split, the function behind `servelab estimate --mode disagg`
(accuracy/disagg_rows.py prints the comparison).

Each row names its prefill pool and decode pool (tp / attention-dp / moe-tp / moe-ep and worker count), ISL,
OSL and the deployment's concurrency (`silicon_concurrency=N`). It is mapped the way calibrate.rows maps
aggregated rows (embedded model ids, the row's GEMM precision, FP8 KV on TensorRT-LLM FP8 rows, attention x
MoE layouts, NVFP4 rows of FP8 checkpoints as NVIDIA's FP4 releases with their FP8 KV cache). Rows it cannot
price are counted by reason.

Each row is replayed with the client that measured it (client_range_ratio), as the aggregated closed-loop
points are (calibrate.closed_loop). The rows of InferenceX's database (`db-dump/`, nearly all) were measured
by srt-slurm's sa-bench (the multinode disaggregated runs InferenceX records; NVIDIA/srt-slurm c88ef731
src/srtctl/benchmarks/scripts/sa-bench/bench.sh and benchmark_serving.py `sample_random_requests`): lengths
uniform in [0.8 L, L] (`random_range_ratio` 0.8, hard-wired before 43a2e448 of 2026-02-24, its default
since; no DeepSeek recipe sets another), a closed loop of C clients at `--request-rate inf`, started after
a warm-up that ran in a process of its own, over C x `num_prompts_mult` prompts (10 unless the recipe says
otherwise, src/srtctl/benchmarks/sa_bench.py; 10 since 88ff268d of 2026-01-23, 8 before), every one counted.
AIConfigurator's own rows (its gap-analysis campaign) ran its client, every request at the nominal lengths
(clients.AICONFIGURATOR_LENGTHS). Each row is priced as PROMPTS_PER_CONCURRENCY x C prompts from an idle
deployment (price_given_split's num_prompts), the convention the aggregated rows are replayed with
(calibrate.price).

Throughput is the deployment's output tokens/s per GPU by Little's law, one formula for a measurement and an
estimate alike: concurrency x OSL / (TTFT + (OSL - 1) x TPOT) / GPUs (the rows give only TTFT and TPOT).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servelab.calibrate.clients import AICONFIGURATOR_LENGTHS, measured_by_inferencex
from servelab.calibrate.closed_loop import read_heldout
from servelab.calibrate.price import PROMPTS_PER_CONCURRENCY, lengths_up_to
from servelab.calibrate.recipes import INFERENCEX_RANGE_RATIO
from servelab.calibrate.rows import (
    ENGINES,
    concurrency_of,
    fp8_kv_if_unmarked,
    model_of,
    parallel_of,
    read_rows,
)
from servelab.errors import ServelabError
from servelab.predict.engines import EngineProfile, engine_profile
from servelab.predict.plan.split import Split, price_given_split, split_context
from servelab.specs import ModelSpec, load_system

WITHIN = 1.5  # the share of rows whose TTFT is within this factor of the measurement


@dataclass(frozen=True)
class Row:
    """One measured disagg row mapped onto servelab's specs."""

    row_id: str
    engine: str
    system: str
    split: Split
    concurrency: int
    isl: int
    osl: int
    ttft_ms: float
    tpot_ms: float
    client_range_ratio: float  # the client's lengths: uniform in [ratio x L, L]
    raw: dict

    def record(self) -> dict:
        """The row as a report lists it, before what was predicted for it."""
        return {
            "id": self.row_id,
            "split": self.split.label(),
            "concurrency": self.concurrency,
            "client_range_ratio": self.client_range_ratio,
            "measured": {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms},
        }


def disagg_rows(part: str, path: Path, heldout: Path) -> list[dict]:
    """The disagg rows of the development part (ids not held out) or the held-out part, as written."""
    held = read_heldout(heldout)
    keep = (lambda i: i in held) if part == "heldout" else (lambda i: i not in held)
    return [r for r in read_rows(path) if r.get("mode") == "disagg" and keep(r["id"])]


def client_range_ratio(raw: dict) -> float:
    """The lengths the row's client sent, as the r of [r L, L]: sa-bench's for InferenceX's runs, the nominal
    ones for AIConfigurator's own (the module's docstring)."""
    if measured_by_inferencex(raw["silicon_data_source"]):
        return INFERENCEX_RANGE_RATIO
    return AICONFIGURATOR_LENGTHS


def _pool(row: dict, side: str) -> dict:
    return {k.removeprefix(f"{side}_"): v for k, v in row.items() if k.startswith(f"{side}_")}


def _workers(row: dict, side: str) -> int:
    text = (row.get(f"{side}_num_workers") or "").strip()
    if not text or text.lower() == "nan" or float(text) < 1:
        raise ValueError(f"no {side}_num_workers")
    return int(float(text))


def to_row(raw: dict) -> tuple[Row, ModelSpec]:
    """The mapped row and its ModelSpec, or ValueError naming why it cannot be priced."""
    engine = raw["backend"].strip()
    if engine not in ENGINES:
        raise ValueError(f"backend {engine}")
    model = fp8_kv_if_unmarked(engine, raw, model_of(raw))
    try:
        load_system(raw["system"])
    except ServelabError:
        raise ValueError(f"system {raw['system']} is not embedded") from None
    pools = {}
    for side in ("prefill", "decode"):
        try:
            parallel, _ = parallel_of(_pool(raw, side), model.is_moe)
        except ValueError as e:
            raise ValueError(f"{side} pool: {e}") from None
        pools[side] = parallel
    split = Split(pools["prefill"], _workers(raw, "prefill"), pools["decode"], _workers(raw, "decode"))
    row = Row(
        row_id=raw["id"],
        engine=engine,
        system=raw["system"],
        split=split,
        concurrency=concurrency_of(raw),
        isl=int(float(raw["isl"])),
        osl=int(float(raw["osl"])),
        ttft_ms=float(raw["silicon_ttft_ms"]),
        tpot_ms=float(raw["silicon_tpot_ms"]),
        client_range_ratio=client_range_ratio(raw),
        raw=raw,
    )
    return row, model


def throughput(row: Row, ttft_ms: float, tpot_ms: float) -> float:
    """Output tokens/s per GPU of the deployment at the row's concurrency (Little's law)."""
    e2e_s = (ttft_ms + (row.osl - 1) * tpot_ms) / 1000.0
    return row.concurrency * row.osl / e2e_s / row.split.gpus


def price_rows(
    raws: list[dict], echo: Callable[[str], None]
) -> tuple[list[tuple[Row, dict]], dict[str, int]]:
    """servelab's estimate of every row it can price, and the rows it cannot, counted by reason."""
    profiles: dict[tuple[str, str], EngineProfile] = {}
    priced: list[tuple[Row, dict]] = []
    skipped: dict[str, int] = {}
    for i, raw in enumerate(raws):
        try:
            row, model = to_row(raw)
            system = load_system(row.system)
            key = (row.engine, row.system)
            if key not in profiles:
                profiles[key] = engine_profile(row.engine, system.hbm_gib, gpu_name=system.gpu_name)
            engine = profiles[key]
            served = engine.model_as_served(model)
            if row.isl + row.osl > served.max_context:
                raise ValueError(f"ISL + OSL exceeds {served.name}'s context")
            (isl, osl), spread = lengths_up_to(row.isl, row.osl, row.client_range_ratio)
            ctx = split_context(served, system, engine, row.split, isl, osl, spread)
            got = price_given_split(
                ctx, row.split, row.concurrency, PROMPTS_PER_CONCURRENCY * row.concurrency
            )
        except (ValueError, ServelabError) as e:
            reason = re.sub(r"\d+(\.\d+)?", "N", str(e))[:140]
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        p = got.point
        priced.append(
            (
                row,
                {
                    "ttft_ms": p.ttft[0],
                    "tpot_ms": p.tpot[0],
                    "bound": got.bound,
                    "request_rate": got.request_rate,
                    "prefill_capacity": got.prefill_capacity,
                    "prefill_ms": got.prefill_ms,
                    "transfer_ms": got.transfer_ms,
                    "first_step_ms": got.first_step_ms,
                    "link": p.disagg.link if p.disagg else "",
                },
            )
        )
        if (i + 1) % 100 == 0:
            echo(f"  {i + 1}/{len(raws)} rows")
    return priced, skipped


def _rel(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas


def errors(row: Row, pred: dict) -> dict[str, float]:
    """Relative errors; `throughput_by_ttft` / `_by_tpot`: the throughput's error were the other figure the
    measured one (which of the two the throughput misses by)."""
    measured = throughput(row, row.ttft_ms, row.tpot_ms)
    return {
        "ttft": _rel(pred["ttft_ms"], row.ttft_ms),
        "tpot": _rel(pred["tpot_ms"], row.tpot_ms),
        "throughput": _rel(throughput(row, pred["ttft_ms"], pred["tpot_ms"]), measured),
        "throughput_by_ttft": _rel(throughput(row, pred["ttft_ms"], row.tpot_ms), measured),
        "throughput_by_tpot": _rel(throughput(row, row.ttft_ms, pred["tpot_ms"]), measured),
        "ttft_within": float(1 / WITHIN <= pred["ttft_ms"] / row.ttft_ms <= WITHIN),
    }


def summarize(errs: list[dict[str, float]]) -> dict[str, float]:
    if not errs:
        return {"n": 0}
    out: dict[str, float] = {"n": len(errs)}
    for key in ("ttft", "tpot", "throughput", "throughput_by_ttft", "throughput_by_tpot"):
        out[f"median_{key}"] = statistics.median(e[key] for e in errs)
    out["ttft_within_1.5x"] = sum(e["ttft_within"] for e in errs) / len(errs)
    return out


def compare(priced: list[tuple[Row, dict]], aic: dict[str, dict]) -> dict:
    """Per engine / system and overall: servelab on every row it priced; servelab and AIConfigurator on the
    rows both answered."""
    groups: dict[str, list[tuple[Row, dict]]] = {"all": priced}
    for row, pred in priced:
        groups.setdefault(f"{row.engine} {row.system}", []).append((row, pred))
    out = {}
    for name, items in groups.items():
        both = [(r, p) for r, p in items if "ttft_ms" in aic.get(r.row_id, {})]
        out[name] = {
            "servelab": summarize([errors(r, p) for r, p in items]),
            "servelab_on_aic_rows": summarize([errors(r, p) for r, p in both]),
            "aiconfigurator": summarize([errors(r, aic[r.row_id]) for r, _ in both]),
        }
    return out


def by_bound(priced: list[tuple[Row, dict]]) -> dict[str, dict[str, float]]:
    """servelab's errors per engine, system and the pool servelab says binds the rate."""
    groups: dict[str, list[dict[str, float]]] = {}
    for row, pred in priced:
        groups.setdefault(f"{row.engine} {row.system} {pred['bound']}-bound", []).append(errors(row, pred))
    return {name: summarize(errs) for name, errs in sorted(groups.items())}


def summary_cells(s: dict) -> str:
    """A summary as table cells: rows, median TTFT / TPOT / throughput error, share of TTFT within 1.5x."""
    if not s.get("n"):
        return f"{'-':>5}"
    return (
        f"{int(s['n']):5d} {100 * s['median_ttft']:6.1f}% {100 * s['median_tpot']:6.1f}% "
        f"{100 * s['median_throughput']:6.1f}% {100 * s['ttft_within_1.5x']:5.0f}%"
    )
