"""The watchdog of a started server: a small process that outlives servelab, so that a server is torn down
even when servelab cannot do it (SIGKILL, an out-of-memory kill, a crash of the interpreter).

    python -m servelab.runner.watchdog PGID STOP_TIMEOUT_S [-- CLEANUP ARGV...]

It waits on its stdin, a pipe whose other end only servelab holds. servelab writes `done` once it has stopped
the server itself; the pipe closing without it means servelab is gone: the watchdog sends SIGTERM to the
server's process group, SIGKILL to what is left after STOP_TIMEOUT_S, runs the cleanup command (`docker rm -f
NAME` for a container), and exits. It runs in a session of its own and ignores the terminal's signals, so a
Ctrl-C meant for servelab does not take it away first.
"""

from __future__ import annotations

import signal
import subprocess
import sys

from servelab.runner.server import signal_group, wait_group_gone

DONE = b"done"
CLEANUP_TIMEOUT_S = 60


def main(argv: list[str]) -> int:
    for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)
    pgid, stop_timeout_s = int(argv[0]), float(argv[1])
    cleanup = argv[3:] if len(argv) > 2 and argv[2] == "--" else []
    said = sys.stdin.buffer.read()  # returns at end of file: servelab said done, or it is gone
    if said.strip() == DONE:
        return 0
    signal_group(pgid, signal.SIGTERM)
    wait_group_gone(pgid, stop_timeout_s)
    signal_group(pgid, signal.SIGKILL)
    if cleanup:
        try:
            subprocess.run(cleanup, capture_output=True, timeout=CLEANUP_TIMEOUT_S, check=False)
        except (OSError, subprocess.SubprocessError):
            pass  # nothing more a watchdog can do
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
