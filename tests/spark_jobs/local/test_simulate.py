import json
from collections import Counter

from spark_jobs.local.simulate import (
    MALFORMED_KINDS,
    generate_alerts,
    generate_events,
)
from spark_jobs.runtime.kafka import admin as kafka_admin
from spark_jobs.runtime.kafka import offsets as kafka_offsets
from spark_jobs.runtime.kafka.producer import MAX_LINE_BYTES, FileRecords
from tests.helpers import sigflow

DEEP = b"[" * 5000 + b"]" * 5000  # nested deeper than Python's json parses (RecursionError)


def test_generated_stream_has_every_defect_and_is_reproducible():
    records = generate_events(3000, seed=5, start_ms=0)
    kinds = Counter(r.kind for r in records)
    assert {"event", "late", "out_of_order", "duplicate"} <= set(kinds)
    assert set(MALFORMED_KINDS) <= set(kinds)
    assert generate_events(3000, seed=5, start_ms=0) == records


def test_alerts_include_silent_devices_and_malformed_ones():
    alerts = generate_alerts(generate_events(3000, seed=5), every=10, malformed_ratio=0.2)
    kinds = Counter(a.kind for a in alerts)
    assert kinds["silent_alert"] > 0 and kinds["bad_severity"] > 0 and kinds["alert"] > 0
    silent = [json.loads(a.value) for a in alerts if a.kind == "silent_alert"]
    assert all(a["device_id"].startswith("silent-") for a in silent)


def test_a_file_is_sent_line_by_line_keyed_where_a_device_id_is_found(tmp_path):
    path = tmp_path / "in.jsonl"
    lines = [b'{"device_id": "d1", "x": 1}', b"not json", b"", b"[1]", DEEP,
             b'{"device_id": "\\ud800", "signal": 1}', b'{"device_id": 7}', b"x" * (MAX_LINE_BYTES + 1)]
    path.write_bytes(b"\n".join(lines) + b"\n")

    records = FileRecords(str(path))
    assert list(records) == [
        (b"d1", lines[0]), (None, b"not json"), (None, b"[1]"), (None, DEEP),
        ("\ud800".encode("utf-8", "surrogatepass"), lines[5]), (None, lines[6]),
    ]
    assert records.unkeyed == 4
    assert records.refused == [f"line 8: {MAX_LINE_BYTES + 1:,} bytes is over the {MAX_LINE_BYTES:,}-byte "
                               "limit of a Kafka record (message.max.bytes); not sent"]


def test_sigflow_produce_sends_what_it_is_given_and_says_what_it_refused(settings, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join([b'{"device_id": "d1"}', DEEP, b"\xff\xfe binary", b"y" * (MAX_LINE_BYTES + 5)]))

    result = sigflow(settings, "produce", "--file", str(path), timeout=120)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == (
        f"produced 3 records to {settings.streaming.events_topic} (2 unkeyed: no string device_id found); 1 refused (listed above)")
    bounds = kafka_offsets.offset_bounds(settings.kafka.bootstrap_servers, settings.streaming.events_topic,
                                        kafka_admin.topic_partitions(settings.kafka.bootstrap_servers,
                                                                      settings.streaming.events_topic))
    assert sum(end - start for start, end in bounds.values()) == 3
