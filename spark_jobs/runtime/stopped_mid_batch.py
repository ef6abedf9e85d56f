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
"""

from __future__ import annotations

import logging
from typing import Callable

from pyspark.sql import DataFrame

log = logging.getLogger("sigflow.runner")

# what Spark's check looks for: the start of a Py4J error, then an interruption's class
SPARK_STOP_WORDS = ("py4j.protocol.Py4JJavaError: An error occurred while calling the batch function: "
                    "java.lang.InterruptedException")


class BatchStopped(Exception):
    """The batch function ended by its query's stop."""


def told_as_a_stop(batch_function: Callable[[DataFrame, int], None],
                   query_active: Callable[[], bool]) -> Callable[[DataFrame, int], None]:
    """``batch_function`` as the query's ``foreachBatch`` function: an error it raises once
    ``query_active`` says the query is stopping becomes ``BatchStopped`` (the error itself
    goes to the log)."""

    def call(batch_df: DataFrame, batch_id: int) -> None:
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
