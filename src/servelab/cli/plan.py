"""`servelab plan` (placeholder until its issue lands)."""


def plan() -> None:
    """Not built yet."""
    raise SystemExit("servelab plan is not built yet")
