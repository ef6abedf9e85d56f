import json
import time
from collections import Counter
from datetime import datetime

from spark_jobs.local.simulate import (
    MALFORMED_KINDS,
    generate_alerts,
    generate_events,
)
from spark_jobs.runtime.kafka import admin as kafka_admin
from spark_jobs.runtime.kafka import offsets as kafka_offsets
from spark_jobs.runtime.kafka.producer import MAX_LINE_BYTES, FileRecords
from tests.helpers import records_in, sigflow, topic_records

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


class _Clock:
    """A wall clock the test moves: 1 ms per reading, from a fixed instant."""

    def __init__(self, start_s: float):
        self.now = start_s

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


def test_a_fleets_events_carry_the_clock_when_made_and_its_alerts_come_among_them():
    """Event time follows the clock whatever the rate (an in-order event is stamped with it,
    a late one 30 to 60 minutes, an out-of-order one at most 2 minutes behind); alerts are
    interleaved with the events at their event's time; the defects keep their ratios."""
    from itertools import islice

    from spark_jobs.local.fleet import ALERT, EVENT, Fleet, traffic

    fleet = Fleet(5000, devices=500, seed=3, late_ratio=0.02, out_of_order_ratio=0.05, duplicate_ratio=0.02,
                  malformed_ratio=0.005, alert_every=50)
    clock = _Clock(1_800_000_000.0)
    seen = []
    for to, record in islice(traffic(fleet, clock), 40_000):
        seen.append((to, record, clock.now))
    events = [(r, now) for to, r, now in seen if to == EVENT]
    kinds = Counter(r.kind for r, _ in events)

    def lag_ms(record, now) -> float:
        return now * 1000 - datetime.fromisoformat(json.loads(record.value)["event_time"]).timestamp() * 1000

    assert all(0 <= lag_ms(r, now) <= 1 for r, now in events if r.kind == "event")
    assert all(30 * 60_000 <= lag_ms(r, now) <= 60 * 60_000 + 1 for r, now in events if r.kind == "late")
    assert all(1000 <= lag_ms(r, now) <= 120_000 + 1 for r, now in events if r.kind == "out_of_order")
    for kind, ratio in (("late", 0.02), ("out_of_order", 0.05), ("duplicate", 0.02)):
        assert abs(kinds[kind] / len(events) - ratio) < ratio * 0.25, (kind, kinds)
    assert abs(sum(kinds[k] for k in MALFORMED_KINDS) / len(events) - 0.005) < 0.002
    alert_at = [n for n, (to, _, _) in enumerate(seen) if to == ALERT]
    assert alert_at[0] < len(seen) // 10 and alert_at[-1] > len(seen) * 9 // 10  # among the events, not after
    assert abs(len(alert_at) - kinds["event"] / 50) <= 1


def test_a_fleet_simulated_again_sends_ids_of_its_own_and_re_sends_only_within_a_run():
    """A device never reuses an id: the second run of the same fleet (same seed) a minute
    later is not the first run's records again, which dedup and the alert join would drop
    as duplicates. Re-sent records are the run's own, id and body."""
    from itertools import islice

    from spark_jobs.local.fleet import ALERT, Fleet, traffic

    fleet = Fleet(1000, devices=50, seed=7)

    def ids(start_s: float) -> tuple[Counter, set]:
        records = [(to, json.loads(r.value)) for to, r in islice(traffic(fleet, _Clock(start_s)), 5_000)
                   if r.kind in ("event", "late", "out_of_order", "duplicate", "alert", "silent_alert")]
        events = Counter(body["event_id"] for to, body in records if to != ALERT)
        return events, {body["alert_id"] for to, body in records if to == ALERT}

    first_events, first_alerts = ids(1_800_000_000.0)
    second_events, second_alerts = ids(1_800_000_060.0)
    assert first_events and first_alerts
    assert not set(first_events) & set(second_events) and not first_alerts & second_alerts
    assert sum(n - 1 for n in first_events.values()) > 0  # its re-sends carry its own ids


def test_a_fleets_devices_send_at_rates_of_their_own_that_add_up_to_its_rate():
    from spark_jobs.local.fleet import Fleet

    rates = Fleet(1000, devices=500, seed=3).device_rates()
    assert len(rates) == 500 and abs(sum(rates) - 1000) < 1e-6
    assert max(rates) > 4 * min(rates)  # a few chatty devices, many quiet ones


def test_simulate_sends_a_fleets_rate_by_the_wall_clock_for_its_duration(settings):
    started = time.time()
    result = sigflow(settings, "simulate", "--rate", "200", "--duration", "3", "--devices", "50", timeout=120)
    ended = time.time()
    assert result.returncode == 0, result.stdout + result.stderr
    events = topic_records(settings.kafka.bootstrap_servers, settings.streaming.events_topic)
    assert len(events) == 600  # 200 events/s for 3 s, defective ones among them
    times = [datetime.fromisoformat(body["event_time"]).timestamp() for _, value in events
             if isinstance(body := _json_object(value), dict) and "event_time" in body
             and isinstance(body["event_time"], str) and body["event_time"].endswith("Z")]
    in_run = [t for t in times if started - 1 <= t <= ended + 1]
    assert len(in_run) > 0.85 * len(events)  # all but the late, out-of-order and malformed ones
    assert max(in_run) - min(in_run) > 2  # spread over the run, as the clock went
    alerts = records_in(settings.kafka.bootstrap_servers, settings.streaming.alerts_topic)
    assert alerts > 0 and f"{alerts:,} alerts to {settings.streaming.alerts_topic}" in result.stdout


def test_simulate_refuses_numbers_that_make_no_traffic_in_one_line(settings):
    for options, named in ((["--rate", "0"], "--rate 0"), (["--late", "1.5"], "--late 1.5"),
                           (["--duration", "-3"], "--duration -3"), (["--devices", "0"], "--devices 0"),
                           (["--rate", "inf"], "--rate inf"), (["--duration", "nan"], "--duration nan")):
        result = sigflow(settings, "simulate", *options, timeout=60)
        assert result.returncode == 2 and f"sigflow: error: simulate: {named}" in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 2  # the error and its hint


def _json_object(value: bytes):
    try:
        return json.loads(value)
    except ValueError:
        return None
