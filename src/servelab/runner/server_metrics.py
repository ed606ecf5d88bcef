"""A server's Prometheus /metrics, read as sums: what engines count about themselves (requests, tokens, the
time spent queued and in prefill), to compare with what a client or a simulator saw."""

import urllib.request


def metric_sums(base_url: str, prefix: str = "vllm:") -> dict[str, float]:
    """Every `prefix`* sample on the server's /metrics, summed over its labels (histograms as name_sum and
    name_count)."""
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as r:
        return sums_of(r.read().decode(), prefix)


def sums_of(text: str, prefix: str = "vllm:") -> dict[str, float]:
    """metric_sums of a /metrics page already read (a saved copy, say)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out
