"""The server's prefix-cache hit rate over a run, from its Prometheus counters read before and after (the
counters InferenceX's agentic aggregation reads, utils/agentic/aggregation/backends/):

- vLLM (v1/metrics/loggers.py): `vllm:prefix_cache_queries` and `vllm:prefix_cache_hits` (prompt tokens
  looked up in, and found in, the GPU prefix cache), `vllm:external_prefix_cache_queries` / `_hits` (a KV
  connector's cache: CPU offload, LMCache, Mooncake), `vllm:prompt_tokens_by_source` (local_compute,
  local_cache_hit, external_kv_transfer);
- SGLang: `sglang:cached_tokens` (by cache_source: device, host) over `sglang:prompt_tokens`.

Counters are summed over their labels (engines, DP ranks) and over every URL given (one per server of a
deployment). A counter prometheus_client writes as NAME_total is read as NAME.
"""

from __future__ import annotations

import re
import urllib.request

MAX_METRICS_BYTES = 64 << 20
TIMEOUT_S = 10.0
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_SOURCE = re.compile(r'(?:^|[{,])\s*(source|cache_source)="([^"]*)"')
# names read, and older spellings (vLLM before v0.10 named the GPU counters gpu_prefix_cache_*)
COUNTERS = {
    "vllm:prefix_cache_queries": "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits": "vllm:prefix_cache_hits",
    "vllm:gpu_prefix_cache_queries": "vllm:prefix_cache_queries",
    "vllm:gpu_prefix_cache_hits": "vllm:prefix_cache_hits",
    "vllm:external_prefix_cache_queries": "vllm:external_prefix_cache_queries",
    "vllm:external_prefix_cache_hits": "vllm:external_prefix_cache_hits",
    "vllm:prompt_tokens_by_source": "vllm:prompt_tokens_by_source",
    "sglang:cached_tokens": "sglang:cached_tokens",
    "sglang:prompt_tokens": "sglang:prompt_tokens",
}


def parse_counters(text: str) -> dict[str, float]:
    """The counters named in COUNTERS from a /metrics page, summed over labels; those counted by source also
    as NAME[source]."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        name = m.group(1).removesuffix("_total")
        canonical = COUNTERS.get(name)
        if canonical is None:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out[canonical] = out.get(canonical, 0.0) + value
        src = _SOURCE.search(m.group(2) or "")
        if src is not None:
            key = f"{canonical}[{src.group(2)}]"
            out[key] = out.get(key, 0.0) + value
    return out


def scrape(urls: list[str]) -> tuple[dict[str, float] | None, str | None]:
    """The counters of every URL added up, or (None, why) when one cannot be read."""
    total: dict[str, float] = {}
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r:
                text = r.read(MAX_METRICS_BYTES).decode(errors="replace")
        except Exception as e:  # network errors come in many types; the result says which in one line
            return None, f"{url}: {type(e).__name__}: {e}"
        for name, value in parse_counters(text).items():
            total[name] = total.get(name, 0.0) + value
    return total, None


def _rate(hits: float | None, queries: float | None) -> float | None:
    return hits / queries if hits is not None and queries else None


def hit_rates(before: dict[str, float], after: dict[str, float]) -> dict:
    """What the run added to the counters, as the result's `server` prefix-cache section."""
    delta = {k: after[k] - before.get(k, 0.0) for k in after}
    if "vllm:prefix_cache_queries" in delta:
        queries, hits = delta["vllm:prefix_cache_queries"], delta.get("vllm:prefix_cache_hits")
        ext_q = delta.get("vllm:external_prefix_cache_queries")
        ext_h = delta.get("vllm:external_prefix_cache_hits")
        by_source = _by_source(delta, "vllm:prompt_tokens_by_source")
        return {
            "engine": "vllm",
            "queries": queries,
            "hits": hits,
            "hit_rate": _rate(hits, queries),
            "external_queries": ext_q,
            "external_hits": ext_h,
            "external_hit_rate": _rate(ext_h, ext_q),
            "prompt_tokens_by_source": by_source or None,
        }
    if "sglang:prompt_tokens" in delta:
        queries = delta["sglang:prompt_tokens"]
        by_source = _by_source(delta, "sglang:cached_tokens")
        hits = delta.get("sglang:cached_tokens")
        host = by_source.get("host")
        return {
            "engine": "sglang",
            "queries": queries,
            "hits": hits,
            "hit_rate": _rate(hits, queries),
            "external_queries": queries if host is not None else None,
            "external_hits": host,
            "external_hit_rate": _rate(host, queries),
            "prompt_tokens_by_source": by_source or None,
        }
    return {"engine": None, "error": "no prefix-cache counters (vllm:prefix_cache_*, sglang:cached_tokens)"}


def _by_source(delta: dict[str, float], name: str) -> dict[str, float]:
    prefix = name + "["
    return {k[len(prefix) : -1]: v for k, v in delta.items() if k.startswith(prefix)}
