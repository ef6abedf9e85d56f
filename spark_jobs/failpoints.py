"""Named crash points for fault tests: ``SIGFLOW_FAILPOINTS=after_delta_commit:2`` makes the
process SIGKILL itself when batch 2 reaches that point. Unset in normal operation, where
``hit`` is a dictionary lookup."""

from __future__ import annotations

import os
import signal

POINTS = ("before_delta_commit", "between_tables", "after_delta_commit")


def _armed() -> dict[str, int]:
    armed = {}
    for item in filter(None, os.environ.get("SIGFLOW_FAILPOINTS", "").split(",")):
        name, _, batch = item.partition(":")
        armed[name.strip()] = int(batch or 0)
    return armed


_ARMED = _armed()


def hit(point: str, batch_id: int) -> None:
    if _ARMED.get(point) == batch_id:
        os.kill(os.getpid(), signal.SIGKILL)
