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

import numpy as np

from servelab.metrics import Distribution, RequestTimes, e2el, itl, tpot, ttft
from servelab.metrics.streaming import Series

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


CLIENT_SERIES = ("ttft_from_scheduled", "e2el_from_scheduled", "client_send_lag", "client_queue_time")


class ClientLatency:
    """servelab extras: latency from the scheduled time, the client's own lag, client-side queueing; each a
    distribution in ms over the successful requests, with the chosen percentiles and always p99. Requests are
    added one at a time (8 bytes a request per series)."""

    def __init__(self) -> None:
        self.series = {name: Series() for name in CLIENT_SERIES}

    def add(self, r: MeasuredRequest) -> None:
        if not r.ok:
            return
        s = self.series
        s["ttft_from_scheduled"].add(r.ttft_from_sched_s)
        s["e2el_from_scheduled"].add(r.e2el_from_sched_s)
        s["client_send_lag"].add(r.client_lag_s)
        s["client_queue_time"].add(r.queue_wait_s)

    def send_lags_s(self) -> np.ndarray:
        """The client's own lag of each successful request, in the order they were added."""
        return self.series["client_send_lag"].array()

    def distributions_ms(self, percentiles: Sequence[float]) -> dict[str, Distribution]:
        pcts = sorted(set(percentiles) | {99.0})
        return {name: series.distribution_ms(pcts) for name, series in self.series.items()}
