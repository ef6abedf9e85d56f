"""Named crash points for fault tests: ``SIGFLOW_FAILPOINTS=after_delta_commit:2`` makes the
process SIGKILL itself when batch 2 of any job reaches that point, and
``sessions/after_delta_commit:2`` only when the job is ``sessions`` (a ``sigflow pipeline``
runs several jobs in one process). A point ending in ``@jvm`` halts the driver's JVM
instead and leaves the Python process running, as a JVM that ran out of memory does
(``-XX:+ExitOnOutOfMemoryError``); one ending in ``@pause`` holds the batch there for
``PAUSE_S`` seconds after saying so on stderr, so a test can signal a run at that exact
point; one ending in ``@raise`` fails the batch with an error, once per process (the query
fails, the process goes on). Unset in normal operation, where ``hit`` is a dictionary lookup."""

from __future__ import annotations

import os
import signal
import sys
import time

from spark_jobs.config import armed_failpoints

POINTS = ("before_delta_commit", "between_tables", "after_delta_commit")  # a batch's points
# and a restart's: ``ingest/after_restart_step:1`` kills its apply after its first change;
# and reconcile's: ``sessions/reconcile_after_corrections:0`` kills it between its
# corrections of a job's tables and its record of them
PAUSE_S = 5.0


def _armed() -> dict[tuple[str, str], tuple[int, str]]:
    armed = {}
    for item in filter(None, armed_failpoints().split(",")):
        where, _, batch = item.partition(":")
        batch, _, victim = batch.partition("@")
        job, _, point = where.strip().rpartition("/")
        armed[(job, point)] = (int(batch or 0), victim or "process")
    return armed


_ARMED = _armed()
_RAISED: set[tuple[str, str]] = set()  # the @raise points that fired in this process


class FailpointError(RuntimeError):
    """A batch failed at an armed ``@raise`` point."""


def hit(point: str, batch_id: int, job: str, spark=None) -> None:
    for armed in (_ARMED.get(("", point)), _ARMED.get((job, point))):
        if armed is None or armed[0] != batch_id:
            continue
        if armed[1] == "raise":
            fired = (job, point)
            if fired not in _RAISED:
                _RAISED.add(fired)
                raise FailpointError(f"failpoint {point}: {job} batch {batch_id} failed")
            continue
        if armed[1] == "pause":
            print(f"failpoint {point}: {job} batch {batch_id} paused", file=sys.stderr, flush=True)
            time.sleep(PAUSE_S)
            continue
        if armed[1] == "jvm" and spark is not None:
            spark.sparkContext._jvm.java.lang.Runtime.getRuntime().halt(137)  # noqa: SLF001
        os.kill(os.getpid(), signal.SIGKILL)
