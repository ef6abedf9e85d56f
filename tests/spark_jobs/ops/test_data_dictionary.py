"""The data dictionary: what every column means, in the tables' own metadata, where any
reader finds it (Spark's DESCRIBE, delta-rs' schema), and what the rows were computed with,
as the tables' own properties."""

from __future__ import annotations

import re

import pyarrow as pa
from deltalake import DeltaTable

from spark_jobs.contracts.contract import SEVERITIES
from spark_jobs.contracts.dictionary import (
    SETTING_PROPERTY,
    SIGNAL_UNIT_PROPERTY,
    WINDOW_KINDS,
)
from spark_jobs.contracts.reasons import REASON_CODES
from spark_jobs.contracts.tables import ALL_TABLES, DEVICE_SIGNAL_AVERAGES
from spark_jobs.ops import deploy
from spark_jobs.runtime.delta import schema, table_access
from tests.helpers import run_job, send, single_partition, table
from tests.oracle import MINUTE_MS, Event

T0 = 1_795_000_000_000


def test_every_column_says_what_it_means_and_every_time_its_zone_and_clock():
    for spec in ALL_TABLES.values():
        meanings = spec.column_meanings
        assert list(meanings) == list(spec.columns)
        assert not [column for column, words in meanings.items() if not words], spec.name
        assert not set(dict(spec.meanings)) - set(spec.columns), spec.name  # no meaning for a column it lacks
        for field in spec.schema.fields:
            if field.dataType.simpleString() == "timestamp":
                words = meanings[field.name]
                assert "UTC" in words, (spec.name, field.name)
                assert re.search(r"event time|clock|Kafka timestamp|producer sent", words), (spec.name, field.name)
    # a column of a closed set lists exactly its values
    for spec in ALL_TABLES.values():
        for column, values in (("severity", SEVERITIES), ("reason_code", REASON_CODES), ("window_kind", WINDOW_KINDS)):
            if column in spec.columns and spec.name != "dq_results":  # a quality run's severity is its own
                assert re.findall(r"`([^`]+)`", spec.column_meanings[column]) == list(values), (spec.name, column)


def test_tables_carry_their_meanings_from_a_jobs_start_and_from_deploy(spark, settings):
    s = single_partition(settings).replace(signal_unit="dBm", tumbling_window="5 minutes")
    send(s, [Event(f"e{n}", "d1", T0 + n * MINUTE_MS, float(n)) for n in range(20)])
    run_job(spark, s, "windowed-averages")  # its tables made by the job's own start (delta-spark)
    uri = s.table_uri(DEVICE_SIGNAL_AVERAGES.name)
    described = {row.col_name: row.comment for row in spark.sql(f"DESCRIBE TABLE delta.`{uri}`").collect()
                 if row.col_name and not row.col_name.startswith("#")}
    assert described == DEVICE_SIGNAL_AVERAGES.column_meanings
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{uri}`").first()
    assert detail.description == DEVICE_SIGNAL_AVERAGES.description
    assert set(table(s, DEVICE_SIGNAL_AVERAGES.name).window_kind) <= set(WINDOW_KINDS)
    properties = DeltaTable(uri).metadata().configuration
    assert properties[SIGNAL_UNIT_PROPERTY] == "dBm"
    assert {key: value for key, value in properties.items() if key.startswith(SETTING_PROPERTY)} == {
        SETTING_PROPERTY + "watermark_delay": "10 minutes", SETTING_PROPERTY + "tumbling_window": "5 minutes",
        SETTING_PROPERTY + "sliding_window": "10 minutes", SETTING_PROPERTY + "sliding_step": "5 minutes"}

    deploy.ensure_tables(s)  # the other tables made by deploy (delta-rs)
    for name, spec in ALL_TABLES.items():
        held = DeltaTable(s.table_uri(name))
        assert {field.name: (field.metadata or {}).get("comment") for field in held.schema().fields} == \
            spec.column_meanings, name
        assert held.metadata().description == spec.description, name
    sessions = DeltaTable(s.table_uri("device_sessions")).metadata().configuration
    assert sessions[SETTING_PROPERTY + "session_gap"] == "30 minutes"


def test_a_table_made_before_the_dictionary_gets_its_words_once(settings):
    spec = DEVICE_SIGNAL_AVERAGES
    uri = settings.table_uri(spec.name)
    table_access.create(uri, schema.arrow_schema(spec), None, {})  # no comments, no description
    table_access.append(uri, pa.Table.from_pylist([], schema=schema.arrow_schema(spec)))
    done = dict(line.split(": ", 1) for line in deploy.ensure_tables(settings))
    assert f"described {len(spec.columns)} column(s) and the table" in done[f"table {spec.name}"]
    held = DeltaTable(uri)
    assert {f.name: f.metadata["comment"] for f in held.schema().fields} == spec.column_meanings
    again = dict(line.split(": ", 1) for line in deploy.ensure_tables(settings))
    assert again[f"table {spec.name}"] == "exists" and DeltaTable(uri).version() == held.version()
