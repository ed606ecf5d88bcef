"""A real PostgreSQL server for the tests of the shared results store: initdb in a fresh folder, a server on a
free local port (its unix socket in that folder too), stopped and removed at the end.

The binaries are found on PATH, else where Debian's `postgresql` package puts them
(/usr/lib/postgresql/<version>/bin, off PATH); without them the tests skip and say so. initdb and pg_ctl
refuse to run as root: as root (a CI machine, a container) they run as the `postgres` user that Debian's
package creates (else `nobody`) through `runuser`, in a folder given to that user.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SUPERUSER = "servelab"
TOOLS = ("initdb", "pg_ctl", "postgres")


def binaries() -> Path | None:
    """The folder with initdb, pg_ctl and postgres: PATH's, else the newest of Debian's."""
    on_path = shutil.which("initdb")
    if on_path:
        folder = Path(os.path.realpath(on_path)).parent
        if all((folder / t).exists() for t in TOOLS):
            return folder
    versions = []
    for folder in Path("/usr/lib/postgresql").glob("*/bin"):
        m = re.fullmatch(r"\d+(\.\d+)?", folder.parent.name)
        if m and all((folder / t).exists() for t in TOOLS):
            versions.append((float(folder.parent.name), folder))
    return max(versions)[1] if versions else None


def _as_user() -> tuple[list[str], str | None]:
    """The prefix that runs a command as a user PostgreSQL accepts, and that user (None: this one)."""
    if os.geteuid() != 0:
        return [], None
    runuser = shutil.which("runuser")
    for user in ("postgres", "nobody"):
        try:
            pwd.getpwnam(user)
        except KeyError:
            continue
        if runuser:
            return [runuser, "-u", user, "--"], user
    raise RuntimeError("running as root without runuser or a postgres/nobody user: PostgreSQL cannot start")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    bin: Path
    folder: Path  # the data folder, the log and the unix socket
    port: int
    prefix: list[str]

    @classmethod
    def start(cls, bin: Path) -> Server:
        prefix, user = _as_user()
        # under /tmp, whatever TMPDIR says: the server's user must reach it, and a socket path has ~100 bytes
        folder = Path(tempfile.mkdtemp(prefix="servelab-pg-", dir="/tmp" if Path("/tmp").is_dir() else None))
        if user:
            pw = pwd.getpwnam(user)
            os.chown(folder, pw.pw_uid, pw.pw_gid)
        server = cls(bin, folder, free_port(), prefix)
        try:
            server._run(
                "initdb", "-D", str(folder / "data"), "-U", SUPERUSER, "--auth=trust", "--encoding=UTF8",
                "--no-locale", "--no-sync",
            )  # fmt: skip
            options = (
                f"-c listen_addresses=127.0.0.1 -c port={server.port} -c unix_socket_directories={folder} "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=40"
            )
            server._run(
                "pg_ctl", "-D", str(folder / "data"), "-l", str(folder / "server.log"), "-w", "-t", "60",
                "-o", options, "start",
            )  # fmt: skip
        except BaseException:
            server.remove()
            raise
        return server

    def _run(self, tool: str, *args: str) -> None:
        r = subprocess.run(
            [*self.prefix, str(self.bin / tool), *args], capture_output=True, text=True, timeout=120
        )
        if r.returncode != 0:
            log = self.folder / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{tool} failed ({r.returncode}): {r.stderr.strip()}\n{tail}")

    def url(self, database: str = "postgres", password: str | None = None) -> str:
        user = SUPERUSER + (f":{password}" if password is not None else "")
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.folder / "data"), "-m", "immediate", "-w", "stop")
        finally:
            self.remove()

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
