"""vLLM's --ready-check-timeout-sec: before the run, wait until the server answers, up to that many seconds
(vLLM repeats its test request until one succeeds; servelab asks GET /v1/models, then sends its one ready
request as usual)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

from servelab.bench.config import BenchConfig
from servelab.bench.payload import api_key_from_env, auth_headers
from servelab.errors import ServelabError

POLL_S = 0.5


def wait_for_server(cfg: BenchConfig, clock=time.monotonic, sleep=time.sleep) -> float:
    """Block until BASE_URL/v1/models answers 200, or raise after cfg.ready_check_timeout_sec seconds;
    returns the seconds waited. Nothing to wait for when the option is unset or 0."""
    limit = cfg.ready_check_timeout_sec
    if not limit:
        return 0.0
    headers = dict(auth_headers(api_key_from_env(), cfg.basic_auth, cfg.headers))
    url = cfg.base_url + "/v1/models"
    start = clock()
    last = "no answer"
    while True:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=POLL_S * 4):
                return clock() - start
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code}"
        except (OSError, ValueError) as e:
            last = str(getattr(e, "reason", e))
        if clock() - start >= limit:
            raise ServelabError(
                f"the server at {cfg.base_url} did not answer within {limit} s ({last})",
                field="ready_check_timeout_sec",
            )
        sleep(POLL_S)
