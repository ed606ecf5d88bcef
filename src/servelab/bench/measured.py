"""Per-request metrics of a measured run, derived from its raw records (records.py), plus servelab's
client-timing extras.

The definitions (TTFT, TPOT, ITL, E2EL) and the run summary are servelab.metrics', shared with the simulator;
a record's `sent` is the start. Its content events are integer microseconds after `sent`: latencies are taken
in microseconds and converted once, so they carry no rounding of the run's clock.
The extras: the same latencies measured from the *scheduled* send time (coordinated omission), the client's
own lag (sent - max(sched, slot)) and client-side queueing (slot - sched).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servelab.metrics import Distribution, RequestTimes, distribution_ms, e2el, itl, tpot, ttft

US = 1e6  # microseconds per second


@dataclass
class MeasuredRequest(RequestTimes):
    """RequestTimes of one sent request plus the client-timing extras, in seconds."""

    ttft_from_sched_s: float = 0.0
    e2el_from_sched_s: float = 0.0
    client_lag_s: float = 0.0
    queue_wait_s: float = 0.0


def derive(record: dict, output_len: int) -> MeasuredRequest:
    """One record -> MeasuredRequest. `output_len` is already resolved (usage, else tokenizer)."""
    prompt_len = int(record.get("in") or 0)
    if not record.get("ok"):
        return MeasuredRequest(ok=False, prompt_len=prompt_len, output_len=0)
    chunks_us = record["chunks"]
    sent = record["sent"]
    ttft_s = ttft(0, chunks_us[0]) / US
    e2el_s = e2el(0, chunks_us[-1]) / US
    sched = record.get("sched", sent)
    slot = record.get("slot", sched)
    return MeasuredRequest(
        ok=True,
        prompt_len=prompt_len,
        output_len=output_len,
        start_s=sent,
        ttft_s=ttft_s,
        e2el_s=e2el_s,
        itl_s=[gap / US for gap in itl(chunks_us)],
        tpot_s=tpot(ttft_s, e2el_s, output_len),
        event_times_s=[sent + c / US for c in chunks_us],
        ttft_from_sched_s=sent + ttft_s - sched,
        e2el_from_sched_s=sent + e2el_s - sched,
        client_lag_s=sent - max(sched, slot),
        queue_wait_s=max(0.0, slot - sched),
    )


def client_latency_ms(
    reqs: Sequence[MeasuredRequest], percentiles: Sequence[float]
) -> dict[str, Distribution]:
    """servelab extras: latency from the scheduled time, the client's own lag, client-side queueing; each a
    distribution in ms over the successful requests, with the chosen percentiles and always p99."""
    ok = [r for r in reqs if r.ok]
    pcts = sorted(set(percentiles) | {99.0})
    return {
        "ttft_from_scheduled": distribution_ms([r.ttft_from_sched_s for r in ok], pcts),
        "e2el_from_scheduled": distribution_ms([r.e2el_from_sched_s for r in ok], pcts),
        "client_send_lag": distribution_ms([r.client_lag_s for r in ok], pcts),
        "client_queue_time": distribution_ms([r.queue_wait_s for r in ok], pcts),
    }
