"""A process recorded by pid (the embedded broker, the local cluster's daemons) is recognised
again only if it is the same process: pids are reused, so a record keeps the process's start
time, and the process must still run what was started."""

from __future__ import annotations

import psutil


def start_time(pid: int) -> float:
    return psutil.Process(pid).create_time()


def is_recorded_process(pid: int, started: float | None, main_class: str) -> bool:
    """Whether ``pid`` is still the JVM that was recorded: alive (not a zombie), started at
    ``started`` (records written before start times were kept have None), and running
    ``main_class``."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        if started is not None and abs(process.create_time() - started) >= 1.0:
            return False
        return main_class in process.cmdline()
    except psutil.Error:
        return False
