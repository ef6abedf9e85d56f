"""`make bench`'s long run: whether a job's cost stays flat as its tables grow. ingest and
dedup run as production runs them, each its own driver with a 1-second trigger, while
--rate events/s are offered for --minutes, and `sigflow maintenance` compacts and vacuums
every --maintenance-minutes in between. Every --window-minutes it prints each driver's
resident memory (its JVM and Python) and, per job, the batches that window, their p50 and
p95 duration (pipeline_metrics) and device_events' version. A plateau in memory and a flat
p50 as the versions pass a thousand is the figure; the last line compares the first and
last windows.

    python -m bench.long_run [--minutes 20] [--rate 1000] [--maintenance-minutes 5]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from spark_jobs.config import load_settings
from spark_jobs.local import broker
from spark_jobs.local.simulate import generate_events
from spark_jobs.runtime.kafka import admin as kafka_admin
from tests.helpers import cli_env, confluent_produce

JOBS = ("ingest", "dedup")


def offer(settings, rate: int, seconds: float, stop: threading.Event) -> None:
    """`rate` events a second, paced by the wall clock, until `seconds` pass or `stop`."""
    started, second = time.monotonic(), 0
    while second < seconds and not stop.is_set():
        records = generate_events(rate, devices=1000, seed=second, malformed_ratio=0.001, duplicate_ratio=0.01)
        confluent_produce(settings.kafka.bootstrap_servers, settings.streaming.events_topic,
                          [(r.key, r.value) for r in records])
        second += 1
        time.sleep(max(0.0, started + second - time.monotonic()))


def rss_mb(process: subprocess.Popen) -> float:
    """A driver's resident memory: the CLI's Python and its JVM."""
    try:
        parent = psutil.Process(process.pid)
        return sum(p.memory_info().rss for p in [parent, *parent.children(recursive=True)]) / 2**20
    except psutil.NoSuchProcess:
        return 0.0


def window_figures(settings, since_s: float, until_s: float) -> dict[str, tuple[int, float, float]]:
    """Per job: batches with rows that started in [since, until), their p50 and p95 ms."""
    import pandas as pd

    from spark_jobs.runtime.delta.table_access import read_pandas

    metrics = read_pandas(settings.table_uri("pipeline_metrics"), ["job", "batch_time", "duration_ms", "input_rows"])
    started = (metrics.batch_time - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
    chosen = metrics[(started >= since_s) & (started < until_s) & (metrics.input_rows > 0)]
    out = {}
    for job in JOBS:
        ms = chosen[chosen.job == job].duration_ms
        out[job] = (len(ms), float(ms.quantile(0.5)), float(ms.quantile(0.95))) if len(ms) else (0, 0.0, 0.0)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--maintenance-minutes", type=float, default=5)
    parser.add_argument("--window-minutes", type=float, default=2)
    args = parser.parse_args(argv)

    from deltalake import DeltaTable

    from spark_jobs.ops import maintenance

    data = Path(tempfile.mkdtemp(prefix="sigflow-long-"))
    base = load_settings(env={}, overrides={"data_dir": str(data), "broker_port": 0, "shuffle_partitions": 2})
    info = broker.start(base)
    drivers: dict[str, subprocess.Popen] = {}
    stop = threading.Event()
    try:
        s = base.replace(kafka_bootstrap_servers=info.bootstrap_servers)
        kafka_admin.create_topics(info.bootstrap_servers, [s.streaming.events_topic, s.streaming.alerts_topic],
                                   s.kafka.topic_partitions, s.kafka.topic_retention_ms)
        env = cli_env(s, {"SIGFLOW_SPARK_MASTER": "local[1]", "SIGFLOW_SPARK_DRIVER_MEMORY": "1g"})
        for job in JOBS:
            log = (data / f"{job}.log").open("w")
            drivers[job] = subprocess.Popen([sys.executable, "-m", "spark_jobs.cli", "run", job,
                                             "--processing-time", "1 second"], env=env, stdout=log,
                                            stderr=subprocess.STDOUT)
        producer = threading.Thread(target=offer, args=(s, args.rate, args.minutes * 60, stop))
        began = time.time()
        producer.start()
        print(f"long run: {args.rate:,} events/s for {args.minutes:g} min; ingest and dedup, 1 s trigger; "
              f"maintenance every {args.maintenance_minutes:g} min", flush=True)
        print("minute | " + " | ".join(f"{job}: batches, p50/p95 ms, driver MB" for job in JOBS)
              + " | device_events version", flush=True)
        windows: list[dict] = []
        next_upkeep = began + args.maintenance_minutes * 60
        window_start = began

        def close_window() -> float:
            end = time.time()
            figures = window_figures(s, window_start, end)
            memory = {job: rss_mb(driver) for job, driver in drivers.items()}
            version = DeltaTable(s.table_uri("device_events")).version()
            windows.append({"figures": figures, "memory": memory, "version": version})
            print(f"{(end - began) / 60:6.1f} | " + " | ".join(
                f"{job}: {figures[job][0]}, {figures[job][1]:,.0f}/{figures[job][2]:,.0f}, {memory[job]:,.0f}"
                for job in JOBS) + f" | {version:,}", flush=True)
            return end

        while producer.is_alive():
            time.sleep(5)
            for job, driver in drivers.items():
                if driver.poll() is not None:
                    raise SystemExit(f"{job} stopped (exit {driver.returncode}); see {data / f'{job}.log'}")
            if time.time() >= next_upkeep:
                maintenance.run(s)
                next_upkeep += args.maintenance_minutes * 60
            if time.time() >= window_start + args.window_minutes * 60:
                window_start = close_window()
        close_window()  # the last, shorter window
        busy = [w for w in windows if all(w["figures"][job][0] for job in JOBS)]  # the JVMs started
        if len(busy) >= 2:
            first, last = busy[0], busy[-1]
            for job in JOBS:
                print(f"long {job} batch_p50_ms={first['figures'][job][1]:.0f}->{last['figures'][job][1]:.0f} "
                      f"driver_mb={first['memory'][job]:.0f}->{last['memory'][job]:.0f} "
                      f"device_events_versions={first['version']}->{last['version']}")
    finally:
        stop.set()
        for driver in drivers.values():
            driver.terminate()  # SIGTERM: the batch in flight finishes
        for driver in drivers.values():
            try:
                driver.wait(timeout=300)
            except subprocess.TimeoutExpired:
                driver.kill()
        broker.stop(base)
        shutil.rmtree(data, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
