"""The server launch of a run against the flags its engine release accepts (servelab.engines.releases),
checked before a server starts: a flag the release would refuse costs a GPU start-up otherwise."""

from __future__ import annotations

from servelab.engines.releases import LaunchCheck, check_launch, engine_of_command
from servelab.errors import ServelabError
from servelab.recipes.yamlio import load_yaml
from servelab.run.plan import ServerPlan

OPTIONS_SUFFIXES = (".yml", ".yaml")


def check_server(server: ServerPlan) -> LaunchCheck | None:
    """The check's result (None when the command starts no engine servelab knows); raises one line naming
    each flag the release refuses."""
    engine = engine_of_command(server.argv)
    if engine is None:
        return None
    files = {k: load_yaml(v, k) for k, v in server.files.items() if k.endswith(OPTIONS_SUFFIXES)}
    check = check_launch(engine, server.image, server.argv, files)
    if check.errors:
        raise ServelabError(f"the server launch would not start: {'; '.join(check.errors)}")
    return check


def check_summary(check: LaunchCheck | None) -> dict | None:
    """What --dry-run shows of the check."""
    if check is None:
        return None
    return {"release": check.release, "note": check.note, "warnings": check.warnings}
