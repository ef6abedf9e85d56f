"""Named crash points for fault tests: ``SIGFLOW_FAILPOINTS=after_delta_commit:2`` makes the
process SIGKILL itself when batch 2 of any job reaches that point, and
``sessions/after_delta_commit:2`` only when the job is ``sessions`` (a ``sigflow pipeline``
runs several jobs in one process). Unset in normal operation, where ``hit`` is a
dictionary lookup."""

from __future__ import annotations

import os
import signal

POINTS = ("before_delta_commit", "between_tables", "after_delta_commit")


def _armed() -> dict[tuple[str, str], int]:
    armed = {}
    for item in filter(None, os.environ.get("SIGFLOW_FAILPOINTS", "").split(",")):
        where, _, batch = item.partition(":")
        job, _, point = where.strip().rpartition("/")
        armed[(job, point)] = int(batch or 0)
    return armed


_ARMED = _armed()


def hit(point: str, batch_id: int, job: str) -> None:
    if batch_id in (_ARMED.get(("", point)), _ARMED.get((job, point))):
        os.kill(os.getpid(), signal.SIGKILL)
