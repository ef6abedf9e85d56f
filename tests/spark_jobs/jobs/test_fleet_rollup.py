"""Job fleet-rollup: the chained aggregation counts what the first one emits (docs/semantics.md, windows)."""

from tests.helpers import at, run_job, send, single_partition, table
from tests.oracle import Event


def test_second_aggregation_counts_the_first_ones_output(spark, settings):
    s = single_partition(settings).replace(
        watermark_delay="1 seconds", tumbling_window="3 seconds", fleet_window="6 seconds"
    )
    # values 6, 4, 5 at 10:00:01, :02, :03; per-device windows [:00, :03) max 6 and [:03, :06) max 5
    send(s, [Event("v6", "d1", at(10, 0, 1), 6.0), Event("v4", "d1", at(10, 0, 2), 4.0),
             Event("v5", "d1", at(10, 0, 3), 5.0)])
    run_job(spark, s, "fleet-rollup")
    send(s, [Event("later", "d1", at(10, 0, 20), 1.0)])  # moves the watermark past both windows
    run_job(spark, s, "fleet-rollup")
    rows = table(s, "fleet_signal_rollups")
    first = rows[rows.window_start.dt.second == 0].iloc[0]
    assert (first.device_window_count, first.max_signal, first.device_count) == (2, 6.0, 1)
    assert first.mean_device_avg_signal == (5.0 + 5.0) / 2  # avg([6, 4]) and avg([5])
    assert len(table(s, "late_events")) == 0
