"""How the event tables' Parquet files are encoded: a column whose value differs in every row
gets no dictionary (Parquet's writer would build one and then write the values again without
it, or keep a larger one for times); a repeated one keeps its dictionary, which makes it small."""

from datetime import datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq

from spark_jobs.contracts.tables import DEVICE_EVENTS
from spark_jobs.runtime.delta.commit_info import CommitInfo
from spark_jobs.runtime.delta.sink import DeltaSink

ROWS = 3000


def _dictionary_encoded(uri: str) -> dict[str, bool]:
    """Per column: whether every data file wrote it with a dictionary page."""
    found: dict[str, bool] = {}
    files = list(Path(uri).glob("*.parquet"))
    assert files
    for file in files:
        metadata = pq.ParquetFile(file).metadata
        for group in range(metadata.num_row_groups):
            for index in range(metadata.num_columns):
                column = metadata.row_group(group).column(index)
                name = column.path_in_schema.split(".")[0]
                found[name] = found.get(name, True) and column.dictionary_page_offset is not None
    return found


def test_an_events_unique_columns_have_no_dictionary_and_its_repeated_ones_keep_theirs(spark, settings):
    sink = DeltaSink(spark, settings)
    sink.ensure_table(DEVICE_EVENTS)
    start = datetime(2026, 1, 1)
    rows = [(f"e{i}", f"device-{i % 7}", start + timedelta(milliseconds=37 * i), i * 0.37, {}, "device-events",
             i % 3, 1000 + i, start + timedelta(milliseconds=41 * i), start, "cp", 0) for i in range(ROWS)]
    frame = spark.createDataFrame(rows, DEVICE_EVENTS.schema).coalesce(1)
    info = CommitInfo(job="ingest", checkpoint_id="cp", app_id="app", batch_id=0)
    assert sink.append(frame, DEVICE_EVENTS, info, replay_possible=False) == ROWS

    encoded = _dictionary_encoded(settings.table_uri(DEVICE_EVENTS.name))
    assert {column: encoded[column] for column in ("event_id", "event_time", "signal", "offset",
                                                    "kafka_timestamp")} == dict.fromkeys(
        ("event_id", "event_time", "signal", "offset", "kafka_timestamp"), False)
    assert {column: encoded[column] for column in ("device_id", "topic", "checkpoint_id")} == dict.fromkeys(
        ("device_id", "topic", "checkpoint_id"), True)
    written = spark.read.format("delta").load(settings.table_uri(DEVICE_EVENTS.name))
    assert sorted((r.event_id, r.offset) for r in written.select("event_id", "offset").collect()) == sorted(
        (f"e{i}", 1000 + i) for i in range(ROWS))
