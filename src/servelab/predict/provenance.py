"""How much of a prediction rests on what: the share of its kernel time by source (measured, interpolated,
extrapolated, calibrated, transferred, roofline), and the one line that warns when the roofline alone prices
more than a fifth of it."""

from servelab.perfdb.latency import SOURCES

ROOFLINE_WARN_SHARE = 0.2


def time_shares(source_us: dict[str, float]) -> dict[str, float]:
    """Each source's share of the kernel time, in SOURCES order, rounded to 0.01 % (summing to 1)."""
    total = sum(v for v in source_us.values() if v > 0)
    if total <= 0:
        return {}
    order = {s: i for i, s in enumerate(SOURCES)}
    return {
        s: round(v / total, 4)
        for s, v in sorted(source_us.items(), key=lambda kv: order.get(kv[0], len(order)))
        if v > 0
    }


def describe_shares(shares: dict[str, float]) -> str:
    """`measured 61.9 %, roofline 38.1 %`."""
    return ", ".join(f"{s} {100 * v:.1f} %" for s, v in shares.items()) or "no kernel time"


def roofline_warning(shares: dict[str, float]) -> str | None:
    """One line when more than ROOFLINE_WARN_SHARE of the kernel time is the roofline's alone."""
    share = shares.get("roofline", 0.0)
    if share <= ROOFLINE_WARN_SHARE:
        return None
    return (
        f"warning: {100 * share:.0f} % of the kernel time is priced by the roofline alone (no table "
        "measured on any system answers those ops), so the prediction is as good as the roofline's "
        "efficiencies (`servelab db status` lists the tables there are)"
    )
