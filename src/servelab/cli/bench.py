"""`servelab bench` (placeholder until its issue lands)."""


def bench() -> None:
    """Not built yet."""
    raise SystemExit("servelab bench is not built yet")
