"""A batch's table writes beside the other queries of one application, whose stages and
writes keep more pools busy than there are task slots. A batch's write must take the next
free slot, not wait until every queued task of the others has run: among pools with as
many tasks running, Spark serves the one whose name sorts first, and "quarantined_events"
sorts after "default", "device_events" and "alert_signal_context"."""

import time

import pytest
from pyspark import InheritableThread

from spark_jobs.runtime.delta import concurrent_writes

# what the other queries keep queued: a pool each (None: the default pool, where a query's own
# stages run), each far longer in all than a one-task write takes to plan and run
OTHER_POOLS = (None, "alert_signal_context", "device_events")
OTHER_TASKS, OTHER_TASK_S = 24, 0.4


def _tasks(tracker, group: str, field: str) -> int:
    return sum(getattr(stage, field) for job in tracker.getJobIdsForGroup(group)
               if (job_info := tracker.getJobInfo(job))
               for stage_id in job_info.stageIds if (stage := tracker.getStageInfo(stage_id)))


def _other_query(context, group: str, pool: str | None) -> InheritableThread:
    def run() -> None:
        context.setLocalProperty("spark.scheduler.pool", pool)
        context.setJobGroup(group, "another query's work, its tasks queued", interruptOnCancel=True)
        try:
            context.parallelize(range(OTHER_TASKS), OTHER_TASKS).foreach(lambda _: time.sleep(OTHER_TASK_S))
        except Exception:  # noqa: BLE001 - cancelled once the writes are done
            pass

    thread = InheritableThread(target=run)
    thread.start()
    return thread


@pytest.mark.parametrize("tables", [("quarantined_events",), ("quarantined_events", "table_status")])
def test_a_batch_write_takes_the_next_free_slot_before_other_queries_queued_tasks(spark, tables):
    context, tracker = spark.sparkContext, spark.sparkContext.statusTracker()
    groups = [f"other-{len(tables)}-{index}" for index in range(len(OTHER_POOLS))]
    others = [_other_query(context, group, pool) for group, pool in zip(groups, OTHER_POOLS)]
    completed_at_write: dict[str, int] = {}
    try:
        deadline = time.monotonic() + 120
        while sum(_tasks(tracker, group, "numActiveTasks") for group in groups) < 2:  # every slot taken
            assert time.monotonic() < deadline, "the other queries' tasks never started"
            time.sleep(0.05)
        pool_before = context.getLocalProperty("spark.scheduler.pool")

        def write(table: str):
            def one_task_write() -> int:
                rows = context.parallelize([table], 1).collect()
                completed_at_write[table] = sum(_tasks(tracker, group, "numCompletedTasks") for group in groups)
                return len(rows)
            return one_task_write

        written = concurrent_writes.run_all(spark, {table: write(table) for table in tables})
    finally:
        for group in groups:
            context.cancelJobGroup(group)
        for thread in others:
            thread.join()
    assert written == {table: 1 for table in tables}
    # each write ended while most of the others' tasks were still queued; behind them, it
    # would have ended with nearly all of them done
    assert max(completed_at_write.values()) <= len(OTHER_POOLS) * OTHER_TASKS // 4, completed_at_write
    # and the caller's thread (a query's own, where one table is written) has its pool back
    assert context.getLocalProperty("spark.scheduler.pool") == pool_before
