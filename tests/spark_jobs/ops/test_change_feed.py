"""A reader that follows a table's change data feed ends with exactly the table's rows,
through what on-call and maintenance do to it: a rewind and its re-run, a recover from
earliest and its re-run, compaction and vacuum. Two followers, as docs/consumers.md writes
them: delta-rs reading the feed from the version after the last one it applied, and a
Spark streaming query reading the feed (``readChangeFeed``) into a Delta table of the
changes it saw. Both are compared with the table itself after every step, and neither may
hold a row more often than the table does."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
from deltalake import DeltaTable

from spark_jobs.ops import maintenance, restart
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.delta.table_access import read_arrow
from tests.helpers import at, run_job, send, single_partition
from tests.oracle import Event

TABLE = "device_events_deduplicated"
ADDS, REMOVES = ("insert", "update_postimage"), ("delete", "update_preimage")
META = ("_change_type", "_commit_version", "_commit_timestamp")


def _key(row: dict) -> tuple:
    return tuple(repr(value) for name, value in sorted(row.items()) if name not in META)


def _apply(rows: Counter, changes: list[dict]) -> None:
    for change in sorted(changes, key=lambda c: c["_commit_version"]):
        rows[_key(change)] += 1 if change["_change_type"] in ADDS else -1 if change["_change_type"] in REMOVES else 0
    for key in [key for key, n in rows.items() if n == 0]:
        del rows[key]


class DeltaRsFollower:
    """Reads the feed from the version after the last one it applied."""

    def __init__(self, uri: str):
        self.uri, self.next_version, self.rows = uri, 0, Counter()

    def catch_up(self) -> Counter:
        version = DeltaTable(self.uri).version()
        if version >= self.next_version:
            feed = DeltaTable(self.uri).load_cdf(starting_version=self.next_version, ending_version=version)
            _apply(self.rows, pa.table(feed.read_all()).to_pylist())
            self.next_version = version + 1
        return self.rows


class SparkStreamingFollower:
    """A Spark streaming query of the feed, run to what is there at each catch-up, appending
    every change it reads to a Delta table of its own."""

    def __init__(self, spark, uri: str, work):
        self.spark, self.uri = spark, uri
        self.changes, self.checkpoint = str(work / "changes"), str(work / "changes-checkpoint")

    def catch_up(self) -> Counter:
        query = (self.spark.readStream.format("delta").option("readChangeFeed", "true")
                 .option("startingVersion", 0).load(self.uri)
                 .writeStream.format("delta").option("checkpointLocation", self.checkpoint)
                 .trigger(availableNow=True).start(self.changes))
        query.awaitTermination()
        assert query.exception() is None
        rows = Counter()
        _apply(rows, read_arrow(self.changes).to_pylist())
        return rows


def _chunk(prefix: str, minute: int, repeats: list[Event] = ()) -> list[Event]:
    return [Event(f"{prefix}{n}", f"d{n % 3}", at(10, minute) + n * 15_000, float(n)) for n in range(20)] + list(repeats)


def test_both_followers_end_with_the_table_through_rewind_recover_and_maintenance(spark, settings, tmp_path):
    s = single_partition(settings)
    uri = s.table_uri(TABLE)
    followers = [DeltaRsFollower(uri), SparkStreamingFollower(spark, uri, tmp_path)]

    def table_rows() -> Counter:
        return Counter(_key(row) for row in read_arrow(uri).to_pylist())

    def followed(step: str) -> None:
        expected = table_rows()
        for follower in followers:
            assert follower.catch_up() == expected, f"{type(follower).__name__} after {step}"

    first = _chunk("a", 0)
    second = _chunk("b", 5, first[:5])
    ends = []
    for chunk in (first, second, _chunk("c", 10, second[:5])):
        send(s, chunk)
        run_job(spark, s, "dedup")
        ends.append(Checkpoint(s.checkpoint_uri("dedup")).last_committed())
    followed("three runs")
    uninterrupted = table_rows()

    rewind = restart.plan_rewind(s, "dedup", to_batch=ends[0])
    assert not rewind.refusals and not any(step.startswith("restore") for step in rewind.steps), rewind.describe()
    rewind.apply()
    followed("the rewind")
    assert sum(table_rows().values()) == 20  # the first chunk's events alone

    run_job(spark, s, "dedup")
    followed("the re-run")
    assert sum(table_rows().values()) == sum(uninterrupted.values()) == 60

    maintenance.run(s.replace(vacuum_retention="0 seconds", vacuum_retention_floor="0 seconds"))
    followed("compaction and vacuum")

    restart.plan_recover(s, "dedup", recover_from="earliest", force=True).apply()
    followed("the recover")
    assert not table_rows()
    run_job(spark, s, "dedup")
    followed("the recover's re-run")
    assert sum(table_rows().values()) == 60
