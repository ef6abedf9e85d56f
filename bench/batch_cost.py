"""What a batch costs the whole pipeline, apart from what its records cost.

The six micro-batch jobs available-now as queries of one Spark application (``sigflow
pipeline``), over the same fleet's traffic (``fleet.traffic``: --devices devices at --rate
events/s of event time, the simulator's defects, an alert per 50 events) read in batches
of each --records size; each run from fresh checkpoints and tables in one session, which
--warm-runs runs of the small batches warm first (its JIT compilers), then the sizes
alternating over --tries. Per run: the batches, the wall time, the JVM's CPU by part (its
JIT compilers, its garbage collector, the tasks by Spark's own count, the rest: the drivers'
side of each query, its planning and commits), the Python driver's CPU and its workers'; and
each job's Spark jobs and tasks' CPU a batch (Spark's UI, which the bench turns on). The
medians of each size then give what one batch more costs (the CPU's difference over the
batches' difference) and what the events cost beside it.

    python -m bench.batch_cost [--events 150000] [--devices 10000] [--rate 5000]
                               [--records 10000 50000] [--tries 2] [--warm-runs 2] [--jobs JOB ...]

Event-time settings are the capacity bench's (windows and sessions of a minute): the state
each batch carries is a fleet's at --rate.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import re
import statistics
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.capacity import EVENT_TIME, JIT_THREAD_NAMES
from spark_jobs.config import load_settings
from spark_jobs.jobs import JOB_NAMES
from spark_jobs.local import broker
from spark_jobs.local.fleet import EVENT, Fleet, traffic
from spark_jobs.runtime.kafka import admin as kafka_admin
from tests.helpers import confluent_produce

GC_THREAD_NAMES = ("GC Thread", "VM Thread", "G1 ", "ParGC")  # the collector's and its safepoints'


@dataclass
class Figures:
    records: int
    batches: int = 0
    wall_s: float = 0.0
    python_s: float = 0.0  # the driver's
    workers_s: float = 0.0  # the Python workers'
    jvm_s: dict[str, float] = field(default_factory=dict)  # by part
    spark_jobs: dict[str, float] = field(default_factory=dict)  # a batch, by job
    task_cpu: dict[str, float] = field(default_factory=dict)  # CPU-s a batch, by job

    @property
    def jvm_total(self) -> float:
        return sum(self.jvm_s.values())

    @property
    def total(self) -> float:
        return self.jvm_total + self.python_s + self.workers_s


def fleet_records(events: int, devices: int, rate: float) -> tuple[list, list]:
    """``events`` events (and their alerts) as a fleet sends them at ``rate`` a second, their
    times ending now: the key/value pairs of each topic."""
    clock = itertools.count(time.time() - events / rate, 1 / rate).__next__
    sent = {EVENT: [], "alert": []}
    for kind, record in traffic(Fleet(rate=rate, devices=devices), clock):
        if kind == EVENT and len(sent[EVENT]) == events:
            break
        sent[kind].append((record.key, record.value))
    return sent[EVENT], sent["alert"]


def thread_cpu(pid: int) -> dict[str, float]:
    """A JVM's CPU seconds in its JIT compilers and its garbage collector, from its threads'
    names and times in /proc: threads that live as long as the JVM (a task's thread does not:
    Spark's executor drops those idle a minute, so its tasks' CPU comes from Spark)."""
    parts = collections.Counter()
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        part = "jit" if name.startswith(JIT_THREAD_NAMES) else "gc" if name.startswith(GC_THREAD_NAMES) else None
        if part:
            parts[part] += (int(fields[11]) + int(fields[12])) / tick
    return parts


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def python_workers_cpu(jvm: psutil.Process) -> float:
    """What the JVM's Python workers (the pandas functions': sessions') have spent: its
    living descendants' CPU, and that of those they reaped (the daemon's forked workers)."""
    spent = 0.0
    for worker in jvm.children(recursive=True):
        try:
            times = worker.cpu_times()
        except psutil.NoSuchProcess:
            continue
        spent += times.user + times.system + times.children_user + times.children_system
    return spent


def _ui(spark, what: str) -> list[dict]:
    url, app = spark.sparkContext.uiWebUrl, spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{url}/api/v1/applications/{app}/{what}") as answer:
        return json.load(answer)


def _query(record: dict) -> str | None:
    """The job whose query ran a Spark job or stage: its name is in their description (Delta's
    own jobs' too)."""
    found = re.search(r"sigflow_([\w-]+)", record.get("description") or "")
    return found.group(1) if found else None


def spark_jobs_by_query(spark, batches: dict[str, int], since_job: int) -> dict[str, float]:
    """Each job's Spark jobs a batch, from the UI's record of the jobs after ``since_job``."""
    counts = collections.Counter(_query(job) for job in _ui(spark, "jobs") if job["jobId"] > since_job)
    return {name: counts[name] / n for name, n in batches.items() if n}


def task_cpu_by_query(spark, since_stage: int) -> dict[str | None, float]:
    """What the tasks of the stages after ``since_stage`` spent on the CPU, by Spark's own
    count (running and deserialising each task), by the job whose query ran them."""
    spent = collections.Counter()
    for stage in _ui(spark, "stages?status=complete"):
        if stage["stageId"] > since_stage:
            spent[_query(stage)] += (stage["executorCpuTime"] + stage["executorDeserializeCpuTime"]) / 1e9
    return spent


def run_once(spark, settings, jvm: psutil.Process, records: int, root: Path, jobs: list[str]) -> Figures:
    """The pipeline available-now over the topics from their start, from fresh checkpoints
    and tables under ``root``, in batches of ``records``."""
    from spark_jobs.runtime.launch import run_pipeline

    run = settings.replace(checkpoint_root=str(root / "checkpoints"), delta_root=str(root / "delta"),
                           max_offsets_per_trigger=records)
    figures = Figures(records)
    since = _newest_job(spark)
    since_stage = max((stage["stageId"] for stage in _ui(spark, "stages")), default=-1)
    threads, jvm_before, me_before = thread_cpu(jvm.pid), _cpu(jvm), _cpu(psutil.Process())
    workers_before = python_workers_cpu(jvm)
    started = time.perf_counter()
    summaries = run_pipeline(run, jobs)
    figures.wall_s = time.perf_counter() - started
    figures.python_s = _cpu(psutil.Process()) - me_before
    figures.workers_s = python_workers_cpu(jvm) - workers_before
    after = thread_cpu(jvm.pid)
    figures.jvm_s = {part: after[part] - threads.get(part, 0.0) for part in ("jit", "gc")}
    tasks = task_cpu_by_query(spark, since_stage)
    figures.jvm_s["tasks"] = sum(tasks.values())
    figures.jvm_s["rest"] = _cpu(jvm) - jvm_before - sum(figures.jvm_s.values())
    batches = {summary.job: summary.batches for summary in summaries}
    figures.batches = sum(batches.values())
    figures.spark_jobs = spark_jobs_by_query(spark, batches, since)
    figures.task_cpu = {name: tasks[name] / n for name, n in batches.items() if n}
    return figures


def _newest_job(spark) -> int:
    return max((job["jobId"] for job in _ui(spark, "jobs")), default=-1)


def say_run(figures: Figures, say=print) -> None:
    parts = ", ".join(f"{part} {seconds:.1f}" for part, seconds in figures.jvm_s.items())
    say(f"  {figures.records:>7,} records a batch: {figures.batches} batches, {figures.wall_s:.1f} s, "
        f"JVM {figures.jvm_total:.1f} CPU-s ({parts}), Python {figures.python_s:.1f}, "
        f"its workers {figures.workers_s:.1f}")


def per_batch(small: list[Figures], large: list[Figures]) -> dict[str, float]:
    """What one batch more costs, by part: the medians' difference over the batches'."""
    def median(runs: list[Figures], part) -> float:
        return statistics.median(part(run) for run in runs)

    more = median(small, lambda r: r.batches) - median(large, lambda r: r.batches)
    parts = {name: (lambda r, name=name: r.jvm_s[name]) for name in ("jit", "gc", "tasks", "rest")}
    parts["python"] = lambda r: r.python_s
    parts["workers"] = lambda r: r.workers_s
    return {name: (median(small, part) - median(large, part)) / more for name, part in parts.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=150_000)
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=5000.0, help="the fleet's events a second of event time")
    parser.add_argument("--records", type=int, nargs=2, default=[10_000, 50_000], metavar=("SMALL", "LARGE"))
    parser.add_argument("--tries", type=int, default=2)
    parser.add_argument("--warm-runs", type=int, default=2, help="runs of the small batches that warm the session first")
    parser.add_argument("--jobs", nargs="+", choices=JOB_NAMES, default=list(JOB_NAMES),
                        help="these jobs alone (default: the six)")
    args = parser.parse_args(argv)

    from spark_jobs.runtime.spark import get_spark

    data = Path(tempfile.mkdtemp(prefix="sigflow-bench-batch-cost-"))
    base = load_settings(env=dict(EVENT_TIME), overrides={"data_dir": str(data), "broker_port": 0,
                                                          "shuffle_partitions": 2, "spark_ui": True})
    info = broker.start(base)
    try:
        settings = base.replace(kafka_bootstrap_servers=info.bootstrap_servers)
        topics = [settings.streaming.events_topic, settings.streaming.alerts_topic]
        kafka_admin.create_topics(info.bootstrap_servers, topics, settings.kafka.topic_partitions,
                                  settings.kafka.topic_retention_ms)
        events, alerts = fleet_records(args.events, args.devices, args.rate)
        confluent_produce(info.bootstrap_servers, topics[0], events)
        confluent_produce(info.bootstrap_servers, topics[1], alerts)
        print(f"batch cost: {len(events):,} events and {len(alerts):,} alerts from {args.devices:,} devices "
              f"({args.rate:,.0f} events/s of event time): {', '.join(args.jobs)} in one application")
        spark = get_spark(settings, "sigflow-pipeline", one_application=True,
                          conf={"spark.ui.retainedJobs": "100000", "spark.ui.retainedStages": "100000"})
        jvm = psutil.Process(spark.sparkContext._gateway.proc.pid)  # noqa: SLF001
        small, large = args.records
        for warm in range(args.warm_runs):
            say_run(run_once(spark, settings, jvm, small, data / f"warm-up-{warm}", args.jobs))
        print(f"  (the {args.warm_runs} runs above warmed the session)")
        runs: dict[int, list[Figures]] = {small: [], large: []}
        for attempt in range(args.tries):
            for records in ((small, large) if attempt % 2 == 0 else (large, small)):
                figures = run_once(spark, settings, jvm, records, data / f"run-{attempt}-{records}", args.jobs)
                runs[records].append(figures)
                say_run(figures)
        cost = per_batch(runs[small], runs[large])
        print("a batch more: " + ", ".join(f"{part} {seconds:.2f}" for part, seconds in cost.items())
              + f" CPU-s; {sum(cost.values()):.2f} in all")
        beside = statistics.median(run.total - run.batches * sum(cost.values()) for run in runs[large])
        print(f"the {len(events):,} events beside their batches: {beside:.1f} CPU-s, "
              f"{beside / len(events) * 1000:.3f} ms each")
        jobs = {name: statistics.median(run.spark_jobs.get(name, 0.0) for run in runs[small])
                for name in runs[small][0].spark_jobs}
        print("Spark jobs a batch (batches of {:,}): ".format(small)
              + ", ".join(f"{name} {count:.1f}" for name, count in jobs.items()))
        for records in (small, large):
            spent = {name: statistics.median(run.task_cpu.get(name, 0.0) for run in runs[records]) for name in jobs}
            print(f"tasks' CPU-s a batch (batches of {records:,}): "
                  + ", ".join(f"{name} {seconds:.2f}" for name, seconds in spent.items()))
    finally:
        broker.stop(base)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
