"""The heap holds one committed version of each state store: with five jobs keeping the
events' ids in one application, a second version filled its old generation at 5,000
events/s. Read from Spark's own figures for the state (a query's progress): the memory its
provider holds against the size of the version the batch left."""

import json

import pytest


@pytest.mark.timeout(300)
def test_a_stateful_query_keeps_one_version_of_its_state_in_the_heap(spark, tmp_path):
    source = tmp_path / "events"
    source.mkdir()
    events = (spark.readStream.schema("event_id STRING, event_time TIMESTAMP").json(str(source))
              .withWatermark("event_time", "1 minute").dropDuplicatesWithinWatermark(["event_id"]))
    query = (events.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "checkpoint"))
             .queryName("state_memory").start())
    try:
        held = []
        for batch in range(5):
            # each batch's ids are new and its events two minutes on: the watermark drops the
            # ids before, so every version differs from the one before it
            rows = [{"event_id": f"e-{batch}-{n}", "event_time": f"2026-01-01T00:{2 * batch:02d}:{n % 60:02d}Z"}
                    for n in range(2_000)]
            (source / f"{batch}.json").write_text("\n".join(json.dumps(row) for row in rows))
            query.processAllAvailable()
            state = query.lastProgress["stateOperators"][0]
            held.append((state["memoryUsedBytes"], state["customMetrics"]["stateOnCurrentVersionSizeBytes"]))
    finally:
        query.stop()
    # from the second batch on a provider could hold the version before as well
    assert all(in_heap <= 1.1 * current for in_heap, current in held[1:]), held
