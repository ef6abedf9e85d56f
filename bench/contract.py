"""What checking records against the event contract costs, beside ``from_json``.

Every job parses Kafka records: sigflow's with the contract (contracts/events.py: each
field's exact JSON type, times, limits, a reason code per refused record), the hand-written
jobs (bench/handwritten.py) with ``from_json``, which checks no type. This measures the
parses alone, on one Spark session, over the same records held in memory (no Kafka, no
Delta): each warmed by one run, then --tries runs of each, the order alternating, each
written to Spark's ``noop`` sink; the medians.

- ``from_json``: the hand-written jobs' parse.
- ``readings``: the valid events' key, time and signal, what windowed-averages, sessions,
  fleet-rollup and alert-join read (Spark prunes the other columns below their dedup, so
  their extras are never computed).
- ``valid events``: what dedup reads (``valid_events``: every typed column of the records
  that meet the contract, extras included).
- ``every record``: what ingest computes (typed columns, extras and the reason of every
  record).

Each contract parse runs twice: with the flat-record parser (contracts/flat_records.py), as the
jobs run, and through the checks alone, as a session without the parser's JAR runs.

- ``late rule``: the valid events at or behind a watermark that 2% of the records' times are
  at or behind, as a batch's late events are found (jobs/event_time.py, ``behind_watermark``):
  with the records whose time is surely after it skipped before the parse, as the jobs run,
  and with every record parsed.

    python -m bench.contract [--events 100000] [--devices 1000] [--tries 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from datetime import datetime, timezone

from pyspark.sql import functions as F

from bench import handwritten as bench_handwritten
from spark_jobs.config import load_settings
from spark_jobs.contracts.events import (
    EVENT_CONTRACT,
    KAFKA_RECORD_SCHEMA,
    with_contract_columns,
)
from spark_jobs.jobs.event_time import behind_watermark, valid_events
from spark_jobs.local.simulate import generate_events

READINGS = ["device_id", "event_id", "event_time", "signal"]
# what valid_events gives dedup (contracts/events.py, parse_device_events)
VALID_EVENT_COLUMNS = [*READINGS, "extras", "topic", "partition", "offset", "timestamp"]


def parse_costs(spark, settings, events: int, devices: int, tries: int, say=print) -> dict[str, list[float]]:
    """ms per parse of ``events`` records (1% malformed, as in the bench), per variant."""
    records = generate_events(events, devices=devices, seed=1, late_ratio=0.01, duplicate_ratio=0.02,
                              malformed_ratio=0.01)
    kafka_time = datetime.now(timezone.utc)
    rows = [(r.key, r.value, settings.streaming.events_topic, i % 3, i, kafka_time, 0) for i, r in enumerate(records)]
    held = spark.createDataFrame(rows, KAFKA_RECORD_SCHEMA).repartition(spark.sparkContext.defaultParallelism).persist()
    held.count()
    max_ahead = settings.streaming.max_clock_ahead

    def checked(flat_parser: bool):
        return with_contract_columns(held, EVENT_CONTRACT, max_ahead, flat_parser).where(F.col("reason").isNull())

    watermark_ms = _watermark_behind(records, LATE_SHARE)
    streaming = settings.streaming
    variants = {
        "from_json": lambda: bench_handwritten._typed(held, bench_handwritten.EVENT_SCHEMA, "event_time"),
        "late rule": lambda: behind_watermark(streaming, held, watermark_ms),
        "late rule, every record parsed": lambda: valid_events(streaming, held).where(
            F.col("event_time") <= F.timestamp_millis(F.lit(watermark_ms))),
    }
    for way, flat_parser in (("", True), (", checks alone", False)):
        variants |= {
            f"contract, readings{way}": lambda p=flat_parser: checked(p).select(*READINGS),
            f"contract, valid events{way}": lambda p=flat_parser: checked(p).select(*VALID_EVENT_COLUMNS),
            f"contract, every record{way}": lambda p=flat_parser: with_contract_columns(
                held, EVENT_CONTRACT, max_ahead, p),
        }

    def timed(build) -> float:
        frame = build()
        started = time.perf_counter()
        frame.write.format("noop").mode("overwrite").save()
        return (time.perf_counter() - started) * 1000

    for build in variants.values():
        timed(build)  # warm-up: the JIT compiles each plan's code once it has seen it run
    measured: dict[str, list[float]] = {name: [] for name in variants}
    for attempt in range(tries):
        order = list(variants.items()) if attempt % 2 == 0 else list(reversed(variants.items()))
        for name, build in order:
            measured[name].append(timed(build))
    held.unpersist()
    base = statistics.median(measured["from_json"])
    for name, runs in measured.items():
        median = statistics.median(runs)
        say(f"parse {name}: {' / '.join(f'{ms:,.0f}' for ms in runs)} ms; median {median:,.0f} ms "
            f"({median / base:.2f} of from_json)")
    return measured


LATE_SHARE = 0.02  # of a fleet's events, late in the capacity bench's traffic (docs/benchmarks.md)


def _watermark_behind(records, share: float) -> int:
    """The epoch ms that ``share`` of the records' event times are at or behind."""
    times = []
    for record in records:
        try:
            text = json.loads(record.value)["event_time"]
            times.append(int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # a malformed record: none of the rule's
    times.sort()
    return times[int(len(times) * share)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--tries", type=int, default=8, help="runs of each parse after its warm-up")
    args = parser.parse_args(argv)

    from spark_jobs.runtime.spark import get_spark

    with tempfile.TemporaryDirectory(prefix="sigflow-bench-contract-") as data_dir:
        settings = load_settings(env={}, overrides={"data_dir": data_dir, "shuffle_partitions": 2})
        print(f"bench_contract: {args.events:,} events, {args.devices:,} devices, {args.tries} runs each")
        parse_costs(get_spark(settings, "sigflow-bench-contract"), settings, args.events, args.devices, args.tries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
