"""GuideLLM's benchmark profiles as `servelab bench` runs them (`--profile NAME`): each is a name for a
combination of vLLM's load flags, so a GuideLLM user's words give the same run a `vllm bench serve` user would
type out. GuideLLM's `--rate` is `--request-rate` for the rate profiles and `--max-concurrency` for
`concurrent`.

    synchronous  one request at a time                       --max-concurrency 1 (closed loop)
    throughput   every request at once (within the limit)    closed loop, --max-concurrency or unbounded
    concurrent   N streams                                    --max-concurrency N (closed loop)
    constant     evenly spaced arrivals at R req/s            --request-rate R --burstiness inf
    poisson      Poisson arrivals at R req/s                  --request-rate R --burstiness 1
    sweep        synchronous, saturation, rates between       --request-rate sweep
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

Profile = Literal["synchronous", "throughput", "concurrent", "constant", "poisson", "sweep"]
PROFILES: tuple[str, ...] = get_args(Profile)
DEFAULT_BURSTINESS = 1.0


@dataclass(frozen=True)
class Load:
    """The load flags a profile sets: --max-concurrency, --request-rate (as typed: a number, a list, inf or
    sweep; None: not given) and --burstiness."""

    max_concurrency: str | None
    request_rate: str | None
    burstiness: float


def _rates(text: str | None) -> bool:
    """Whether `text` is one rate or a comma list of them, each a finite number of req/s."""
    try:
        rates = [float(part) for part in (text or "").split(",") if part.strip()]
    except ValueError:
        return False
    return bool(rates) and all(r > 0 and math.isfinite(r) for r in rates)


def apply_profile(profile: str | None, load: Load) -> Load:
    """The load flags of `profile` with the ones given; a ValueError when the flags given contradict it."""
    if profile is None:
        return load
    if profile not in PROFILES:
        raise ValueError(f"--profile {profile!r}: expected one of {', '.join(PROFILES)}")
    rate, conc = load.request_rate, load.max_concurrency
    if profile in ("synchronous", "throughput", "concurrent"):
        if rate is not None and rate.strip().lower() != "inf":
            raise ValueError(f"--profile {profile} is a closed loop: no --request-rate")
        if profile == "synchronous":
            if conc not in (None, "1"):
                raise ValueError("--profile synchronous sends one request at a time: no --max-concurrency")
            return Load("1", None, load.burstiness)
        if profile == "concurrent" and conc is None:
            raise ValueError("--profile concurrent needs --max-concurrency N (GuideLLM's --rate N)")
        return Load(conc, None, load.burstiness)
    if profile == "sweep":
        if rate is not None and rate.strip().lower() != "sweep":
            raise ValueError("--profile sweep chooses its own rates: no --request-rate")
        return Load(conc, "sweep", load.burstiness)
    if not _rates(rate):
        raise ValueError(
            f"--profile {profile} needs --request-rate R (req/s, or a comma list; GuideLLM's --rate), not inf"
        )
    wanted = math.inf if profile == "constant" else 1.0
    if load.burstiness not in (DEFAULT_BURSTINESS, wanted):
        raise ValueError(f"--profile {profile} sets the arrivals: no --burstiness")
    return Load(conc, rate, wanted)
