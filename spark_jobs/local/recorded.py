"""A process this machine starts in the background and records by pid (the broker, the catalog,
the SQL endpoint): started detached with its output in a log, stopped with SIGTERM for a clean
stop, SIGKILL if it outlives the wait."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from spark_jobs.errors import SigflowError
from spark_jobs.runtime.waiting import wait_until


class Recorded(Protocol):
    pid: int

    @property
    def alive(self) -> bool: ...


def launch(argv: list[str], log_file: Path, ready: Callable[[], bool], timeout_s: float, what: str,
           cwd: Path | None = None) -> subprocess.Popen:
    """Start ``argv`` detached (it survives the CLI that started it), its output appended to
    ``log_file``, and wait until ``ready``; a process that exits or is not ready in time is
    killed and reported."""
    with open(log_file, "ab") as out:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    if not wait_until(ready, timeout_s=timeout_s, every_s=0.2, give_up=lambda: proc.poll() is not None):
        proc.kill()
        raise SigflowError(f"{what} did not start within {timeout_s:g}s", f"see {log_file}")
    return proc


def stop(info: Recorded | None, state_file: Path, timeout_s: float) -> bool:
    """Stop the recorded process and forget it. False when none was running."""
    state_file.unlink(missing_ok=True)
    if info is None:
        return False
    terminate(info.pid, lambda: info.alive, timeout_s)
    return True


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
