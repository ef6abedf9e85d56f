"""device_status's merge, the one table several jobs write: each job merges its part of a
device's row, at any moment, and each part keeps its newest value by its own rule."""

from __future__ import annotations

import multiprocessing
from datetime import datetime, timedelta, timezone

import pyarrow as pa

from spark_jobs.contracts.tables import DEVICE_STATUS
from spark_jobs.runtime.delta import schema, table_access
from spark_jobs.runtime.delta.newest import newest_per_key
from spark_jobs.runtime.delta.sink import _every_column

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)


def _part_rows(part: str, devices: list[str], minute: int, **values) -> pa.Table:
    """Rows of ``devices`` holding one part, as a job's batch gives them."""
    at = pa.array([T0 + timedelta(minutes=minute)] * len(devices), pa.timestamp("us", tz="UTC"))
    columns = {"window": {"window_start": at, "window_end": at, "window_event_count": [values.get("count", 1)] * len(devices),
                          "window_avg_signal": [1.0] * len(devices)},
               "session": {"session_start": at, "session_end": at,
                           "session_event_count": [values.get("count", 1)] * len(devices),
                           "session_avg_signal": [2.0] * len(devices),
                           "session_closed": [values.get("closed", False)] * len(devices)}}[part]
    return _every_column(pa.table({"device_id": devices, **columns}), schema.arrow_schema(DEVICE_STATUS))


def _merge(uri: str, rows: pa.Table) -> None:
    table_access.merge_newer(uri, newest_per_key(rows, DEVICE_STATUS.merge_key, DEVICE_STATUS.merge_parts),
                             DEVICE_STATUS.merge_key, DEVICE_STATUS.merge_parts, "{}")


def _merging_job(uri: str, part: str, start, rounds: int) -> None:
    """A job's driver: each round, its part of 20 devices no one has written yet, merged at
    the same moment as the other job's."""
    for round_ in range(rounds):
        start.wait()
        _merge(uri, _part_rows(part, [f"d{round_}-{n}" for n in range(20)], round_))


def test_two_jobs_merging_their_parts_of_new_devices_at_once_leave_one_row_each_with_both(tmp_path):
    """The race of two inserts of one new device: Delta refuses the second commit ("a
    concurrent transaction added new data"), which merged again finds the row and fills its
    part in. Without merging again, a job's batch failed."""
    uri = str(tmp_path / "device_status")
    schema.create_table(uri, DEVICE_STATUS)
    spawn = multiprocessing.get_context("spawn")  # delta-rs' runtime does not survive a fork
    start = spawn.Barrier(2)
    jobs = [spawn.Process(target=_merging_job, args=(uri, part, start, 8)) for part in ("window", "session")]
    for job in jobs:
        job.start()
    try:
        for job in jobs:
            job.join(120)
        assert [job.exitcode for job in jobs] == [0, 0]
    finally:
        for job in jobs:
            job.kill()  # one that failed leaves the other waiting at the barrier
    rows = table_access.read_arrow(uri).to_pandas()
    assert len(rows) == 8 * 20 and rows.device_id.is_unique
    assert rows.window_start.notna().all() and rows.session_start.notna().all()
    assert (rows.window_start == rows.session_start).all()  # each device's parts from the same round


def test_a_devices_session_part_keeps_its_latest_session_open_then_closed(tmp_path):
    """By the rule: the session with the later last event is newer; of one session, more
    events is newer, and closed is newer than open; an older state merged late changes nothing."""
    uri = str(tmp_path / "device_status")
    schema.create_table(uri, DEVICE_STATUS)

    def session_now(uri: str) -> tuple:
        row = table_access.read_arrow(uri).to_pylist()[0]
        return row["session_end"].minute, row["session_event_count"], row["session_closed"]

    steps = [  # (last event minute, events, closed) merged, then what the row holds
        ((10, 2, False), (10, 2, False)),
        ((10, 3, False), (10, 3, False)),  # an earlier event joined it
        ((10, 3, True), (10, 3, True)),  # closed
        ((10, 3, False), (10, 3, True)),  # a replay of the open state: older
        ((5, 9, False), (10, 3, True)),  # an older session: not the latest
        ((50, 1, False), (50, 1, False)),  # a new session
    ]
    for (minute, count, closed), expected in steps:
        _merge(uri, _part_rows("session", ["d1"], minute, count=count, closed=closed))
        assert session_now(uri) == expected
    # the same states in one batch reduce to the newest of them
    in_one_batch = str(tmp_path / "in_one_batch")
    schema.create_table(in_one_batch, DEVICE_STATUS)
    _merge(in_one_batch, pa.concat_tables([_part_rows("session", ["d1"], minute, count=count, closed=closed)
                                           for (minute, count, closed), _ in steps]))
    assert session_now(in_one_batch) == steps[-1][1]
