"""One pass over a point's records, in merged order: what its result needs of each request, kept compact.

A record is read, derived (measured.py) and dropped: the summary and the client's extras keep float64 series
(8 bytes a request each) and counts (servelab.metrics.streaming); failure reasons and token-count sources are
counters. Only the per-request detail lists (--save-detailed, --json) grow with every request, as they must.
"""

from __future__ import annotations

import re
from collections import Counter

from servelab.bench import result as R
from servelab.bench.config import BenchConfig
from servelab.bench.measured import ClientLatency, MeasuredRequest, derive
from servelab.bench.tokenizer import LocalTokenizer
from servelab.metrics.streaming import SummaryBuilder


def resolve_output_len(rec: dict, tok: LocalTokenizer | None) -> tuple[int, str]:
    """A successful request's output tokens and where the count came from."""
    if rec.get("out") is not None:
        return int(rec["out"]), "usage"
    if tok is not None:
        return tok.count(rec.get("text") or ""), "tokenizer"
    return len(rec.get("chunks") or []), "content events (approximate: no usage, no tokenizer)"


def reason_key(err: str | None) -> str:
    """Group failure reasons: drop the per-request numbers so identical causes count together."""
    return re.sub(
        r"after \d+ content events|\(\d+ content events\)", "after N content events", err or "unknown"
    )


class Tally:
    """What the result needs, from records added one at a time in merged order (by send time).

    `until` (--cool-down): successes that ended after it are left out (counted in `cooled`); failures always
    count. Every record counts towards the failure reasons and `not_sent`."""

    def __init__(
        self, cfg: BenchConfig, tok: LocalTokenizer | None, until: float | None, details: bool
    ) -> None:
        self.tok = tok
        self.until = until
        self.summary = SummaryBuilder(cfg.percentile_metrics, cfg.metric_percentiles, cfg.goodput)
        self.client = ClientLatency()
        self.details = DetailLists() if details else None
        self.reasons: Counter[str] = Counter()
        self.sources: Counter[str] = Counter()  # where successful requests' output counts came from
        self.in_sources: Counter[str | None] = Counter()  # where their prompt lengths came from
        self.not_sent = 0
        self.cooled = 0
        self.ends: float | None = None
        self.one_read = 0  # successful requests of more than one token whose every gap is 0
        self.streamed_multi = 0  # successful requests of more than one token

    @property
    def last_end(self) -> float:
        """When the last sent request ended (0 when none was sent)."""
        return self.ends if self.ends is not None else 0.0

    def add(self, rec: dict) -> None:
        if not rec["ok"]:
            self.reasons[reason_key(rec["err"])] += 1
        if rec.get("sent") is None:
            self.not_sent += 1
            return
        end = rec["end"]
        self.ends = end if self.ends is None else max(self.ends, end)
        if self.until is not None and rec["ok"] and end > self.until:
            self.cooled += 1
            return
        n = 0
        if rec["ok"]:
            n, src = resolve_output_len(rec, self.tok)
            self.sources[src] += 1
            self.in_sources[rec.get("in_src")] += 1
        r = derive(rec, n)
        self.summary.add(r)
        self.client.add(r)
        if r.ok and r.output_len > 1:
            self.streamed_multi += 1
            if not any(r.itl_s):
                self.one_read += 1
        if self.details is not None:
            self.details.add(rec, r, n)


class DetailLists:
    """The per-request detail lists (vLLM's), in request order once done."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []

    def add(self, rec: dict, r: MeasuredRequest, output_len: int) -> None:
        self.rows.append(
            (
                rec["i"],
                r.prompt_len,
                output_len,
                r.ttft_s,
                r.itl_s,
                r.e2el_s,
                r.start_s,
                rec.get("text", ""),
                rec["err"] or "",
            )
        )

    def result(self) -> R.RequestDetails:
        rows = sorted(self.rows, key=lambda row: row[0])
        columns = list(zip(*rows, strict=True)) if rows else [()] * 9
        return R.RequestDetails(
            input_lens=list(columns[1]),
            output_lens=list(columns[2]),
            ttfts=list(columns[3]),
            itls=list(columns[4]),
            latencies=list(columns[5]),
            start_times=list(columns[6]),
            generated_texts=list(columns[7]),
            errors=list(columns[8]),
        )
