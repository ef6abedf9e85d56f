"""Job dedup: repeats removed within the watermark, state bounded, re-sends after expiry late."""

from spark_jobs.runtime.delta.table_access import commit_metadata
from spark_jobs.runtime.metrics.summary import summary_table
from tests.helpers import at, run_job, send, single_partition, table
from tests.oracle import Event


def test_duplicates_within_the_watermark_are_dropped(spark, settings):
    s = single_partition(settings)
    first = [Event("a", "d1", at(9, 0), 1.0), Event("b", "d1", at(9, 1), 2.0), Event("a", "d1", at(9, 0), 1.0)]
    send(s, first)
    run_job(spark, s, "dedup")
    send(s, [Event("b", "d1", at(9, 1), 2.0), Event("c", "d2", at(9, 2), 3.0)])  # b again, next batch
    run_job(spark, s, "dedup")
    assert sorted(table(s, "device_events_deduplicated")["event_id"]) == ["a", "b", "c"]
    assert len(table(s, "late_events")) == 0
    # no late rows, so no commit to late_events: a table's commits are Spark's alone, and
    # `sigflow checkpoint recover` finds the batches that left it without rows in pipeline_metrics
    metrics = table(s, "pipeline_metrics")
    assert len(metrics[metrics.input_rows > 0]) == 2
    assert [m for m in commit_metadata(s.table_uri("late_events")) if m.get("job") == "dedup"] == []


def test_an_id_resent_after_its_state_expired_is_late_not_counted_twice(spark, settings):
    s = single_partition(settings)
    send(s, [Event("a", "d1", at(9, 0), 1.0)])
    run_job(spark, s, "dedup")
    send(s, [Event("z", "d1", at(9, 30), 1.0)])  # watermark 09:20: a's state has expired
    run_job(spark, s, "dedup")
    send(s, [Event("a", "d1", at(9, 0), 1.0)])
    run_job(spark, s, "dedup")
    assert sorted(table(s, "device_events_deduplicated")["event_id"]) == ["a", "z"]
    late = table(s, "late_events")
    assert late[["event_id", "job"]].values.tolist() == [["a", "dedup"]]


def test_state_rows_stay_flat_while_the_stream_advances(spark, settings):
    s = single_partition(settings).replace(max_offsets_per_trigger=200)
    events = [Event(f"e{n}", f"d{n % 5}", at(6, 0) + n * 1500, float(n)) for n in range(2400)]  # 60 min
    for start in range(0, len(events), 600):
        send(s, events[start:start + 600])
        run_job(spark, s, "dedup")
    metrics = table(s, "pipeline_metrics").sort_values("batch_id")
    later = metrics[metrics.batch_id >= metrics.batch_id.max() // 2]
    # An id is kept until the watermark (newest - 10 min) passes its time + 10 min: about
    # 20 minutes of ids (800 at one per 1.5 s) plus one batch, however long the stream runs.
    assert later["state_rows"].max() <= 800 + 200
    assert later["state_rows"].min() > 0
    kept = table(s, "device_events_deduplicated").event_id
    assert kept.is_unique and sorted(kept) == sorted(e.event_id for e in events)  # in order: none late


def test_duplicates_removed_are_counted_in_pipeline_metrics(spark, settings):
    s = single_partition(settings)
    send(s, [Event("a", "d1", at(9, 0), 1.0)] * 3 + [Event("b", "d1", at(9, 1), 2.0)])
    summary = run_job(spark, s, "dedup")
    assert summary.duplicates_dropped == 2
    assert table(s, "pipeline_metrics")["duplicates_dropped"].sum() == 2


def test_the_run_summary_says_why_no_event_was_dropped_late(spark, settings):
    s = single_partition(settings)
    send(s, [Event("new", "d1", at(10, 0), 1.0), Event("old", "d1", at(9, 0), 1.0)])
    first = run_job(spark, s, "dedup")  # one batch: no watermark yet, so 9:00 is kept
    assert "0 dropped late (all records came before a watermark was set" in first.line()
    send(s, [Event("older", "d1", at(9, 1), 1.0)])
    assert "; 0 duplicates removed, 1 dropped late, " in run_job(spark, s, "dedup").line()
    send(s, [Event("newer", "d1", at(10, 30), 1.0)])
    assert "0 dropped late (none behind the watermark)" in run_job(spark, s, "dedup").line()
    idle = run_job(spark, s, "dedup")  # nothing new: no zero to explain, and no batch to say what the state holds
    assert idle.rows_in == 0 and idle.line().endswith("0 dropped late")
    assert summary_table([idle])[-1].split() == ["dedup", "0", "0", "0", "0", "0", "-"]  # no note under it


def test_partitions_added_between_runs_are_read_once_and_late_events_still_listed(spark, settings,
                                                                                  late_events_found):
    """Scaling a topic, as operators do: the job carries on over the new partitions, writes
    every event once, and still finds the late ones in old and new partitions, whether the
    batch's plan observed them or its records were read again."""
    from spark_jobs.runtime.kafka import admin as kafka_admin
    s = settings.replace(events_topic=settings.streaming.events_topic + "-grown", topic_partitions=2)
    kafka_admin.create_topics(s.kafka.bootstrap_servers, [s.streaming.events_topic], 2, s.kafka.topic_retention_ms)
    first = [Event(f"a{n}", f"d{n}", at(9, n), 1.0) for n in range(8)]
    send(s, first)
    run_job(spark, s, "dedup")
    send(s, [Event("w", "d0", at(9, 40), 1.0)])  # watermark 09:30
    run_job(spark, s, "dedup")
    kafka_admin.add_partitions(s.kafka.bootstrap_servers, s.streaming.events_topic, 5)
    devices = [f"d{n}" for n in range(20)]  # keys spread over all five partitions
    second = [Event(f"b{n}", device, at(9, 41), 2.0) for n, device in enumerate(devices)]
    late = [Event(f"late{n}", device, at(9, 5), 3.0) for n, device in enumerate(devices)]
    send(s, second + late + second[:3])  # and three re-sent
    run_job(spark, s, "dedup")
    kept = table(s, "device_events_deduplicated").event_id
    assert kept.is_unique
    assert sorted(kept) == sorted(e.event_id for e in first + [Event("w", "d0", 0, 0)] + second)
    listed = table(s, "late_events")
    assert sorted(listed.event_id) == sorted(e.event_id for e in late)
    assert listed.partition.nunique() > 2  # late events from the new partitions too


def test_two_devices_that_number_their_events_alike_keep_each_others_readings(spark, settings):
    """Firmware numbers its events from 1: device d1's event 1 and d2's event 1 are two
    readings. Both are kept and counted in their own device's windows; a re-send of either
    is still a duplicate."""
    s = single_partition(settings)
    d1 = [Event(str(n), "d1", at(9, 0) + n * 10_000, 1.0) for n in range(1, 4)]
    d2 = [Event(str(n), "d2", at(9, 0) + n * 10_000, 5.0) for n in range(1, 4)]
    send(s, d1 + d2 + d1[:1])
    run_job(spark, s, "dedup")
    run_job(spark, s, "windowed-averages")
    send(s, [Event("9", "d1", at(9, 30), 1.0)])  # moves the watermark past the first windows
    run_job(spark, s, "windowed-averages")
    kept = table(s, "device_events_deduplicated")
    assert sorted(zip(kept.device_id, kept.event_id)) == sorted((e.device_id, e.event_id) for e in d1 + d2)
    windows = table(s, "device_signal_averages")
    tumbling = windows[windows.window_kind == "tumbling"]
    first = tumbling[tumbling.window_start == tumbling.window_start.min()]
    assert dict(zip(first.device_id, first.event_count)) == {"d1": 3, "d2": 3}
