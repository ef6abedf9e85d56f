"""A process recorded by pid (a run holding a lease, the embedded broker, the local
cluster's daemons) is recognised again only if it is the same process: pids are reused, so
a record keeps the process's start time, and the process must still run what was started.

The start time is the kernel's: clock ticks from boot to the process's start
(``/proc/<pid>/stat``), in seconds. psutil's ``create_time()`` adds the boot time to it,
which the kernel derives from the wall clock, so a clock step moves it
(docs/streaming-facts.md, "Recognising a process by pid").
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# A start time above this is in the epoch form psutil gives, written by earlier versions.
_EPOCH_FORM = 1e9


def start_time(pid: int) -> float:
    """Seconds from boot to the process's start; raises psutil.NoSuchProcess once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        raise psutil.NoSuchProcess(pid) from None
    # fields after the command name, which is in parentheses and may hold spaces: the
    # start time is field 22, the 20th after it
    return int(stat.rsplit(")", 1)[1].split()[19]) / _TICKS_PER_S


def is_recorded_process(pid: int, started: float | None, main_class: str) -> bool:
    """Whether ``pid`` is still the JVM that was recorded: started at ``started`` (records
    written before start times were kept have None) and running ``main_class``. Read from
    /proc directly: psutil's own check that a pid was not reused compares epoch start times,
    which a clock step moves."""
    try:
        if started is not None and not started_as_recorded(pid, started):
            return False
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, psutil.Error):
        return False
    return main_class.encode() in args  # a zombie's command line is empty


def started_as_recorded(pid: int, recorded: float) -> bool:
    """Whether ``pid`` started when ``recorded`` says (ticks since boot, or the epoch form)."""
    if recorded > _EPOCH_FORM:
        return abs(psutil.Process(pid).create_time() - recorded) < 1.0
    return abs(start_time(pid) - recorded) < 0.5 / _TICKS_PER_S
