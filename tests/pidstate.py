"""Whether a process still runs, as the process tests ask it: one read of its state, a zombie counted as
gone."""

import os


def running(pid: int) -> bool:
    """The process exists and has not exited (an exited child of a killed parent lingers as a zombie until
    init reaps it). One read of its stat: init may reap it between any two looks, and a look that finds it
    gone after one that found it must not count it as running."""
    if not os.path.isdir("/proc"):  # not Linux: a zombie counts as running
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # reaped, before or while it was read
        return False
