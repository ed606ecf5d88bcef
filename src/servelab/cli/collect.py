"""`servelab collect` (placeholder until its issue lands)."""


def collect() -> None:
    """Not built yet."""
    raise SystemExit("servelab collect is not built yet")
