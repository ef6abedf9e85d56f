"""Whether every row of a table names the checkpoint and batch that wrote it decides how a
rewind changes the table (a delete, or a restore). Rows an older sigflow wrote must be found
whichever stamp they lack, from the files' statistics or, without them, from the rows."""

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from spark_jobs.contracts.tables import DEVICE_EVENTS_RAW
from spark_jobs.runtime.delta.schema import arrow_schema, create_table
from spark_jobs.runtime.delta.table_access import every_row_stamped


def _rows(checkpoint_id, batch_id) -> pa.Table:
    row = {"key": b"d1", "value": b"{}", "topic": "t", "partition": 0, "offset": 1,
           "checkpoint_id": checkpoint_id, "batch_id": batch_id}
    return pa.Table.from_pylist([row], schema=arrow_schema(DEVICE_EVENTS_RAW))


def test_rows_without_either_stamp_are_found(tmp_path):
    uri = str(tmp_path / "raw")
    assert every_row_stamped(uri)  # no table: nothing a rewind could leave behind
    create_table(uri, DEVICE_EVENTS_RAW)
    write_deltalake(uri, _rows("c1", 0), mode="append")
    assert every_row_stamped(uri)
    # device_events_raw had batch_id before it had checkpoint_id: an older row has only one
    write_deltalake(uri, _rows(None, 3), mode="append")
    assert not every_row_stamped(uri)


def test_files_written_without_statistics_are_read(tmp_path):
    uri = str(tmp_path / "raw")
    create_table(uri, DEVICE_EVENTS_RAW)
    DeltaTable(uri).alter.set_table_properties({"delta.dataSkippingNumIndexedCols": "0"})  # as another writer may
    write_deltalake(uri, _rows("c1", 0), mode="append")
    assert "null_count.batch_id" not in pa.table(DeltaTable(uri).get_add_actions(flatten=True)).column_names
    assert every_row_stamped(uri)
    write_deltalake(uri, _rows("c1", None), mode="append")
    assert not every_row_stamped(uri)
