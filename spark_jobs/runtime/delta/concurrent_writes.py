"""A micro-batch's table writes, all at once.

Each transactional Delta append is mostly fixed cost (a state rebuild to look up the
transaction, then the commit: docs/streaming-facts.md), and the tables of one batch are
independent, so their appends overlap instead of queueing. Spark runs jobs from several
driver threads at once; under the FAIR scheduler (``spark.scheduler.mode``, set by
``get_spark``) the writes share the executors, in a pool served before the queries' own
stages (``WRITES_POOL``, declared in runtime/fair_scheduler.xml). A run's start creates its
missing tables the same way (``JobRun._prepare``): each creation is a commit of its own too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

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
    results: dict[str, T] = {}
    failures: dict[str, BaseException] = {}

    def work(name: str, task: Callable[[], T]) -> None:
        try:
            results[name] = _in_writes_pool(spark, task)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            failures[name] = exc

    # InheritableThread: PySpark's pinned-thread mode gives each a JVM thread that inherits
    # the caller's local properties (job group, description) and cleans up after it.
    threads = [InheritableThread(target=work, args=(name, task), name=f"sigflow-write-{name}")
               for name, task in tasks.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name in tasks:
        if name in failures:
            raise failures[name]
    return results


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
