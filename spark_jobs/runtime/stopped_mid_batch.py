"""A query stopped while its batch function runs, told to Spark in the words it looks for.

Stopping a query mid-batch (Ctrl-C, a run cut short) interrupts the query's thread and
cancels its Spark jobs, so the batch function's next Spark call fails, and Spark gets that
error's text back through Py4J. Spark tells such a stop from a failure by matching the text
against ``py4j.protocol.Py4JJavaError: An error occurred while calling((.|\\r\\n|\\r|\\n)*)(
java.lang.InterruptedException|...)`` (``StreamExecution.PROXY_ERROR``), a regex that recurses
once per character after its first words. A Py4J error's text carries its Java stack trace,
thousands of characters: the query's thread died of a StackOverflowError there, a thousand
lines of it on the console. So once the query is no longer active (being stopped), whatever
the batch function raises is raised again as a short text the regex matches at once; while
the query runs, its errors go on as they are.

A graceful stop (SIGTERM, ``sigflow stop``) lets the batch in flight finish. A query behind in
Kafka starts its next batch the moment one ends, so it is never seen idle: the batch function
of a batch begun once the stop was asked (``StopGate``) holds before its first write until the
stop reaches it, and the next run does that batch from its checkpoint.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from pyspark.sql import DataFrame

from spark_jobs.runtime.waiting import wait_until

log = logging.getLogger("sigflow.runner")

# what Spark's check looks for: the start of a Py4J error, then an interruption's class
SPARK_STOP_WORDS = ("py4j.protocol.Py4JJavaError: An error occurred while calling the batch function: "
                    "java.lang.InterruptedException")


class BatchStopped(Exception):
    """The batch function ended by its query's stop."""


class StopGate:
    """One query's graceful stop: ``asked`` once the run will stop it, ``holding`` once a batch
    begun after that holds, writing nothing (the batch in flight has then finished)."""

    def __init__(self, hold_s: float):
        self.asked, self.holding = threading.Event(), threading.Event()
        self.hold_s = hold_s  # past it the held batch fails: a stop that never came


def told_as_a_stop(batch_function: Callable[[DataFrame, int], None], query_active: Callable[[], bool],
                   gate: StopGate | None = None) -> Callable[[DataFrame, int], None]:
    """``batch_function`` as the query's ``foreachBatch`` function: an error it raises once
    ``query_active`` says the query is stopping becomes ``BatchStopped`` (the error itself
    goes to the log); a batch begun after ``gate`` was asked holds until the stop."""

    def call(batch_df: DataFrame, batch_id: int) -> None:
        if gate is not None and gate.asked.is_set():
            gate.holding.set()
            log.debug("batch %s begun after its run was asked to stop: held, writing nothing", batch_id)
            wait_until(lambda: not _still_active(query_active), timeout_s=gate.hold_s, every_s=0.05)
            raise BatchStopped(SPARK_STOP_WORDS)
        try:
            batch_function(batch_df, batch_id)
        except Exception as exc:
            if _still_active(query_active):
                raise
            log.debug("batch %s ended by its query's stop: %s", batch_id, exc, exc_info=True)
            raise BatchStopped(SPARK_STOP_WORDS) from None

    return call


def _still_active(query_active: Callable[[], bool]) -> bool:
    try:
        return query_active()
    except Exception:  # noqa: BLE001 - a query that cannot say is stopping or gone
        return False
