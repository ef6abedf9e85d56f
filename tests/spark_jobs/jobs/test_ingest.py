"""Job ingest over several micro-batches, compared with what the produced records imply."""

import json
from collections import Counter
from pathlib import Path

from deltalake import DeltaTable

from spark_jobs.local.simulate import MALFORMED_KINDS, event_payload, generate_events
from spark_jobs.runtime.delta.table_access import commit_metadata
from spark_jobs.runtime.kafka import admin as kafka_admin
from tests.helpers import at, produce, run_job, send, table
from tests.oracle import Event


def expected_from(records):
    valid = [r for r in records if r.kind not in MALFORMED_KINDS]
    bad = [r for r in records if r.kind in MALFORMED_KINDS]
    return valid, bad


def test_every_record_lands_raw_and_valid_or_quarantined(spark, settings):
    records = generate_events(1200, devices=7, malformed_ratio=0.08, duplicate_ratio=0.05)
    produce(settings, records)
    summary = run_job(spark, settings.replace(max_offsets_per_trigger=400))
    assert summary.batches >= 3  # several micro-batches

    valid, bad = expected_from(records)
    raw = table(settings, "device_events_raw")
    assert Counter(raw["value"]) == Counter(r.value for r in records)
    assert raw.groupby(["partition", "offset"]).size().max() == 1
    # a batch of fewer records than records_per_write_task writes each table as one file
    assert len(DeltaTable(settings.table_uri("device_events_raw")).file_uris()) == summary.batches

    events = table(settings, "device_events")
    assert Counter(events["event_id"]) == Counter(json.loads(r.value)["event_id"] for r in valid)
    assert events["event_time"].notna().all() and events["signal"].notna().all()

    quarantined = table(settings, "quarantined_events")
    assert Counter(quarantined["value"]) == Counter(r.value for r in bad)
    assert quarantined["reason"].notna().all()
    merged = summary.rows_written.pop("device_status")
    assert summary.rows_written == {
        "device_events_raw": len(records), "device_events": len(valid), "device_alerts": 0,
        "quarantined_events": len(bad),
    }
    # device_status: a row per device, inserted once, then updated by a batch with a newer event of it
    devices = {json.loads(r.value)["device_id"] for r in valid}
    assert sorted(table(settings, "device_status").device_id) == sorted(devices)
    assert len(devices) <= merged <= len(devices) * summary.batches


def test_restart_resumes_from_the_checkpoint_offsets(spark, settings):
    first = generate_events(300, seed=1, malformed_ratio=0)
    second = generate_events(200, seed=2, malformed_ratio=0)
    produce(settings, first)
    assert run_job(spark, settings).rows_in == 300
    produce(settings, second)
    again = run_job(spark, settings)  # a new query on the same checkpoint
    assert again.rows_in == 200
    raw = table(settings, "device_events_raw")
    assert Counter(raw["value"]) == Counter(r.value for r in first + second)


def test_a_batch_replayed_after_its_delta_commit_writes_nothing_twice(spark, settings):
    records = generate_events(250, malformed_ratio=0.1)
    produce(settings, records)
    run_job(spark, settings)
    # Crash after the Delta commit, before Spark's commit log: Spark re-runs the last batch.
    commits = Path(settings.checkpoint_uri("ingest"), "commits")
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):  # a crash leaves neither file behind
        (commits / name).unlink()
    replay = run_job(spark, settings)
    assert replay.batches_skipped >= 1
    assert len(table(settings, "device_events_raw")) == 250


REASON_OF_KIND = {
    "not_json": "not valid JSON", "truncated_json": "not valid JSON", "binary": "not valid JSON",
    "missing_field": "missing required field", "wrong_type": "field 'signal' must be a number",
    "bad_time": "field 'event_time' is neither", "non_finite": "field 'signal' is not finite",
    "json_array": "not a JSON object", "huge": "payload of",
    "far_future": "field 'event_time' is more than 1 minute (max_clock_ahead) after the record's Kafka timestamp",
    "far_past": "field 'event_time' is more than 365 days before the record's Kafka timestamp",
}


def test_malformed_storm_is_quarantined_with_reasons_and_poisons_no_watermark(spark, settings):
    """10% garbage of every kind, far-future clocks included: each bad record is in quarantine
    with the reason for its kind, and the downstream dedup loses no on-time event (a
    far-future time let through would have dragged the watermark and made them all late)."""
    records = generate_events(1500, devices=9, seed=21, malformed_ratio=0.10, late_ratio=0.02)
    assert set(REASON_OF_KIND) == set(MALFORMED_KINDS)
    produce(settings, records)
    s = settings.replace(max_offsets_per_trigger=500)
    run_job(spark, s, "ingest")
    run_job(spark, s, "dedup")

    quarantined = table(s, "quarantined_events")
    reason_by_value = dict(zip(quarantined["value"], quarantined["reason"]))
    bad = [r for r in records if r.kind in MALFORMED_KINDS]
    assert len(quarantined) == len(bad) and {r.kind for r in bad} == set(MALFORMED_KINDS)
    for record in bad:
        assert reason_by_value[record.value].startswith(REASON_OF_KIND[record.kind]), record.kind

    ids_of = lambda *kinds: {json.loads(r.value)["event_id"] for r in records if r.kind in kinds}  # noqa: E731
    kept = set(table(s, "device_events_deduplicated")["event_id"])
    late = set(table(s, "late_events")["event_id"])
    assert ids_of("event", "out_of_order") <= kept  # nothing on time was dropped
    assert late <= ids_of("late") and kept | late == ids_of("event", "out_of_order", "late")
    # Late records are 30-60 minutes behind a 25-minute stream. A batch drops what is at or
    # behind the watermark in force for the batch before it (docs/semantics.md), so from the
    # third batch (records from about the 1,000th) every late record is behind it.
    from_third_batch = {json.loads(r.value)["event_id"] for r in records[1100:] if r.kind == "late"}
    assert from_third_batch and from_third_batch <= late


def test_one_clock_twenty_hours_ahead_is_quarantined_and_moves_no_watermark(spark, settings):
    """A device clock 20 hours ahead, let through, would set every job's watermark 20 hours
    ahead and make everything after it late. It is quarantined, and the on-time events of
    the next batch are kept."""
    import time

    now = int(time.time() * 1000)
    send(settings, [Event(f"a{i}", "d1", now - 60_000 + i * 1000, 1.0) for i in range(5)])
    ahead = event_payload("clock-ahead", "d2", now + 20 * 3_600_000, 1.0)
    produce(settings, [(b"d2", ahead)])
    run_job(spark, settings, "ingest")
    run_job(spark, settings, "dedup")
    send(settings, [Event(f"b{i}", "d1", now - 30_000 + i * 1000, 2.0) for i in range(5)])
    run_job(spark, settings, "dedup")

    reasons = table(settings, "quarantined_events").reason.tolist()
    assert len(reasons) == 1 and reasons[0].startswith("field 'event_time' is more than 1 minute (max_clock_ahead)")
    assert sorted(table(settings, "device_events_deduplicated").event_id) == sorted(
        [f"a{i}" for i in range(5)] + [f"b{i}" for i in range(5)]
    )
    assert len(table(settings, "late_events")) == 0


def test_a_producer_clock_ahead_cannot_move_the_watermark_on_a_topic_sigflow_created(spark, settings):
    """A producer whose clock is 55 minutes ahead stamps its record's CreateTime 55 minutes
    ahead too, which Kafka accepts (up to an hour by default). The topics sigflow creates take
    the broker's clock instead, so the record is quarantined as ahead of its Kafka timestamp
    and the on-time events of the next batch are all kept."""
    import time

    from confluent_kafka import Producer

    now = int(time.time() * 1000)
    assert kafka_admin.timestamp_types(settings.kafka.bootstrap_servers, [settings.streaming.events_topic]) == \
        {settings.streaming.events_topic: "LogAppendTime"}
    liar = Producer({"bootstrap.servers": settings.kafka.bootstrap_servers})
    liar.produce(settings.streaming.events_topic, key=b"d2", timestamp=now + 55 * 60_000,
                 value=event_payload("clock-ahead", "d2", now + 55 * 60_000, 1.0))
    assert liar.flush(30) == 0
    run_job(spark, settings, "dedup")
    send(settings, [Event(f"b{i}", "d1", now - 20_000 + i * 1000, 2.0) for i in range(20)])
    run_job(spark, settings, "dedup")

    assert sorted(table(settings, "device_events_deduplicated").event_id) == sorted(f"b{i}" for i in range(20))
    assert len(table(settings, "late_events")) == 0


def test_a_job_refuses_a_topic_stamped_with_the_producers_clock_unless_told_to_accept_it(spark, settings):
    """On a CreateTime topic the producer sets the timestamp that bounds event time: the job
    refuses to start, in one line naming the topic and the fix; accept_producer_time runs it.
    `sigflow status` says so before the run does, in the run's words."""
    import pytest
    from confluent_kafka.admin import NewTopic

    from spark_jobs.errors import SigflowError
    from spark_jobs.ops import status

    topic = "producer-time-" + settings.streaming.events_topic
    admin = kafka_admin.admin(settings.kafka.bootstrap_servers)
    admin.create_topics([NewTopic(topic, 1, 1, config={"message.timestamp.type": "CreateTime"})])[topic].result(15)
    s = settings.replace(events_topic=topic)
    send(s, [Event("a", "d1", at(9, 0), 1.0)])
    shown = {job.job: job.verdict for job in status.all_status(s)}
    with pytest.raises(SigflowError, match=f"topic {topic} is stamped with the producer's clock") as refused:
        run_job(spark, s, "dedup")
    assert "use-broker-time" in refused.value.hint and "kafka_accept_producer_time" in refused.value.hint
    assert (shown["dedup"].word, f"dedup: {shown['dedup'].reason}", shown["dedup"].next_step) == (
        "PRODUCER CLOCK", refused.value.message, refused.value.hint)
    # ingest reads it too; the fast path reads only the alerts' topic, stamped by the broker
    assert shown["ingest"].word == "PRODUCER CLOCK" and shown["alert-fastpath"].word != "PRODUCER CLOCK"
    accepting = s.replace(kafka_accept_producer_time=True)
    assert status.job_status(accepting, "dedup").verdict.word == "NEVER RUN"
    run_job(spark, accepting, "dedup")
    assert table(s, "device_events_deduplicated").event_id.tolist() == ["a"]
    assert status.job_status(accepting, "dedup").verdict.word == "OK"


def test_the_payload_names_the_device_whatever_the_key_and_an_empty_value_is_quarantined(spark, settings):
    """The stated rule (docs/event-contract.md): the key only partitions. A record whose key
    is missing or names another device is the payload's device's; one with no value is
    quarantined as empty, its key kept."""
    from tests.helpers import confluent_produce

    records = [
        (b"device-9", event_payload("e1", "d1", 1_795_349_040_000, 1.0)),  # key disagrees
        (None, event_payload("e2", "d2", 1_795_349_040_000, 2.0)),  # no key
        (b"d3", None),  # a tombstone-like record: key, no value
        (None, None),  # neither
    ]
    confluent_produce(settings.kafka.bootstrap_servers, settings.streaming.events_topic, records)

    run_job(spark, settings)

    events = table(settings, "device_events").sort_values("event_id")
    assert events[["event_id", "device_id"]].values.tolist() == [["e1", "d1"], ["e2", "d2"]]
    raw = table(settings, "device_events_raw")
    assert sorted(raw.key.map(lambda k: k or b"")) == sorted([b"", b"", b"d3", b"device-9"])
    quarantined = table(settings, "quarantined_events")
    assert quarantined.reason_code.tolist() == ["empty_record", "empty_record"]
    assert sorted(quarantined.key.map(lambda k: k or b"")) == [b"", b"d3"]


def test_a_first_batch_before_anything_was_produced_commits_to_no_table(spark, settings):
    """A job started before its topics hold a record runs a first batch that reads none: no
    table gets a commit for it. The batch that reads the first records commits to the tables
    it has rows for and to no other: a commit Spark did not make would cost the table's next
    Spark append a state rebuild (docs/streaming-facts.md)."""
    tables = ("device_events_raw", "device_events", "device_alerts", "quarantined_events")

    def committed_batches():
        return {name: [m["batch_id"] for m in commit_metadata(settings.table_uri(name)) if m.get("job") == "ingest"]
                for name in tables}

    first = run_job(spark, settings)
    assert first.batches == 1 and committed_batches() == {name: [] for name in tables}
    send(settings, [Event("a", "d1", at(9, 0), 1.0)])
    run_job(spark, settings)
    assert committed_batches() == {"device_events_raw": [1], "device_events": [1], "device_alerts": [],
                                   "quarantined_events": []}
    assert table(settings, "device_events").event_id.tolist() == ["a"]
