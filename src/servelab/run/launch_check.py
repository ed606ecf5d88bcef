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
    each flag the release refuses. A deployment has every process checked (a router's command is no
    engine's); the first engine server's check is returned."""
    files = {k: load_yaml(v, k) for k, v in server.files.items() if k.endswith(OPTIONS_SUFFIXES)}
    first = None
    for name, argv in [(p.name, p.argv) for p in server.processes] or [("server", server.argv)]:
        engine = engine_of_command(argv)
        if engine is None:
            continue
        check = check_launch(engine, server.image, argv, files)
        if check.errors:
            where = "the server launch" if name == "server" else f"{name} of the deployment"
            raise ServelabError(f"{where} would not start: {'; '.join(check.errors)}")
        first = first or check
    return first


def check_summary(check: LaunchCheck | None) -> dict | None:
    """What --dry-run shows of the check."""
    if check is None:
        return None
    return {"release": check.release, "note": check.note, "warnings": check.warnings}
