"""What a reader relies on is declared for every table, over columns the table has."""

from spark_jobs.contracts.tables import ALL_TABLES, WRITTEN_BY
from spark_jobs.jobs import JOB_TABLES


def test_every_table_declares_a_key_of_its_own_columns():
    assert all(spec.key and spec.final for spec in ALL_TABLES.values())
    assert {name: set(spec.key) - set(spec.columns) for name, spec in ALL_TABLES.items()} == {
        name: set() for name in ALL_TABLES}


def test_every_appended_job_table_names_the_batch_that_wrote_each_row():
    """(A table kept current by merge holds a row per key, updated by any batch: it has none.)"""
    stamps = {column.split()[0] for column in WRITTEN_BY.split(", ")}
    appended = [spec for specs in JOB_TABLES.values() for spec in specs if not spec.merge_key]
    assert {spec.name: stamps <= set(spec.columns) for spec in appended} == {spec.name: True for spec in appended}
