"""The request-level disaggregated twin (`servelab bench --simulate` with --prefill-* / --decode-*) on the
development disaggregated rows of AIConfigurator's silicon_sample.csv, beside `servelab estimate --mode
disagg` on the same rows (accuracy/disagg_rows.py has the rows, their mapping and the errors:
servelab.calibrate.disagg_rows). Development rows only: the held-out part is never read here.

    PYTHONPATH=src python accuracy/disagg_twin_rows.py [--max-concurrency 1024] [--prompts-per-client 4]
        [--out FILE.json]

Each row's twin replays a closed loop at the row's concurrency: 4 x C prompts (at least 32; their client
sent 10 x C, fewer here for time) of the lengths the row's client sent (InferenceX's sa-bench: uniform in
[0.8 L, L] by InferenceX's rule; AIConfigurator's own client: L; calibrate.disagg_rows.client_range_ratio,
as the estimate replays them), round-robin routing; compared at the mean, the statistic the estimate
states. Rows above --max-concurrency are left out (their twin takes minutes here).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from disagg_rows import CSV, HELDOUT

from servelab.calibrate.disagg_rows import (
    disagg_rows,
    errors,
    price_rows,
    summarize,
    summary_cells,
    to_row,
)
from servelab.errors import ServelabError
from servelab.predict.twin import BenchStream, EngineSettings
from servelab.predict.twin_disagg import simulate_disagg_benchmark
from servelab.specs import load_system


def twin_of(raw: dict, per_client: int) -> dict:
    """The twin's mean TTFT and TPOT of one row, and its request rate."""
    row, model = to_row(raw)
    c = row.concurrency
    stream = BenchStream(
        random_input_len=row.isl,
        random_output_len=row.osl,
        random_range_ratio=row.client_range_ratio,
        random_prefix_len=0,
        num_prompts=max(32, per_client * c),
        max_concurrency=c,
        request_rate=float("inf"),
        random_range_rule="inferencex",  # [r L, L]: sa-bench's rule, and L alone at r = 1
    )
    run = simulate_disagg_benchmark(
        model, load_system(row.system), row.split, EngineSettings(engine=row.engine), stream, "round-robin",
        ["ttft", "tpot"], [50.0], {},
    )  # fmt: skip
    s = run.summary
    return {
        "ttft_ms": s.latency_ms["ttft"].mean,
        "tpot_ms": s.latency_ms["tpot"].mean,
        "request_rate": s.request_throughput,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-concurrency", type=int, default=1024)
    ap.add_argument("--prompts-per-client", type=int, default=4)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    raws = disagg_rows("dev", CSV, HELDOUT)
    echo = lambda s: print(s, file=sys.stderr)  # noqa: E731
    priced, _ = price_rows(raws, echo)
    by_id = {r["id"]: r for r in raws}
    per_row, skipped = [], 0
    for row, est in priced:
        if row.concurrency > args.max_concurrency:
            skipped += 1
            continue
        t0 = time.process_time()
        try:
            twin = twin_of(by_id[row.row_id], args.prompts_per_client)
        except ServelabError as e:
            echo(f"{row.row_id}: {e}")
            continue
        cpu = time.process_time() - t0
        per_row.append((row, est, twin))
        echo(f"{row.row_id} {row.engine} {row.system} {row.split.label()} c{row.concurrency}: measured "
             f"{row.ttft_ms:.0f}/{row.tpot_ms:.1f} estimate {est['ttft_ms']:.0f}/{est['tpot_ms']:.1f} "
             f"twin {twin['ttft_ms']:.0f}/{twin['tpot_ms']:.1f} ms ({cpu:.1f} s CPU)")  # fmt: skip
    groups: dict[str, list] = {"all": per_row}
    for item in per_row:
        groups.setdefault(f"{item[0].engine} {item[0].system}", []).append(item)
    table = {
        name: {
            "estimate": summarize([errors(r, e) for r, e, _ in items]),
            "twin": summarize([errors(r, t) for r, _, t in items]),
        }
        for name, items in groups.items()
    }
    left = f"{skipped} above concurrency {args.max_concurrency} left out"
    print(f"{len(per_row)} development rows compared; {left}")
    head = "  n   TTFT    TPOT    tput  TTFT<1.5x"
    print(f"{'rows':22s} | estimate: {head} | twin: {head}")
    for name, t in table.items():
        cells = [summary_cells(t[side]) for side in ("estimate", "twin")]
        print(f"{name:22s} | " + " | ".join(cells))
    if args.out:
        report = {
            "part": "dev",
            "max_concurrency": args.max_concurrency,
            "prompts_per_client": args.prompts_per_client,
            "errors": table,
            "per_row": [{**r.record(), "estimate": e, "twin": t} for r, e, t in per_row],
        }
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
