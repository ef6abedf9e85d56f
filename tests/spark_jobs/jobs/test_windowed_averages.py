"""Job windowed-averages: watermark, late data and append-once windows, against an oracle."""

import json
import random
from datetime import datetime, timezone

from tests.helpers import DAY_MS, at, run_job, send, single_partition, table
from tests.oracle import MINUTE_MS, Event, EventTimeOracle


def window_rows(settings):
    rows = table(settings, "device_signal_averages")
    return {
        (r.device_id, r.window_kind, int(r.window_start.timestamp() * 1000), int(r.window_end.timestamp() * 1000),
         r.event_count, round(r.avg_signal, 6), r.min_signal, r.max_signal)
        for r in rows.itertuples()
    }


def test_late_event_updates_its_windows_until_the_watermark_passes_them(spark, settings):
    s = single_partition(settings)
    run = lambda: run_job(spark, s, "windowed-averages")  # noqa: E731
    send(s, [Event("a", "d1", at(12, 10), 1.0)])
    run()  # watermark is now 12:00
    send(s, [Event("b", "d1", at(12, 4), 2.0)])
    run()  # 12:04 is behind the newest event but not the watermark: it counts
    send(s, [Event("c", "d1", at(12, 33), 3.0)])
    run()  # watermark 12:23: windows ending by then are final
    before = window_rows(s)
    send(s, [Event("d", "d1", at(12, 4), 4.0)])
    run()  # too late now

    assert {(k, (st - DAY_MS) // MINUTE_MS, n, mx) for _, k, st, _, n, _, _, mx in before if mx == 2.0} == {
        ("sliding", 11 * 60 + 55, 1, 2.0), ("sliding", 12 * 60, 1, 2.0), ("tumbling", 12 * 60, 1, 2.0)
    }
    assert window_rows(s) == before  # no window changed
    late = table(s, "late_events")
    assert late[["event_id", "job", "batch_id"]].values.tolist() == [["d", "windowed-averages", late.batch_id[0]]]
    assert late.watermark[0] == datetime(2026, 11, 22, 12, 23, tzinfo=timezone.utc)


def test_an_event_exactly_at_the_watermark_is_late_in_every_window_and_one_ms_after_is_kept(spark, settings):
    """The project's rule (docs/semantics.md): an event at or behind the watermark is late and
    dropped whole. Spark's window-end rule alone would keep 10:10:00.000 in [10:10, 10:15),
    and would count an event at 10:09 in the sliding window [10:05, 10:15) but not in the
    tumbling [10:05, 10:10): one event in some of its windows only."""
    s = single_partition(settings)
    send(s, [Event("first", "d1", at(10, 20), 1.0)])
    run_job(spark, s, "windowed-averages")  # the watermark is now 10:10
    send(s, [Event("at", "d1", at(10, 10), 2.0), Event("after", "d1", at(10, 10) + 1, 3.0),
             Event("before", "d1", at(10, 9), 4.0)])
    run_job(spark, s, "windowed-averages")
    send(s, [Event("flush", "d1", at(11, 0), 0.0)])
    run_job(spark, s, "windowed-averages")

    assert sorted(table(s, "late_events").event_id) == ["at", "before"]
    rows = window_rows(s)
    with_after = {(kind, (start - DAY_MS) // MINUTE_MS) for _, kind, start, _, n, _, _, mx in rows if mx == 3.0}
    assert with_after == {("tumbling", 10 * 60 + 10), ("sliding", 10 * 60 + 5), ("sliding", 10 * 60 + 10)}
    assert not any(mn in (2.0, 4.0) or mx in (2.0, 4.0) for *_, mn, mx in rows)


def test_randomised_stream_with_restarts_matches_the_oracle(spark, settings):
    s = single_partition(settings).replace(max_offsets_per_trigger=40)
    rng = random.Random(11)
    oracle = EventTimeOracle()
    sent: list[Event] = []
    clock = at(8, 0)
    for step in range(4):  # each step: produce, then a run (a restart) of several batches
        events = []
        for n in range(120):
            clock += rng.randint(2, 12) * 1000
            roll = rng.random()
            if roll < 0.08 and sent:
                events.append(rng.choice(sent[-60:]))  # duplicate
                continue
            t = clock - rng.randint(0, 9) * MINUTE_MS if roll < 0.25 else clock  # out of order
            t = t - 40 * MINUTE_MS if roll > 0.96 else t  # late
            events.append(Event(f"s{step}-{n}", f"d{rng.randint(1, 4)}", t, round(rng.uniform(0, 100), 3)))
        send(s, events)
        sent += events
        run_job(spark, s, "windowed-averages")
        for first in range(0, len(events), 40):
            oracle.run_batch(events[first:first + 40])
        oracle.run_no_data_batch()

    assert window_rows(s) == oracle.window_rows()
    late = table(s, "late_events")
    assert sorted(late["event_id"]) == sorted(e.event_id for e, _ in oracle.late)
    # every valid event is in an output window, a duplicate, late, or in a window still open
    open_events = sum(len(v) for k, v in oracle.open_windows.items() if k[1] == "tumbling")
    counted = sum(r[4] for r in window_rows(s) if r[1] == "tumbling")
    assert counted + open_events + len(oracle.duplicates) + len(late) == len(sent)
    metrics = table(s, "pipeline_metrics")
    # Spark's own count of what its operators dropped, counted once though each window kind
    # deduplicates on its own, against the late_events rows
    assert metrics.rows_dropped_by_watermark.sum() == len(late) > 0
    assert json.loads(metrics.sort_values("batch_id").progress_json.iloc[-1])["batchId"] == metrics.batch_id.max()
