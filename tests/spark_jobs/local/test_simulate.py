import json
from collections import Counter

from spark_jobs.local.simulate import (
    MALFORMED_KINDS,
    file_records,
    generate_alerts,
    generate_events,
)


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


def test_file_records_keys_by_device_and_keeps_bad_lines(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"device_id": "d1", "x": 1}\nnot json\n\n[1]\n')
    assert list(file_records(str(path))) == [
        (b"d1", b'{"device_id": "d1", "x": 1}'), (None, b"not json"), (None, b"[1]")
    ]
