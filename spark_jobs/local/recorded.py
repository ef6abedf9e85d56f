"""Stopping a process this machine started and recorded by pid (the broker, the catalog, the
SQL endpoint): SIGTERM for a clean stop, SIGKILL if it outlives the wait."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

from spark_jobs.runtime.waiting import wait_until


def terminate(pid: int, alive: Callable[[], bool], timeout_s: float) -> None:
    """Stop ``pid``: SIGTERM, then SIGKILL past ``timeout_s``; reaped when it is our child."""
    os.kill(pid, signal.SIGTERM)
    if not wait_until(lambda: not alive(), timeout_s=timeout_s, every_s=0.1):
        os.kill(pid, signal.SIGKILL)
    reap(pid)


def reap(pid: int) -> None:
    try:  # reap it if this process is its parent (tests start and stop in one process)
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
