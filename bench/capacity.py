"""`make bench`'s capacity: the whole pipeline as it is deployed, fed by a fleet at rising rates.

Both deployment shapes: ``one`` (``sigflow pipeline --processing-time``: every micro-batch
job as a query of one Spark application) and ``per-job`` (``sigflow run JOB
--processing-time`` per job, one application each, as the deploy DAG's other shape starts
them). Per shape one pipeline runs while ``sigflow simulate`` offers each rate in turn for
--settle-seconds and then the --seconds measured (a fleet's steady traffic, not the batches
that met its change of rate); then the traffic stops and the bench waits for every job to
drain. A job keeps up at a rate when its lag is gone within two triggers of the traffic
stopping; the steps end at the first rate where one does not.

Per step: each job's batch p50/p95 (pipeline_metrics, batches that read records), each
table's freshness p50/p95, each job's peak lag, the peak memory of every process of the
pipeline (JVMs and Pythons, their proportional set size: a page shared by forked Python
workers counted once), and the CPU seconds the pipeline, the broker and the simulator spent.
Freshness is the time from when the rules let a row exist to the commit that holds it: a
record's row from its send (Kafka's timestamp); a window from the watermark passing its end
(window_end + watermark_delay: a fleet stamps events with the clock that sends them); a
session from its last event + gap + watermark_delay; an alert's context from the alert; an
alert without telemetry from alert_time + the join's delay.

Event-time settings are scaled down (``EVENT_TIME``) so that windows and sessions close
within a step: dedup's and the join's state hold a minute of events, not the default ten.

``--fleet-sizes`` instead runs a fresh pipeline per device count at one rate and compares
each job's batch p50 with the first count's: whether a batch's cost grows with the fleet.
``--spark-ui`` turns the drivers' Spark UI on: its REST API (``/api/v1``) then gives each
SQL execution's plan and each stage's task CPU, by job and batch, while a step runs.

    python -m bench.capacity [--shapes one per-job] [--rates 1000 2000 5000] [--devices 10000]
                             [--settle-seconds 60] [--seconds 90] [--trigger "10 seconds"] [--jobs JOB ...]
    python -m bench.capacity --fleet-sizes 1000 10000 100000 --rates 2000 --shapes one
                             --jobs ingest windowed-averages sessions
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.freshness import batch_durations, freshness
from bench.targets import Target
from spark_jobs.config import Settings, load_settings
from spark_jobs.local import broker
from tests.helpers import cli_env

SHAPES = {"one": "one application", "per-job": "one application per job"}
EVENT_TIME = {"SIGFLOW_WATERMARK_DELAY": "1 minute", "SIGFLOW_ALERT_WATERMARK_DELAY": "1 minute",
              "SIGFLOW_MAX_CLOCK_AHEAD": "15 seconds", "SIGFLOW_TUMBLING_WINDOW": "1 minute",
              "SIGFLOW_SLIDING_WINDOW": "2 minutes", "SIGFLOW_SLIDING_STEP": "1 minute",
              "SIGFLOW_FLEET_WINDOW": "1 minute", "SIGFLOW_SESSION_GAP": "1 minute",
              "SIGFLOW_ALERT_CONTEXT": "1 minute"}
# Each shape's drivers run with the JIT docs/deploy.md advises for it on one machine: six
# drivers' C2 compilers sharing 2 cores took 13 minutes to settle, C1 alone one
# (docs/benchmarks.md)
SHAPE_JIT = {"one": "tiered", "per-job": "quick"}
GOAL_RATE = {"one": 5000, "per-job": 2000}  # events/s from 10,000 devices (docs/benchmarks.md)
FRESHNESS_GOAL_S, MEMORY_GOAL_GB, FLEET_SIZE_GOAL = 30.0, 4.0, 1.2
SAMPLE_S = 5.0
# The warm-up's traffic, and when a driver counts as warm: its JIT compilers below a fifth of a
# core over a minute of it (they used 88% of one for the first two minutes of a driver, and
# 13% after eight, docs/benchmarks.md)
WARM_RATE, WARM_CHUNK_S, JIT_SETTLED = 50, 60.0, 0.2


@dataclass
class Step:
    rate: float
    devices: int
    began: float  # the measured part's start, after the rate's first settled_s
    settled_s: float = 0.0
    stopped: float = 0.0
    drained_s: float | None = None  # None: not drained in time
    sent: int = 0
    peak_lag: dict[str, int] = field(default_factory=dict)
    peak_mb: float = 0.0
    # CPU seconds the step's traffic and its drain cost: the pipeline's processes (drivers,
    # their JVMs and Python workers), the broker, the simulator
    cpu_s: dict[str, float] = field(default_factory=dict)
    pipeline_cpu_s: dict[str, float] = field(default_factory=dict)  # the pipeline's by part (cpu_parts)
    # job -> (n, p50 ms, p95 ms, p50 ms in its batch function)
    batches: dict[str, tuple[int, float, float, float]] = field(default_factory=dict)
    fresh: dict[str, tuple[int, float, float]] = field(default_factory=dict)  # table -> (rows, p50 s, p95 s)

    def kept_up(self, trigger_s: float) -> bool:
        return self.drained_s is not None and self.drained_s <= 2 * trigger_s


class Deployment:
    """The pipeline's processes in one shape, started as an operator starts them."""

    def __init__(self, shape: str, jobs: list[str], settings: Settings, env: dict[str, str], trigger: str, logs: Path,
                 broker_pid: int):
        self.shape, self.jobs, self.settings, self.env, self.logs = shape, jobs, settings, env, logs
        self.broker_pid = broker_pid
        cli = [sys.executable, "-m", "spark_jobs.cli"]
        commands = ({"pipeline": [*cli, "pipeline", "--processing-time", trigger, *jobs]} if shape == "one" else
                    {job: [*cli, "run", job, "--processing-time", trigger] for job in jobs})
        self.processes = {name: subprocess.Popen(command, env=env, stdout=(logs / f"{name}.log").open("w"),
                                                 stderr=subprocess.STDOUT)
                          for name, command in commands.items()}

    def check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise SystemExit(f"{name} stopped (exit {process.returncode}); see {self.logs / f'{name}.log'}")

    def memory_mb(self) -> float:
        """Memory of every process of the pipeline (each CLI's Python, its JVM, Spark's Python
        workers), each page counted once: the proportional set size, where the sum of
        resident sizes would count the pages Python workers share with the daemon they are
        forked from once per worker."""
        return sum(pss_mb(process.pid) for process in self.processes.values())

    def cpu_meter(self) -> CpuMeter:
        """A meter of every process of the pipeline's CPU from now on, by part (``cpu_parts``)."""
        return CpuMeter([process.pid for process in self.processes.values()])

    def lag(self) -> dict[str, int]:
        from spark_jobs.ops.status import job_status

        return {job: job_status(self.settings, job).behind for job in self.jobs}

    def stop(self) -> None:
        for process in self.processes.values():
            process.terminate()  # SIGTERM: the batches in flight finish
        for process in self.processes.values():
            try:
                process.wait(timeout=300)
            except subprocess.TimeoutExpired:
                process.kill()


def pss_mb(pid: int) -> float:
    """The proportional set size of a process and every process under it, alive now."""
    total = 0
    for process in _family(pid):
        try:
            total += process.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total / 2**20


def _family(pid: int) -> list[psutil.Process]:
    try:
        parent = psutil.Process(pid)
        return [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process and every process under it, alive now."""
    return sum(_cpu(process) for process in _family(pid))


def _cpu(process: psutil.Process) -> float:
    try:
        times = process.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return times.user + times.system


# HotSpot names its JIT compilers' threads "C1 CompilerThread0", "C2 CompilerThread0", ...;
# the kernel keeps a thread's name to 15 characters
JIT_THREAD_NAMES = ("C1 CompilerThre", "C2 CompilerThre")


def cpu_parts(process: psutil.Process) -> dict[str, float]:
    """A process's CPU seconds by part: a JVM's, of that its JIT compilers', or a Python's
    (the CLI's and Spark's Python workers). The JIT's is read from each thread's name and CPU
    times in /proc: a profiler attaching to the JVM would change it (starting a Flight
    Recording sent a warm driver's compilers back to work for minutes)."""
    is_jvm = process.name() == "java"
    parts = {"jvm" if is_jvm else "python": _cpu(process)}
    if is_jvm:
        parts["jit"] = 0.0
        for thread in process.threads():
            try:
                name = Path(f"/proc/{process.pid}/task/{thread.id}/comm").read_text().strip()
            except OSError:
                continue
            if name.startswith(JIT_THREAD_NAMES):
                parts["jit"] += thread.user_time + thread.system_time
    return parts


class CpuMeter:
    """What the processes under some pids spend from the meter's start, by part
    (``cpu_parts``). Each process is read whenever the meter samples and keeps its last
    reading once it has exited: Spark ends a Python worker idle for a minute and forks
    another, and a sum of the living alone fell when one ended, below zero over a step."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.first = self._read()
        self.last = dict(self.first)

    def _read(self) -> dict[tuple[int, float], dict[str, float]]:
        readings = {}
        for pid in self.pids:
            for process in _family(pid):
                try:
                    readings[(process.pid, process.create_time())] = cpu_parts(process)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
        return readings

    def sample(self) -> None:
        self.last.update(self._read())

    def spent(self) -> dict[str, float]:
        """CPU seconds by part since the start, up to the last sample."""
        spent = {"jvm": 0.0, "jit": 0.0, "python": 0.0}
        for process, reading in self.last.items():
            before = self.first.get(process, {})
            for part, seconds in reading.items():
                spent[part] += seconds - before.get(part, 0.0)
        return spent


def events_sent(settings: Settings) -> int:
    from spark_jobs.runtime.kafka import offsets as kafka_offsets

    bootstrap, topic = settings.kafka.bootstrap_servers, settings.streaming.events_topic
    bounds = kafka_offsets.topic_bounds(bootstrap, topic)
    return sum(end for _, end in bounds.values())


def offer(deployment: Deployment, rate: float, devices: int, seconds: float, trigger_s: float,
          settle_s: float = 0.0) -> Step:
    """``rate`` events/s from ``devices`` for ``settle_s`` + ``seconds`` through ``sigflow
    simulate``, then the wait for every job's lag to be gone (up to six triggers or two
    minutes). The step measures from ``settle_s`` on: the pipeline as it runs at that rate,
    past the batches that met the change of rate and the code its JIT compiled for them."""
    step = Step(rate, devices, time.time(), settled_s=settle_s)
    with (deployment.logs / "simulate.log").open("a") as log:
        simulator = subprocess.Popen(
            [sys.executable, "-m", "spark_jobs.cli", "simulate", "--rate", str(rate), "--duration",
             str(settle_s + seconds), "--devices", str(devices), "--malformed", "0.005", "--duplicates", "0.02"],
            env=deployment.env, stdout=log, stderr=subprocess.STDOUT)
        while time.time() < step.began + settle_s:
            deployment.check_alive()
            step.peak_mb = max(step.peak_mb, deployment.memory_mb())
            time.sleep(min(SAMPLE_S, max(0.0, step.began + settle_s - time.time())))
        step.began = time.time()
        before = events_sent(deployment.settings)
        meter, broker_before = deployment.cpu_meter(), cpu_seconds(deployment.broker_pid)
        simulator_before = cpu_seconds(simulator.pid) if simulator.poll() is None else 0.0
        step.cpu_s["simulator"] = 0.0  # what it spent, as last sampled while it ran

        def sample() -> dict[str, int]:
            if simulator.poll() is None:  # its last figure before it exits
                step.cpu_s["simulator"] = cpu_seconds(simulator.pid) - simulator_before
            deployment.check_alive()
            meter.sample()
            lag = deployment.lag()
            step.peak_mb = max(step.peak_mb, deployment.memory_mb())
            step.peak_lag = {job: max(step.peak_lag.get(job, 0), behind) for job, behind in lag.items()}
            return lag

        while simulator.poll() is None:
            sample()
            time.sleep(SAMPLE_S)
    step.stopped = time.time()
    step.sent = events_sent(deployment.settings) - before
    deadline = step.stopped + max(120.0, 6 * trigger_s)
    while time.time() < deadline:
        if not any(sample().values()):
            step.drained_s = time.time() - step.stopped
            break
        time.sleep(1.0)
    meter.sample()
    step.pipeline_cpu_s = meter.spent()
    step.cpu_s.update({"pipeline": step.pipeline_cpu_s["jvm"] + step.pipeline_cpu_s["python"],
                       "broker": cpu_seconds(deployment.broker_pid) - broker_before})
    return step


def warm(deployment: Deployment, devices: int, least_s: float, most_s: float, trigger_s: float,
         logs: Path) -> tuple[float, float, float, float]:
    """Light traffic until the drivers' JVMs are warm: every query has read its first batches
    and the JIT compilers, which compile Spark's planning, Janino and the jobs' code for
    minutes after a driver starts (docs/benchmarks.md), have used less than ``JIT_SETTLED`` of
    a core over the last ``WARM_CHUNK_S``; at least ``least_s``, at most ``most_s``. The
    steps then measure a running pipeline, not one still compiling itself. Returns the
    seconds it took, the JIT's share of a core over the last chunk of traffic, that chunk's
    seconds and the peak memory."""
    began, share, peak_mb = time.time(), 1.0, 0.0
    chunk_s = max(1.0, min(WARM_CHUNK_S, most_s))
    while True:
        chunk = offer(deployment, WARM_RATE, devices, chunk_s, trigger_s)
        if chunk.drained_s is None:
            raise SystemExit(f"{SHAPES[deployment.shape]}: not every job read the warm-up traffic; see the logs in "
                             f"{logs}")
        share = chunk.pipeline_cpu_s["jit"] / max(chunk.stopped - chunk.began + chunk.drained_s, 1.0)
        peak_mb = max(peak_mb, chunk.peak_mb)
        spent = time.time() - began
        if spent >= most_s or (spent >= least_s and share < JIT_SETTLED):
            return spent, share, chunk_s, peak_mb


def run_shape(shape: str, args, rates: list[float], devices: int, say=print) -> list[Step]:
    """One pipeline in ``shape`` from a fresh data directory, each rate offered in turn."""
    data = Path(tempfile.mkdtemp(prefix=f"sigflow-capacity-{shape}-"))
    base = load_settings(env={}, overrides={"data_dir": str(data), "broker_port": 0})
    info = broker.start(base)
    settings = base.replace(kafka_bootstrap_servers=info.bootstrap_servers)
    jit = args.jit or SHAPE_JIT[shape]
    env = cli_env(settings, {**EVENT_TIME, "SIGFLOW_JIT": jit, "SIGFLOW_TRIGGER_INTERVAL": args.trigger,
                             "SIGFLOW_JVM_OPTIONS": args.jvm_options, "SIGFLOW_SPARK_UI": str(args.spark_ui).lower(),
                             **({"SIGFLOW_SPARK_DRIVER_MEMORY": args.driver_memory} if args.driver_memory else {})})
    env.pop("SIGFLOW_SHUFFLE_PARTITIONS")  # the deployed default
    env.pop("SIGFLOW_MAX_OFFSETS_PER_TRIGGER")
    steps: list[Step] = []
    try:
        settings = load_settings(env=env)  # refused options (--jvm-options) stop the broker too
        subprocess.run([sys.executable, "-m", "spark_jobs.cli", "topics", "create"], env=env, check=True,
                       capture_output=True)
        deployment = Deployment(shape, args.jobs, settings, env, args.trigger, data, info.pid)
        try:
            warmed_s, jit_share, chunk_s, peak_mb = warm(deployment, devices, args.warm_seconds,
                                                         args.warm_max_seconds,
                                                         settings.streaming.trigger_interval.seconds, data)
            say(f"{SHAPES[shape]}: {len(deployment.processes)} process(es) started ({jit} JIT) and warmed by "
                f"{warmed_s:.0f} s at {WARM_RATE} events/s, its JIT compilers at {jit_share:.0%} of a core over the "
                f"last {chunk_s:.0f} s of it ({peak_mb / 1024:.1f} GB)")
            for rate in rates:
                step = offer(deployment, rate, devices, args.seconds, settings.streaming.trigger_interval.seconds,
                             args.settle_seconds)
                steps.append(step)
                step.batches = batch_durations(settings, args.jobs, step.began, step.stopped)
                step.fresh = freshness(settings, step.began, step.stopped + (step.drained_s or 0))
                say_step(shape, step, settings.streaming.trigger_interval.seconds, say)
                if not step.kept_up(settings.streaming.trigger_interval.seconds):
                    break
        finally:
            deployment.stop()
    except BaseException:
        broker.stop(base)
        print(f"{SHAPES[shape]}: the logs are kept in {data}", file=sys.stderr)
        raise
    broker.stop(base)
    shutil.rmtree(data, ignore_errors=True)
    return steps


def say_step(shape: str, step: Step, trigger_s: float, say=print) -> None:
    seconds = step.stopped - step.began
    verdict = (f"kept up (drained {step.drained_s:.0f} s after the traffic)" if step.kept_up(trigger_s) else
               "fell behind (" + ("not drained" if step.drained_s is None else f"drained after {step.drained_s:.0f} s")
               + f", more than two {trigger_s:g} s triggers)")
    say(f"{SHAPES[shape]}, {step.rate:,.0f} events/s offered from {step.devices:,} devices "
        f"({step.sent / seconds:,.0f}/s sent over {seconds:.0f} s after {step.settled_s:.0f} s at it): {verdict}; memory {step.peak_mb / 1024:.1f} GB "
        "(proportional set size, peak)")
    elapsed = seconds + (step.drained_s or 0)
    say(f"  CPU over the step and its drain ({elapsed:.0f} s, {elapsed * (os.cpu_count() or 1):.0f} core-seconds): "
        + ", ".join(f"{name} {cpu:,.0f} s" for name, cpu in step.cpu_s.items()))
    parts = step.pipeline_cpu_s
    say(f"  the pipeline's: its JVMs {parts['jvm']:,.0f} s (their JIT compilers {parts['jit']:,.0f} s), its Pythons "
        f"{parts['python']:,.0f} s")
    say(f"  {'job':<20}{'batches':>8}{'p50 ms':>9}{'p95 ms':>9}{'commit p50':>11}{'peak lag':>10}")
    for job, (n, p50, p95, in_batch) in step.batches.items():
        say(f"  {job:<20}{n:>8}{p50:>9,.0f}{p95:>9,.0f}{in_batch:>11,.0f}{step.peak_lag.get(job, 0):>10,}")
    say(f"  {'table':<28}{'rows':>10}{'fresh p50 s':>13}{'p95 s':>8}")
    for table, (rows, p50, p95) in step.fresh.items():
        say(f"  {table:<28}{rows:>10,}{p50:>13.1f}{p95:>8.1f}")


def capacity_targets(shape: str, steps: list[Step], trigger_s: float) -> list[Target]:
    kept = [step for step in steps if step.kept_up(trigger_s)]
    best = max(kept, key=lambda step: step.rate, default=None)
    found = [Target(f"{SHAPES[shape]}: highest rate kept up, events/s", best.rate if best else 0,
                    GOAL_RATE[shape], form=",.0f")]
    if best is not None:
        worst = max((p95 for _, _, p95 in best.fresh.values()), default=0.0)
        found.append(Target(f"{SHAPES[shape]}: worst table's freshness p95 at that rate, s", worst,
                            FRESHNESS_GOAL_S, at_most=True, form=".1f"))
        if shape == "one":
            found.append(Target(f"{SHAPES[shape]}: memory at that rate, GB", best.peak_mb / 1024, MEMORY_GOAL_GB,
                                at_most=True, form=".1f"))
    return found


def fleet_size_targets(by_devices: dict[int, Step]) -> list[Target]:
    """Each job's batch p50 at the largest fleet, over its p50 at the smallest."""
    smallest, largest = by_devices[min(by_devices)], by_devices[max(by_devices)]
    return [Target(f"{job}: batch p50 at {max(by_devices):,} devices over {min(by_devices):,}",
                   largest.batches[job][1] / smallest.batches[job][1], FLEET_SIZE_GOAL, at_most=True, form=".2f")
            for job in smallest.batches if smallest.batches[job][1] and job in largest.batches]


def main(argv=None) -> int:
    from spark_jobs.jobs import JOB_NAMES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--rates", nargs="+", type=float, default=[1000, 2000, 5000])
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--fleet-sizes", nargs="+", type=int, help="devices per run, each its own pipeline")
    parser.add_argument("--seconds", type=float, default=90, help="each rate's measured traffic")
    parser.add_argument("--settle-seconds", type=float, default=60,
                        help="each rate's traffic before its measured part")
    parser.add_argument("--warm-seconds", type=float, default=45, help="the least warm-up")
    parser.add_argument("--warm-max-seconds", type=float, default=900,
                        help="the most warm-up, when the drivers' JIT compilers have not settled before")
    parser.add_argument("--trigger", default="10 seconds")
    parser.add_argument("--jit", choices=["tiered", "quick"],
                        help="the drivers' JIT (the jit setting); by default each shape's own, SHAPE_JIT")
    parser.add_argument("--jvm-options", default="", help="the drivers' extra Java options (the jvm_options setting)")
    parser.add_argument("--spark-ui", action="store_true",
                        help="the drivers' Spark UI on (its REST API gives each stage's task CPU)")
    parser.add_argument("--driver-memory", help="the drivers' heap (the spark_driver_memory setting); its default if not given")
    parser.add_argument("--jobs", nargs="+", choices=JOB_NAMES, default=list(JOB_NAMES))
    parser.add_argument("--json", type=Path, help="write every step's figures here too")
    args = parser.parse_args(argv)
    # the settings the options make, checked before any process starts
    trigger_s = load_settings(env={}, overrides={"trigger_interval": args.trigger, "jvm_options": args.jvm_options,
                                                 **({"spark_driver_memory": args.driver_memory} if args.driver_memory else {})}
                              ).streaming.trigger_interval.seconds

    goals: list[Target] = []
    recorded: dict[str, list[Step]] = {}
    if args.fleet_sizes:
        for shape in args.shapes:
            by_devices = {devices: run_shape(shape, args, args.rates[:1], devices)[0] for devices in args.fleet_sizes}
            recorded[shape] = list(by_devices.values())
            goals += fleet_size_targets(by_devices)
    else:
        for shape in args.shapes:
            recorded[shape] = run_shape(shape, args, args.rates, args.devices)
            goals += capacity_targets(shape, recorded[shape], trigger_s)
    print(f"capacity targets ({sum(t.met for t in goals)} of {len(goals)} met):")
    for goal in goals:
        print(f"  {goal.line()}")
    if args.json:
        args.json.write_text(json.dumps({shape: [step.__dict__ for step in steps] for shape, steps in recorded.items()},
                                        indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
