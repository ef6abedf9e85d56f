"""The sessions job's state step, measured against its candidates in one run: each variant
runs the whole job (Kafka to device_sessions) over the same records, warmed by one
full-size run into throwaway tables, then --tries runs each in turn, the order rotating,
each from a fresh checkpoint. Prints every rate and the medians beside plain ingest's,
and whether a candidate's device_sessions equal the job's.

    python -m bench.sessions [--events 100000] [--devices 1000] [--tries 3]

Variants:
- the job as it ships: ``applyInPandasWithState`` grouped by a bucket of devices, each
  call working on all the bucket's devices with numpy.
- the same state function grouped by device: a call per device, as the job ran before.
- two bounds: the per-device operator with a state function that does nothing (what a call
  per device costs at least), and no session step at all (parse, dedup and Delta alone).

Run at --devices 1,000 and 10,000: a per-device step's cost grows with the fleet.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout

from bench import handwritten as bench_handwritten
from spark_jobs.config import StreamingSettings, load_settings
from spark_jobs.jobs.event_time import drop_repeats, valid_events, with_event_watermark
from spark_jobs.jobs.sessions import OUTPUT_SCHEMA, STATE_SCHEMA, session_updater
from spark_jobs.local import broker
from spark_jobs.local.simulate import generate_events
from spark_jobs.runtime.kafka import admin as kafka_admin
from tests.helpers import confluent_produce


def _by_device(settings: StreamingSettings, records: DataFrame):
    """The job's input to its state step: valid events, deduplicated, grouped by device."""
    events = valid_events(settings, records)
    return drop_repeats(with_event_watermark(settings, events)).select("device_id", "event_time", "signal") \
        .groupBy("device_id")


def build_per_device(settings: StreamingSettings, records: DataFrame) -> DataFrame:
    """The job's state function called once per device instead of per bucket of devices."""
    return _by_device(settings, records).applyInPandasWithState(
        session_updater(settings.session_gap.ms, with_open=True), outputStructType=OUTPUT_SCHEMA,
        stateStructType=STATE_SCHEMA, outputMode="append", timeoutConf=GroupStateTimeout.EventTimeTimeout)


def _noop(key, batches, state):
    for _ in batches:
        pass
    return iter(())


def build_noop(settings: StreamingSettings, records: DataFrame) -> DataFrame:
    """The operator with a state function that does nothing: what the Python step cannot save."""
    return _by_device(settings, records).applyInPandasWithState(
        _noop, outputStructType=OUTPUT_SCHEMA, stateStructType=STATE_SCHEMA, outputMode="append",
        timeoutConf=GroupStateTimeout.EventTimeTimeout)


def build_no_state(settings: StreamingSettings, records: DataFrame) -> DataFrame:
    """Dedup alone, no session step: what the rest of the job costs."""
    events = valid_events(settings, records)
    return (drop_repeats(with_event_watermark(settings, events)).select(
        "device_id", F.col("event_time").alias("session_start"), F.col("event_time").alias("session_end"),
        F.lit(1).cast("bigint").alias("event_count"), F.col("signal").alias("avg_signal"),
        F.col("signal").alias("min_signal"), F.col("signal").alias("max_signal"), F.lit("x").alias("closed_reason")))


JOB = "a state per bucket of devices (the job)"
PER_DEVICE = "a state per device"
SAME_RULE = (JOB, PER_DEVICE)


def _sessions(delta_root: Path) -> list[tuple]:
    from spark_jobs.runtime.delta.table_access import read_pandas

    rows = read_pandas(str(delta_root / "device_sessions"), columns=["device_id", "session_start", "session_end",
                                                                      "event_count"])
    return sorted(rows.itertuples(index=False, name=None))


def variants():
    from dataclasses import replace

    from spark_jobs.jobs.sessions import SESSIONS

    return {
        JOB: SESSIONS,
        PER_DEVICE: replace(SESSIONS, build=build_per_device),
        "a state per device, a state function doing nothing": replace(SESSIONS, build=build_noop),
        "no session step (dedup only)": replace(SESSIONS, build=build_no_state),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--tries", type=int, default=3)
    parser.add_argument("--only", nargs="+", default=None)
    args = parser.parse_args(argv)

    from spark_jobs.runtime.runner import JobRun
    from spark_jobs.runtime.spark import get_spark

    data = Path(tempfile.mkdtemp(prefix="sigflow-bench-sessions-"))
    base = load_settings(env={}, overrides={"data_dir": str(data), "broker_port": 0, "shuffle_partitions": 2})
    info = broker.start(base)
    try:
        s = base.replace(kafka_bootstrap_servers=info.bootstrap_servers)
        kafka_admin.create_topics(info.bootstrap_servers, [s.streaming.events_topic], s.kafka.topic_partitions,
                                  s.kafka.topic_retention_ms)
        records = generate_events(args.events, devices=args.devices, seed=1, late_ratio=0.01, duplicate_ratio=0.02,
                                  malformed_ratio=0.01)
        confluent_produce(info.bootstrap_servers, s.streaming.events_topic, [(r.key, r.value) for r in records])
        spark = get_spark(s, "sigflow-bench-sessions")
        chosen = {name: v for name, v in variants().items() if not args.only or name in args.only}

        def run(name: str, tag: str) -> float:
            job = chosen[name]
            fresh = s.replace(checkpoint_root=str(data / f"{tag}-cp"), delta_root=str(data / f"{tag}-delta"))
            started = time.perf_counter()
            JobRun(job, fresh, spark).run_available_now()
            return args.events / (time.perf_counter() - started)

        def plain(tag: str) -> float:
            return bench_handwritten.rate(spark, s, "plain ingest", args.events, data / tag)

        runners = {name: (lambda tag, name=name: run(name, tag)) for name in chosen} | {"plain ingest": plain}
        for name, runner in runners.items():
            runner(f"warm-{name}")
        rates: dict[str, list[float]] = {name: [] for name in runners}
        names = list(runners)
        for attempt in range(args.tries):
            for name in names[attempt % len(names):] + names[:attempt % len(names)]:
                rates[name].append(runners[name](f"{name}-{attempt}".replace(" ", "-")))
        # the candidates must give the job's sessions, or their rate means nothing
        same = {name: _sessions(data / f"warm-{name}-delta") == _sessions(data / f"warm-{JOB}-delta")
                for name in chosen if name in SAME_RULE and JOB in chosen}
        plain_median = statistics.median(rates["plain ingest"])
        for name, measured in rates.items():
            median = statistics.median(measured)
            rule = "" if name not in same else "; the job's sessions" if same[name] else "; NOT the job's sessions"
            print(f"{name}: {' / '.join(f'{r:,.0f}' for r in measured)} events/s; median {median:,.0f} "
                  f"({median / plain_median:.2f} of plain ingest){rule}")
    finally:
        broker.stop(base)
        shutil.rmtree(data, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
