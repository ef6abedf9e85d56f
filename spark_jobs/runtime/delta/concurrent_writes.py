"""A micro-batch's table writes, all at once.

Each transactional Delta append is mostly fixed cost (a state rebuild to look up the
transaction, then the commit: docs/streaming-facts.md), and the tables of one batch are
independent, so their appends overlap instead of queueing. Spark runs jobs from several
driver threads at once; under the FAIR scheduler (``spark.scheduler.mode``, set by
``get_spark``) the writes share the executors, in a pool served before the queries' own
stages (``WRITES_POOL``, declared in runtime/fair_scheduler.xml). A run's start creates its
missing tables the same way, each creation a commit of its own too, while its query starts
(``begin``; ``JobRun._prepare``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from pyspark import InheritableThread
from pyspark.sql import SparkSession

T = TypeVar("T")

WRITES_POOL = "table-writes"  # a pool of runtime/fair_scheduler.xml


def run_all(spark: SparkSession, tasks: dict[str, Callable[[], T]]) -> dict[str, T]:
    """Run every task in a driver thread of its own and wait for all of them.

    Every task runs to its end even when another fails, and the first failure (in the
    tasks' order) is raised only then: ``foreachBatch`` must not return, and the query
    must not commit the batch, while a write is still in flight or after one failed."""
    if len(tasks) <= 1:
        return {name: _in_writes_pool(spark, task) for name, task in tasks.items()}
    return begin(spark, tasks).wait()


def begin(spark: SparkSession, tasks: dict[str, Callable[[], T]]) -> "Begun[T]":
    """Start every task in a driver thread of its own and return at once: what the caller
    does meanwhile overlaps them (a run's start creating its tables, ``JobRun._prepare``)."""
    return Begun(spark, tasks)


class Begun(Generic[T]):
    """Tasks running in driver threads of their own (``begin``)."""

    def __init__(self, spark: SparkSession, tasks: dict[str, Callable[[], T]]):
        self.names = list(tasks)
        self.results: dict[str, T] = {}
        self.failures: dict[str, BaseException] = {}
        # InheritableThread: PySpark's pinned-thread mode gives each a JVM thread that inherits
        # the caller's local properties (job group, description) and cleans up after it.
        self.threads = [InheritableThread(target=self._work, args=(spark, name, task), name=f"sigflow-write-{name}")
                        for name, task in tasks.items()]
        for thread in self.threads:
            thread.start()

    def _work(self, spark: SparkSession, name: str, task: Callable[[], T]) -> None:
        try:
            self.results[name] = _in_writes_pool(spark, task)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the waiting thread
            self.failures[name] = exc

    def wait(self) -> dict[str, T]:
        """Wait for every task to end: their results, or the first failure (in the tasks'
        order) raised once all have ended. Any thread may wait, any number of times."""
        for thread in self.threads:
            thread.join()
        for name in self.names:
            if name in self.failures:
                raise self.failures[name]
        return self.results


def _in_writes_pool(spark: SparkSession, task: Callable[[], T]) -> T:
    """Run ``task`` in this thread with its jobs in the writes' pool, then give the thread
    its pool back: a query's own thread (one table's write) runs its next batch's stages in
    the pool it had."""
    context = spark.sparkContext
    before = context.getLocalProperty("spark.scheduler.pool")
    context.setLocalProperty("spark.scheduler.pool", WRITES_POOL)
    try:
        return task()
    finally:
        context.setLocalProperty("spark.scheduler.pool", before)  # None removes it
