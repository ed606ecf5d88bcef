"""How many requests a point of AIConfigurator's own campaign averaged, read from its figures, and what the
replay gives with that many (development part only; docs/accuracy.md, "How AIConfigurator's campaign sent
its requests").

A benchmark client stamps each request in whole nanoseconds, so a mean over N requests times N is a whole
number of nanoseconds; a median or a percentile is whole over 1 or 2. genai-perf also rounds each
request's inter-token latency to whole nanoseconds (genai_perf/profile_data_parser/
llm_profile_data_parser.py, `round(...)`; aiperf does not: aiperf/metrics/types/
inter_token_latency_metric.py), so a TPOT that is whole the same way names genai-perf. For each campaign
file (the row's `silicon_data_source`), this counts the points whose TTFT and TPOT are whole over N
requests, for N = C (a single wave), 10 x C, 20 x C and 20 x C - 1 (a pool of 20 x C with one request
lost), and N = 1: a figure rounded to fewer digits is whole over any N, and tells nothing. Whole over
10 x C implies whole over 20 x C; a pool of 20 x C is whole over 10 x C about half the time.

--replay K1,K2,... also prices the campaign's undated points with K x C requests from an idle engine, in
place of the requests calibrate/clients.py gives them (K = 1: every request in one wave of C), and prints,
per file and by clients, the median |TTFT error|, the share within 1.5x and the median measured / predicted
TTFT.

    python accuracy/aic_request_counts.py
    python accuracy/aic_request_counts.py --replay 1,10,20 [--only trtllm/1.0.0rc3]
"""

import argparse
import sys
from collections import defaultdict
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np
from closed_loop import DATA, SYSTEMS  # the sibling script (run from accuracy/)

from servelab.calibrate.closed_loop import Point, read_points
from servelab.calibrate.price import Pricer
from servelab.errors import ServelabError
from servelab.predict.engines import read_calibration, shipped_calibration
from servelab.specs import load_system

CAMPAIGN = "aiconfigurator"
# a float keeps ~16 significant digits: n x the time in ns is within a few units of the 16th digit of whole
# (a looser test finds false small counts: at 1e-3 ns, one n in 500 passes by chance)
WHOLE_RELATIVE = Fraction(1, 10**15)
# the request counts tested, by clients C: one (a rounded figure), a wave of C, the eval harness's 10 x C
# (genai_perf_runner.py at ai-dynamo/aiconfigurator 9610283), 20 x C, and 20 x C with one request lost (a
# mean over one pool)
COUNTS = (
    ("1", lambda c: 1),  # the figure itself whole: rounded (e.g. to 0.01 ms), no count can be read
    ("C", lambda c: c),
    ("10 C", lambda c: 10 * c),
    ("20 C", lambda c: 20 * c),
    ("20 C - 1", lambda c: 20 * c - 1),
)
WITHIN = 1.5


def campaign_file(point: Point) -> str:
    """The row's file in its campaign: ENGINE/VERSION/MODEL.csv of .../data/SYSTEM/ENGINE/VERSION/MODEL.csv"""
    source = point.case.silicon_source.split(";")[0]
    return source.split("/data/", 1)[-1].split("/", 1)[-1]


def whole_over(ms: float, requests: int) -> bool:
    """Whether `requests` x `ms` is a whole number of nanoseconds: a mean over that many whole-ns figures."""
    scaled = Fraction(repr(ms)) * 1_000_000 * requests
    return abs(scaled - round(scaled)) < scaled * WHOLE_RELATIVE


def count_table(points: list[Point]) -> list[str]:
    by_file: dict[str, list[Point]] = defaultdict(list)
    for p in points:
        by_file[campaign_file(p)].append(p)
    head = ", ".join(label for label, _ in COUNTS)
    cells = " | ".join(label for label, _ in COUNTS)
    lines = [
        f"points whose TTFT (then TPOT) x N is whole in ns, for N = {head}; 'none': for no N of these",
        f"| file | dated | points | TTFT: {cells} | none | TPOT: {cells} | none |",
        "|---|---|---|" + "---|" * (2 * len(COUNTS) + 2),
    ]
    for name, group in sorted(by_file.items()):
        row = []
        for metric in ("ttft_ms", "tpot_ms"):
            hits = [
                [whole_over(getattr(p.case, metric), n(p.case.concurrency)) for _, n in COUNTS] for p in group
            ]
            per_count = [sum(h[i] for h in hits) for i in range(len(COUNTS))]
            row += [*map(str, per_count), str(sum(not any(h) for h in hits))]
        dated = "yes" if all(p.case.measured for p in group) else "no"
        lines.append(f"| {name} | {dated} | {len(group)} | {' | '.join(row)} |")
    return lines


def replay_table(points: list[Point], per_client: list[int]) -> list[str]:
    cal = read_calibration(shipped_calibration())
    params = {name: dict(entry.params) for name, entry in cal.engines.items()}
    ratios: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for k in per_client:
        pricers: dict[str, Pricer] = {}
        for p in points:
            c = p.case
            if c.settings is not None:  # k x C in place of the client's own count
                c = replace(c, settings=replace(c.settings, requests_per_client=None))
            if c.system not in pricers:
                system = load_system(c.system)
                pricers[c.system] = Pricer(
                    system, "aggregated", prompts_per_concurrency=k, moe_fits=cal.moe_fits()
                )
            try:
                estimate = pricers[c.system].estimate(c, params.get(c.engine.value, {}))
            except ServelabError:
                continue  # refused (as accuracy/closed_loop.py counts it): left out of every k alike
            measured_over_predicted = c.ttft_ms / estimate.percentiles["ttft_ms"]["mean"]
            for group in (campaign_file(p), f"{campaign_file(p)}, {c.concurrency} clients"):
                ratios[group][k].append(measured_over_predicted)
    cells = " | ".join(f"k = {k}" for k in per_client)
    lines = [
        "median |TTFT error|, TTFT within 1.5x, median measured / predicted TTFT, with k x C requests:",
        f"| points | n | {cells} |",
        "|---|---|" + "---|" * len(per_client),
    ]
    for group, by_k in sorted(ratios.items()):
        cell = []
        for k in per_client:
            r = np.array(by_k[k])
            err = np.median(np.abs(1 / r - 1)) * 100
            within = np.mean((r <= WITHIN) & (r >= 1 / WITHIN)) * 100
            cell.append(f"{err:.1f} %, {within:.0f} %, {np.median(r):.2f}")
        lines.append(f"| {group} | {len(by_k[per_client[0]])} | {' | '.join(cell)} |")
    return lines


def per_client_list(text: str) -> list[int]:
    values = [int(v) for v in text.split(",")]
    if not values or min(values) < 1:
        raise ValueError
    return values


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--replay", help="K1,K2,...: price the undated points with K x C requests each")
    ap.add_argument("--only", default="", help="only points whose campaign file contains this text")
    args = ap.parse_args(argv)
    try:
        per_client = per_client_list(args.replay) if args.replay else []
    except ValueError:
        print(f"error: --replay {args.replay}: expected whole numbers >= 1, comma-separated", file=sys.stderr)
        return 2
    try:
        points, _ = read_points(args.data, SYSTEMS)
    except (OSError, ValueError, ServelabError) as e:
        print(f"error: --data {args.data}: expected tests/data/closed_loop's layout ({e})", file=sys.stderr)
        return 2
    # the development part only, filtered before anything is read from a point
    dev = [p for p in points if not p.heldout and p.source == CAMPAIGN and args.only in campaign_file(p)]
    if not dev:
        print(
            f"error: --only {args.only!r}: no development point of AIConfigurator's campaign", file=sys.stderr
        )
        return 2
    print("\n".join(count_table(dev)))
    if per_client:
        print()
        print("\n".join(replay_table([p for p in dev if not p.case.measured], per_client)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
