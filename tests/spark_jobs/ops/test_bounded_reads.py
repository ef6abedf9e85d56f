"""On-call reads whose memory does not follow the tables: pipeline_metrics summed in chunks
and brought up to date from the files added since, and the report's time slice."""

from datetime import datetime, timedelta, timezone

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from spark_jobs.contracts.tables import PIPELINE_METRICS
from spark_jobs.ops import report
from spark_jobs.ops.metrics_totals import MetricsTotals
from spark_jobs.runtime.delta.schema import arrow_schema
from tests.conftest import make_settings
from tests.helpers import table

START = datetime(2026, 11, 20, tzinfo=timezone.utc)


def _batches(settings, job: str, ids: range, late: int) -> None:
    rows = [{"job": job, "batch_id": i, "batch_time": START + timedelta(minutes=i), "input_rows": 10 * i,
             "rows_dropped_by_watermark": late, "input_rows_per_second": float(i),
             "processed_rows_per_second": float(2 * i), "state_rows": 100 + i} for i in ids]
    write_deltalake(settings.table_uri("pipeline_metrics"),
                    pa.Table.from_pylist(rows, schema=arrow_schema(PIPELINE_METRICS)), mode="append")


def _expected(settings) -> dict:
    """Per job, from the whole table read at once: batches, sums, the latest batch's row."""
    frame = table(settings, "pipeline_metrics").sort_values("batch_id")
    return {job: (len(rows), int(rows.input_rows.sum()), int(rows.rows_dropped_by_watermark.sum()),
                  int(rows.iloc[-1].state_rows)) for job, rows in frame.groupby("job")}


def _figures(totals: MetricsTotals) -> dict:
    return {job: (f.batches, f.sums["input_rows"], f.sums["rows_dropped_by_watermark"], f.latest["state_rows"])
            for job, f in totals.refresh().items()}


def test_pipeline_metrics_totals_read_what_is_new_and_start_over_after_a_delete(tmp_path):
    s = make_settings(tmp_path / "data", "localhost:1")
    totals = MetricsTotals(s, ("input_rows", "rows_dropped_by_watermark"), chunk_rows=7)  # several chunks
    assert totals.refresh() == {}
    _batches(s, "dedup", range(0, 20), late=1)
    _batches(s, "ingest", range(0, 5), late=0)
    assert _figures(totals) == _expected(s)
    read_at = totals.version
    _batches(s, "dedup", range(20, 23), late=2)
    assert _figures(totals) == _expected(s) and totals.version == read_at + 1
    DeltaTable(s.table_uri("pipeline_metrics")).delete("job = 'dedup' AND batch_id >= 10")  # a rewind
    assert _figures(totals) == _expected(s)
    assert _figures(totals)["dedup"] == (10, sum(10 * i for i in range(10)), 10, 109)


def test_the_report_charts_the_span_before_each_tables_newest_row(tmp_path):
    s = make_settings(tmp_path / "data", "localhost:1")
    _batches(s, "dedup", range(0, 3 * 24 * 60, 60), late=0)  # hourly batches over three days
    newest = START + timedelta(minutes=3 * 24 * 60 - 60)
    shown = report.recent(s, "pipeline_metrics", ["job", "batch_time"], "batch_time", 6 * 3600)
    assert sorted(shown.batch_time) == [newest - timedelta(hours=h) for h in range(6, -1, -1)]
