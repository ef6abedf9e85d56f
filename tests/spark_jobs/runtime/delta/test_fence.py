"""A takeover's fence (runtime/delta/fence.py): a write under way when the lease is taken over
from a holder on another host cannot land beside its successor's copy of the batch."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
import tenacity

from spark_jobs.contracts.tables import DEVICE_EVENTS_DEDUPLICATED, LATE_EVENTS
from spark_jobs.errors import JobAlreadyRunning, LeaseLost
from spark_jobs.jobs.registry import get_job
from spark_jobs.runtime.checkpoint import lease as leases
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.checkpoint.lease import Lease
from spark_jobs.runtime.delta import fence, table_access
from spark_jobs.runtime.delta.sink import DeltaSink
from spark_jobs.runtime.runner import JobRun
from tests.helpers import (
    REPO,
    another_commit_after_the_first_read,
    cli_env,
    table,
    wait_for,
)
from tests.spark_jobs.runtime.delta.gated_batch import INFO, ROWS, batch_rows, late_rows

STALE_WRITER = """
import sys
from spark_jobs.config import load_settings
from spark_jobs.runtime.checkpoint import lease as leases
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.delta.sink import DeltaSink
from spark_jobs.runtime.spark import get_spark
from tests.spark_jobs.runtime.delta.gated_batch import INFO, SPEC, batch_rows

leases.this_machine = lambda: "another-host/its-boot/its-pid-namespace"  # the holder runs elsewhere
settings = load_settings()
lease = leases.Lease(Checkpoint(settings.checkpoint_uri("dedup")), "dedup", 1.0)
lease.acquire()
lease._stop.set()  # cut off from the lease's storage: no renewal lands from here on
spark = get_spark(settings, "stale-writer")
lease.check()
sink = DeltaSink(spark, settings)
try:
    sink.append(batch_rows(spark, sys.argv[1], sys.argv[2]), SPEC, INFO, replay_possible=False,
                still_held=lease.check)
    print("committed", flush=True)
except Exception as exc:
    print(type(exc).__name__, str(exc).splitlines()[0], flush=True)
"""


@pytest.mark.slow  # a second Spark driver
def test_a_write_under_way_when_a_foreign_holder_is_taken_over_cannot_land(spark, settings, tmp_path):
    """The stale holder's batch is being written (its Delta transaction begun) while its lease
    lapses; the taker fences, then replays the same batch. Released, the stale write must not
    land: the batch's rows are in the table once, and the stale writer stops on its lost lease."""
    sink = DeltaSink(spark, settings)
    sink.ensure_table(DEVICE_EVENTS_DEDUPLICATED)
    started, gate = tmp_path / "started", tmp_path / "gate"
    env = cli_env(settings, {"PYTHONPATH": str(REPO)})
    writer = subprocess.Popen([sys.executable, "-c", STALE_WRITER, str(started), str(gate)], env=env, cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(started.exists, timeout_s=120, what="the stale writer's transaction to begin",
                 watched=(writer,))
        successor = Lease(Checkpoint(settings.checkpoint_uri("dedup")), "dedup", 1.0)
        taking = tenacity.Retrying(retry=tenacity.retry_if_exception_type(JobAlreadyRunning),
                                   wait=tenacity.wait_fixed(0.5), stop=tenacity.stop_after_delay(60), reraise=True)
        taking(successor.acquire)  # once the holder's renewal is ttl plus the clock skew old
        assert successor.taken_over is not None and not successor.taken_over.on_this_host()
        dedup = get_job("dedup")
        assert fence.fence_after_takeover(settings, "dedup", dedup.tables, successor) == [
            DEVICE_EVENTS_DEDUPLICATED.name]
        gate.touch()  # the successor's copy passes the gate at once
        assert sink.append(batch_rows(spark, str(started), str(gate)), DEVICE_EVENTS_DEDUPLICATED, INFO,
                           replay_possible=True, still_held=successor.check) == ROWS
        out, err = writer.communicate(timeout=120)
    finally:
        gate.touch()
        if writer.poll() is None:
            writer.kill()
    assert out.startswith("LeaseLost"), (out, err[-3000:])
    assert len(table(settings, DEVICE_EVENTS_DEDUPLICATED.name)) == ROWS
    successor.release()


def test_a_run_whose_commit_another_jobs_fence_failed_appends_again(spark, settings, tmp_path):
    """Jobs share a table they append to (late_events): another job's fence fails this run's
    commit under way, and this run, still holding its lease, appends again: its rows land once."""
    sink = DeltaSink(spark, settings)
    sink.ensure_table(DEVICE_EVENTS_DEDUPLICATED)
    started, gate = tmp_path / "started", tmp_path / "gate"
    lease = Lease(Checkpoint(settings.checkpoint_uri("dedup")), "dedup", 30.0)
    lease.acquire()
    appended: list = []
    writing = threading.Thread(target=lambda: appended.append(sink.append(
        batch_rows(spark, str(started), str(gate)), DEVICE_EVENTS_DEDUPLICATED, INFO, replay_possible=False,
        still_held=lease.check)))
    writing.start()
    try:
        wait_for(started.exists, timeout_s=60, what="the write's transaction to begin")
        assert fence.fence(settings.table_uri(DEVICE_EVENTS_DEDUPLICATED.name), "sessions", "another-run")
    finally:
        gate.touch()
        writing.join(120)
        lease.release()
    assert appended == [ROWS]
    assert len(table(settings, DEVICE_EVENTS_DEDUPLICATED.name)) == ROWS


def test_a_run_that_lost_its_lease_stops_at_the_fence(spark, settings, tmp_path):
    """The fence was against this run: its failed commit is not tried again."""
    sink = DeltaSink(spark, settings)
    sink.ensure_table(DEVICE_EVENTS_DEDUPLICATED)
    started, gate = tmp_path / "started", tmp_path / "gate"
    failures: list = []

    def lost() -> None:
        raise LeaseLost("dedup lost its lease", "stop")

    def write() -> None:
        try:
            sink.append(batch_rows(spark, str(started), str(gate)), DEVICE_EVENTS_DEDUPLICATED, INFO,
                        replay_possible=False, still_held=lost)
        except Exception as exc:
            failures.append(exc)

    writing = threading.Thread(target=write)
    writing.start()
    try:
        wait_for(started.exists, timeout_s=60, what="the write's transaction to begin")
        fence.fence(settings.table_uri(DEVICE_EVENTS_DEDUPLICATED.name), "dedup", "the-taker")
    finally:
        gate.touch()
        writing.join(120)
    assert [type(f) for f in failures] == [LeaseLost]
    assert len(table(settings, DEVICE_EVENTS_DEDUPLICATED.name)) == 0


def _fenced_after_the_read(monkeypatch, uri: str) -> None:
    """The fence lands once the held rows' commit has read the table, before it commits:
    the window a fence must close for the late events a batch appends through delta-rs."""
    another_commit_after_the_first_read(monkeypatch, lambda: fence.fence(uri, "sessions", "another-run"))


def test_held_rows_whose_commit_a_fence_failed_are_appended_again_while_the_lease_is_held(spark, settings,
                                                                                           monkeypatch):
    sink = DeltaSink(spark, settings)
    sink.ensure_table(LATE_EVENTS)
    uri = settings.table_uri(LATE_EVENTS.name)
    rows = spark.createDataFrame(late_rows(), LATE_EVENTS.schema).toArrow()
    _fenced_after_the_read(monkeypatch, uri)
    lease = Lease(Checkpoint(settings.checkpoint_uri("dedup")), "dedup", 30.0)
    lease.acquire()
    try:
        assert sink.append_held(rows, LATE_EVENTS, INFO, replay_possible=False, still_held=lease.check) == ROWS
    finally:
        lease.release()
    assert len(table(settings, LATE_EVENTS.name)) == ROWS


def test_held_rows_of_a_run_that_lost_its_lease_stop_at_the_fence(spark, settings, monkeypatch):
    sink = DeltaSink(spark, settings)
    sink.ensure_table(LATE_EVENTS)
    rows = spark.createDataFrame(late_rows(), LATE_EVENTS.schema).toArrow()
    _fenced_after_the_read(monkeypatch, settings.table_uri(LATE_EVENTS.name))

    def lost() -> None:
        raise LeaseLost("dedup lost its lease", "stop")

    with pytest.raises(LeaseLost):
        sink.append_held(rows, LATE_EVENTS, INFO, replay_possible=False, still_held=lost)
    assert len(table(settings, LATE_EVENTS.name)) == 0


def test_a_run_taking_over_a_foreign_holder_fences_the_tables_its_start_is_still_creating(spark, settings,
                                                                                       monkeypatch):
    """A run creates its tables while its query starts; one that takes the lease over from a
    holder on another host waits for them before fencing, so a table it was still creating
    is fenced too (fresh tables: none exists when the run begins)."""
    monkeypatch.setattr(leases, "this_machine", lambda: "another-host/its-boot/its-pid-namespace")
    stale = Lease(Checkpoint(settings.checkpoint_uri("dedup")), "dedup", 1.0)
    stale.acquire()
    stale._stop.set()  # cut off from the lease's storage: no renewal lands from here on
    monkeypatch.undo()  # this run's host is this one again
    taking = tenacity.Retrying(retry=tenacity.retry_if_exception_type(JobAlreadyRunning),
                               wait=tenacity.wait_fixed(0.5), stop=tenacity.stop_after_delay(60), reraise=True)
    dedup = get_job("dedup")
    run = taking(JobRun, dedup, settings, spark)  # once the holder's renewal is ttl plus the clock skew old
    try:
        assert run.lease.taken_over is not None and not run.lease.taken_over.on_this_host()
        fenced_by = {spec.name: table_access.open_table(settings.table_uri(spec.name)).metadata().configuration.get(
            fence.FENCE_PROPERTY.format(job="dedup")) for spec in run.tables if not spec.merge_key}
        assert fenced_by == {DEVICE_EVENTS_DEDUPLICATED.name: run.lease.owner, LATE_EVENTS.name: run.lease.owner}
    finally:
        run.lease.release()
