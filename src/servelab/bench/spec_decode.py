"""Speculative-decoding acceptance over a run, as `vllm bench serve` reports it: the server's
`vllm:spec_decode_*` Prometheus counters read before the run (after the warm-ups) and after it, and the
result fields vLLM writes from what the run added (vllm/benchmarks/serve.py: spec_decode_acceptance_rate,
_acceptance_length, _num_drafts, _draft_tokens, _accepted_tokens, _per_position_acceptance_rates). A server
that reports no such counters (no speculative decoding, or not vLLM) adds no fields, as in vLLM.

The counters are read as vLLM reads them: every sample of a `vllm:spec_decode*_total` name, summed over its
labels (engines, DP ranks) and over every page (--server-metrics-url, default BASE_URL/metrics); the
per-position counter by its `position` label.
"""

from __future__ import annotations

import re
import urllib.request
from dataclasses import dataclass, field

MAX_METRICS_BYTES = 64 << 20
TIMEOUT_S = 10.0
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_POSITION = re.compile(r'position="(\d+)"')


@dataclass
class SpecCounters:
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: dict[int, int] = field(default_factory=dict)


def parse(text: str) -> SpecCounters | None:
    """The spec-decode counters of one /metrics page, or None when it has none."""
    out, found = SpecCounters(), False
    for line in text.splitlines():
        m = _SAMPLE.match(line.strip())
        if m is None or not m.group(1).startswith("vllm:spec_decode") or not m.group(1).endswith("_total"):
            continue
        name = m.group(1)
        found = True
        try:
            value = int(float(m.group(3)))
        except ValueError:
            continue
        if "num_drafts" in name:
            out.num_drafts += value
        elif "num_draft_tokens" in name:
            out.num_draft_tokens += value
        elif "num_accepted_tokens_per_pos" in name:
            pos = _POSITION.search(m.group(2) or "")
            if pos is not None:
                p = int(pos.group(1))
                out.accepted_per_pos[p] = out.accepted_per_pos.get(p, 0) + value
        elif "num_accepted_tokens" in name:
            out.num_accepted_tokens += value
    return out if found else None


def read(urls: list[str], headers: dict[str, str] | None = None) -> SpecCounters | None:
    """The counters of every page added up, asked with `headers` (the run's auth); None when a page cannot
    be read or none has them (the run goes on: these fields are extra)."""
    total, found = SpecCounters(), False
    for url in urls:
        try:
            req = urllib.request.Request(url, headers=headers or {})
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
                text = r.read(MAX_METRICS_BYTES).decode(errors="replace")
        except Exception:  # network errors come in many types; a server without /metrics adds no fields
            return None
        page = parse(text)
        if page is None:
            continue
        found = True
        total.num_drafts += page.num_drafts
        total.num_draft_tokens += page.num_draft_tokens
        total.num_accepted_tokens += page.num_accepted_tokens
        for p, n in page.accepted_per_pos.items():
            total.accepted_per_pos[p] = total.accepted_per_pos.get(p, 0) + n
    return total if found else None


def result_fields(before: SpecCounters | None, after: SpecCounters | None) -> dict:
    """vLLM's spec_decode_* result fields from what the run added; {} when the counters were not read both
    times or no draft token was proposed."""
    if before is None or after is None:
        return {}
    drafts = after.num_drafts - before.num_drafts
    draft_tokens = after.num_draft_tokens - before.num_draft_tokens
    accepted = after.num_accepted_tokens - before.num_accepted_tokens
    if draft_tokens <= 0:
        return {}
    per_pos = []
    if drafts > 0:
        for p in sorted(set(before.accepted_per_pos) | set(after.accepted_per_pos)):
            b = before.accepted_per_pos.get(p, 0)
            per_pos.append((after.accepted_per_pos.get(p, b) - b) / drafts)
    return {
        "spec_decode_acceptance_rate": accepted / draft_tokens * 100,
        "spec_decode_acceptance_length": 1 + accepted / drafts if drafts > 0 else 0.0,
        "spec_decode_num_drafts": drafts,
        "spec_decode_draft_tokens": draft_tokens,
        "spec_decode_accepted_tokens": accepted,
        "spec_decode_per_position_acceptance_rates": per_pos,
    }
