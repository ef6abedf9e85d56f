"""`make bench`: how close to the limit the embedded path runs. Prints figures, asserts nothing.

In one run, on one broker: producer rates (kafka-python, confluent-kafka), the raw consume
ceiling of the fastest Python client (confluent-kafka), then each job's end-to-end events
per second over the same topic from a fresh checkpoint, and its ratio to that ceiling; the
JVM's peak memory. The figures are appended to docs/benchmarks.md (earlier runs are kept).

    python -m tests.bench [--events 20000] [--devices 1000] [--no-write]
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import psutil

from spark_jobs import broker, kafka_client
from spark_jobs.config import load_settings
from spark_jobs.simulate import generate_alerts, generate_events, produce_records

JOBS = ("ingest", "dedup", "windowed-averages", "alert-join", "sessions")
REPORT = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def confluent_produce(bootstrap: str, topic: str, pairs) -> int:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000})
    for key, value in pairs:
        while True:
            try:
                producer.produce(topic, value=value, key=key)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)
    return len(pairs)


def consume_all(bootstrap: str, topic: str) -> int:
    from confluent_kafka import TopicPartition

    partitions = kafka_client.topic_partitions(bootstrap, topic)
    ends = kafka_client.offset_bounds(bootstrap, topic, partitions)
    consumer = kafka_client.consumer(bootstrap, **{"fetch.max.bytes": 52428800})
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    seen, done = 0, set()
    while len(done) < len(partitions):
        for msg in consumer.consume(10000, timeout=1.0):
            if msg.error():
                done.add(msg.partition())
            else:
                seen += 1
                if msg.offset() + 1 >= ends[msg.partition()][1]:
                    done.add(msg.partition())
    consumer.close()
    return seen


def jvm_peak_rss_mb() -> float:
    """Peak resident memory of Spark's JVM (VmHWM), a child of this process."""
    peaks = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "java" in child.name():
                status = Path(f"/proc/{child.pid}/status").read_text()
                hwm = next(line for line in status.splitlines() if line.startswith("VmHWM"))
                peaks.append(int(hwm.split()[1]) / 1024)
        except (psutil.Error, OSError, StopIteration):
            continue
    return max(peaks, default=0.0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--no-write", action="store_true", help="do not append to docs/benchmarks.md")
    args = parser.parse_args(argv)

    from spark_jobs.jobs import get_job
    from spark_jobs.runner import JobRun
    from spark_jobs.spark import get_spark

    data = Path(tempfile.mkdtemp(prefix="sigflow-bench-"))
    base = load_settings(env={}, overrides={"data_dir": str(data), "broker_port": 0, "shuffle_partitions": 2})
    info = broker.start(base)
    figures: dict[str, float] = {}
    try:
        s = base.replace(kafka_bootstrap_servers=info.bootstrap_servers)
        kafka_client.create_topics(info.bootstrap_servers, [s.events_topic, s.alerts_topic, "bench-kp", "bench-ck"],
                                   s.topic_partitions, s.topic_retention_ms)
        records = generate_events(args.events, devices=args.devices, seed=1, late_ratio=0.01,
                                  duplicate_ratio=0.02, malformed_ratio=0.01)
        pairs = [(r.key, r.value) for r in records]
        print(f"bench: {len(pairs)} events, {args.devices} devices, broker {info.bootstrap_servers}", flush=True)

        started = time.perf_counter()
        produce_records(info.bootstrap_servers, "bench-kp", pairs)
        figures["produce kafka-python"] = _rate(len(pairs), time.perf_counter() - started)
        started = time.perf_counter()
        confluent_produce(info.bootstrap_servers, s.events_topic, pairs)
        figures["produce confluent-kafka"] = _rate(len(pairs), time.perf_counter() - started)
        produce_records(info.bootstrap_servers, s.alerts_topic,
                        [(a.key, a.value) for a in generate_alerts(records, every=50, seed=1)])
        started = time.perf_counter()
        seen = consume_all(info.bootstrap_servers, s.events_topic)
        ceiling = figures["consume ceiling (confluent-kafka)"] = _rate(seen, time.perf_counter() - started)
        for name, value in figures.items():
            print(f"  {name}: {value:,.0f} events/s", flush=True)

        spark = get_spark(s, "sigflow-bench")
        warm = s.replace(checkpoint_root=str(data / "warm-cp"), delta_root=str(data / "warm-delta"),
                         max_offsets_per_trigger=500)
        JobRun(get_job("ingest"), warm, spark).run_available_now()  # JVM warm-up, not measured
        per_job = {}
        for job in JOBS:
            started = time.perf_counter()
            summary = JobRun(get_job(job), s, spark).run_available_now()
            seconds = time.perf_counter() - started
            per_job[job] = _rate(args.events, seconds)
            print(f"  {job}: {seconds:.1f} s, {summary.line()}", flush=True)
        figures["jvm peak rss MB"] = jvm_peak_rss_mb()
    finally:
        broker.stop(base)

    print(f"  peak JVM memory: {figures['jvm peak rss MB']:,.0f} MB")
    lines = [f"bench {job} events_per_s={eps:.0f} ratio={eps / ceiling:.2f}" for job, eps in per_job.items()]
    print("\n".join(lines))
    if not args.no_write:
        _append_report(args, figures, per_job, ceiling)
    return 0


def _append_report(args, figures: dict[str, float], per_job: dict[str, float], ceiling: float) -> None:
    import pyspark

    header = "" if REPORT.exists() else (
        "# Benchmarks\n\nAppended by `make bench` (tests/bench.py); earlier runs are kept for comparison.\n"
        "Targets for the embedded path on 2 cores: ingest >= 0.5 of the consume ceiling,\n"
        "windowed-averages >= 0.35.\n"
    )
    cpu = f"{psutil.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB"
    rows = [f"| {name} | {value:,.0f} |" for name, value in figures.items()]
    rows += [f"| {job} end to end (events/s) | {eps:,.0f} (ratio {eps / ceiling:.2f}) |" for job, eps in per_job.items()]
    section = (
        f"\n## {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC: {args.events} events, {args.devices} devices\n\n"
        f"{platform.platform()}, {cpu}, Python {platform.python_version()}, PySpark {pyspark.__version__}, "
        "embedded Tansu broker, Python Kafka source and delta-rs writer.\n\n"
        "| figure | value |\n| --- | --- |\n" + "\n".join(rows) + "\n"
    )
    with REPORT.open("a") as out:
        out.write(header + section)
    print(f"appended to {REPORT}")


if __name__ == "__main__":
    raise SystemExit(main())
