"""vLLM's bare `--profile`: the server's torch profiler started after the warm-ups (POST
BASE_URL/start_profile) and stopped after the run (POST BASE_URL/stop_profile), as `vllm bench serve` does;
the server writes the trace where its --profiler-config says. A server that refuses (started without a
profiler) gets a note on stderr, and the run goes on, as in vLLM."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

TIMEOUT_S = 600.0  # stopping writes the trace, which takes a while on a big run


def post(base_url: str, action: str, headers: dict[str, str]) -> bool:
    """POST BASE_URL/{action} (start_profile or stop_profile); True when the server answered 2xx."""
    req = urllib.request.Request(
        f"{base_url}/{action}", data=b"{}", headers={**headers, "Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S):
            return True
    except urllib.error.HTTPError as e:
        why = f"HTTP {e.code}"
    except (OSError, ValueError) as e:
        why = str(getattr(e, "reason", e))
    print(f"note: --profile: {base_url}/{action} failed ({why})", file=sys.stderr)
    return False
