"""A job recomputed from device_events_raw against the same job reading Kafka, side by side.

Per size of raw (--rows): the records are sent to Kafka and ingest writes them to raw; then
the job (--job) is rebuilt from scratch in turn, --tries times each, the order alternating,
after one warm-up of each: from Kafka (``recover --from earliest``: its tables emptied, a new
checkpoint from Kafka's first offset) and from raw (``recover --from raw``: the same, reading
raw, then Kafka from where raw ends). A rate is the records over the seconds from planning
to the run's end.

Then what a recompute costs as raw ages: Kafka's records are deleted (as retention would),
and the job's last batches (about --replay-records) re-run by a rewind, which must read them from raw: the
plan's and the run's seconds, which should follow the rows replayed, not raw's size.

    python -m bench.recompute [--rows 1000000 10000000] [--job windowed-averages] [--tries 2]
                              [--replay-records 250000] [--batch-records N]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from spark_jobs.config import load_settings
from spark_jobs.local import broker
from spark_jobs.local.simulate import generate_events
from spark_jobs.runtime.kafka import admin as kafka_admin
from tests.helpers import confluent_produce

CHUNK = 500_000  # records generated and sent at a time: memory stays flat at any size
SOURCES = {"Kafka": "earliest", "raw": "raw"}


def send(settings, rows: int) -> None:
    """``rows`` device events, event times a second apart, the simulator's defects mixed in."""
    sent = 0
    while sent < rows:
        count = min(CHUNK, rows - sent)
        records = generate_events(count, devices=1000, seed=sent, start_ms=1_790_000_000_000 + sent * 1000,
                                  late_ratio=0.01, duplicate_ratio=0.02, malformed_ratio=0.005)
        confluent_produce(settings.kafka.bootstrap_servers, settings.streaming.events_topic,
                          [(r.key, r.value) for r in records])
        sent += count


def rebuild(spark, settings, job: str, source: str) -> float:
    """Seconds to plan and apply a recover of ``job`` from ``source``, then run it to the end."""
    from spark_jobs.jobs.registry import get_job
    from spark_jobs.ops import restart
    from spark_jobs.runtime.runner import JobRun

    started = time.perf_counter()
    plan = restart.plan(settings, job, "recover", recover_from=source, force=True)
    if plan.refusals:
        raise SystemExit(plan.describe())
    plan.apply()
    JobRun(get_job(job), settings, spark).run_available_now()
    return time.perf_counter() - started


def delete_kafka_records(settings) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from spark_jobs.runtime.kafka import offsets as kafka_offsets

    bootstrap, topic = settings.kafka.bootstrap_servers, settings.streaming.events_topic
    ends = kafka_offsets.topic_bounds(bootstrap, topic)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, p, end) for p, (_, end) in ends.items()]).values():
        future.result(60)


def rewind_from_raw(spark, settings, job: str, records: int) -> tuple[float, float, int]:
    """(plan seconds, apply-and-run seconds, records replayed) of a rewind of ``job`` to its
    last batch at least ``records`` before its end, whose records only raw holds."""
    from spark_jobs.jobs.registry import get_job
    from spark_jobs.ops import restart
    from spark_jobs.runtime.checkpoint.directory import Checkpoint
    from spark_jobs.runtime.runner import JobRun

    checkpoint = Checkpoint(settings.checkpoint_uri(job))
    end = checkpoint.committed_offsets()

    def behind(batch: int) -> int:
        start = checkpoint.offsets(batch).sources[0]
        return sum(o - int(start.get(t, {}).get(p, 0)) for t, parts in end.items() for p, o in parts.items())

    target = max((b for b in checkpoint.committed_batches() if behind(b) >= records), default=None)
    if target is None:
        raise SystemExit(f"no batch of {job} is {records:,} records before its end: lower --replay-records")
    replayed = behind(target)
    began = time.perf_counter()
    plan = restart.plan(settings, job, "rewind", to_batch=target)
    planned = time.perf_counter() - began
    if plan.refusals or "device_events_raw" not in plan.describe():
        raise SystemExit(plan.describe())
    began = time.perf_counter()
    plan.apply()
    JobRun(get_job(job), settings, spark).run_available_now()
    return planned, time.perf_counter() - began, replayed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--job", default="windowed-averages")
    parser.add_argument("--tries", type=int, default=2)
    parser.add_argument("--replay-records", type=int, default=250_000,
                        help="about how many records the rewind past retention re-runs")
    parser.add_argument("--batch-records", type=int, help="max_offsets_per_trigger (default: the setting's)")
    parser.add_argument("--no-warm-up", action="store_true", help="no warm-up run of each (a smoke run)")
    args = parser.parse_args(argv)

    from spark_jobs.runtime.launch import run
    from spark_jobs.runtime.spark import get_spark

    rewinds = {}
    for rows in args.rows:
        data = Path(tempfile.mkdtemp(prefix="sigflow-bench-recompute-"))
        base = load_settings(env={}, overrides={"data_dir": str(data), "broker_port": 0, "shuffle_partitions": 2})
        info = broker.start(base)
        try:
            s = base.replace(kafka_bootstrap_servers=info.bootstrap_servers)
            if args.batch_records:
                s = s.replace(max_offsets_per_trigger=args.batch_records)
            kafka_admin.create_topics(info.bootstrap_servers, [s.streaming.events_topic, s.streaming.alerts_topic],
                                      s.kafka.topic_partitions, s.kafka.topic_retention_ms)
            began = time.perf_counter()
            send(s, rows)
            print(f"{rows:,} records sent in {time.perf_counter() - began:.0f} s", flush=True)
            began = time.perf_counter()
            run("ingest", s)
            print(f"  ingest wrote them to device_events_raw in {time.perf_counter() - began:.0f} s", flush=True)
            spark = get_spark(s, "sigflow-bench-recompute")
            for name, source in SOURCES.items() if not args.no_warm_up else ():
                print(f"  warm-up from {name}: {rows / rebuild(spark, s, args.job, source):,.0f} records/s", flush=True)
            rates: dict[str, list[float]] = {name: [] for name in SOURCES}
            for attempt in range(args.tries):
                order = list(SOURCES) if attempt % 2 == 0 else list(SOURCES)[::-1]
                for name in order:
                    rates[name].append(rows / rebuild(spark, s, args.job, SOURCES[name]))
                    print(f"  {args.job} from {name}: {rates[name][-1]:,.0f} records/s", flush=True)
            kafka, raw = (statistics.median(rates[name]) for name in SOURCES)
            print(f"recompute {args.job} rows={rows} from_kafka={kafka:,.0f}/s from_raw={raw:,.0f}/s "
                  f"ratio={raw / kafka:.2f}", flush=True)
            delete_kafka_records(s)
            rewinds[rows] = rewind_from_raw(spark, s, args.job, args.replay_records)
            planned, ran, replayed = rewinds[rows]
            print(f"  past Kafka's retention, a rewind re-runs its last batches from raw: {replayed:,} records, "
                  f"planned in {planned:.1f} s, applied and run in {ran:.1f} s", flush=True)
        finally:
            broker.stop(base)
            shutil.rmtree(data, ignore_errors=True)
    if len(rewinds) > 1:
        (small, (p0, r0, n0)), (large, (p1, r1, n1)) = min(rewinds.items()), max(rewinds.items())
        print(f"rewind-from-raw rows={small}->{large} replayed={n0}->{n1} plan_s={p0:.1f}->{p1:.1f} "
              f"run_s={r0:.1f}->{r1:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
