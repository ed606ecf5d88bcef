"""`servelab sweep` (placeholder until its issue lands)."""


def sweep() -> None:
    """Not built yet."""
    raise SystemExit("servelab sweep is not built yet")
