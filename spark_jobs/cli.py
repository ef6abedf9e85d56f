"""``sigflow``: the command line every DAG task and every runbook step uses."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections import Counter
from pathlib import Path

from spark_jobs.config import Settings, load_settings
from spark_jobs.errors import DriverDied, Interrupted, SigflowError
from spark_jobs.jobs import RECONCILED_JOBS
from spark_jobs.ops.terminal_text import TerminalStream, terminal
from spark_jobs.runtime.kafka import address as kafka_address


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(config_file=args.config)


def _service(action: str, name: str, start, stop, status) -> int:
    """`start|stop|status` of a process this machine runs for sigflow (broker, cluster,
    PostgreSQL): ``start`` returns the lines to print, ``stop`` whether one was running,
    ``status`` its lines, empty when none runs (exit code 1, as service managers expect)."""
    if action == "start":
        lines, code = start(), 0
    elif action == "stop":
        lines, code = [f"{name} stopped" if stop() else f"no {name} was running"], 0
    else:
        lines = status()
        lines, code = lines or [f"no {name} is running"], 0 if lines else 1
    print("\n".join(lines))
    return code


def cmd_broker(args: argparse.Namespace) -> int:
    from spark_jobs.local import broker

    settings = _settings(args)

    def start() -> list[str]:
        info = broker.start(settings)
        return [f"broker running at {info.bootstrap_servers} (pid {info.pid}, log {info.log_file})"]

    def status() -> list[str]:
        info = kafka_address.status(settings)
        return [f"broker running at {info.bootstrap_servers} (pid {info.pid}, log {info.log_file})"] if info else []

    return _service(args.action, "broker", start, lambda: broker.stop(settings), status)


def cmd_cluster(args: argparse.Namespace) -> int:
    from spark_jobs.local import cluster

    settings = _settings(args)

    def start() -> list[str]:
        info = cluster.start(settings)
        return [f"Spark master {info.master_url} with {len(info.worker_pids)} workers (UI {info.ui_url}, "
                f"logs in {cluster.cluster_dir(settings)})",
                f"  submit jobs there: export SIGFLOW_SPARK_MASTER={info.master_url}",
                f"  (from another data_dir also SIGFLOW_SPARK_AUTH_SECRET_FILE={cluster.auth_secret_file(settings)})"]

    return _service(args.action, "Spark cluster", start, lambda: cluster.stop(settings),
                    lambda: cluster.describe(settings) if cluster.recorded(settings) else [])


def cmd_postgres(args: argparse.Namespace) -> int:
    from spark_jobs.local import postgres

    settings = _settings(args)

    def start() -> list[str]:
        info = postgres.start(settings)
        return [f"PostgreSQL on 127.0.0.1:{info.port}, database {postgres.DATABASE}, user {postgres.USER}, "
                f"password in {info.password_file}"]

    def status() -> list[str]:
        info = postgres.status(settings)
        return [f"PostgreSQL running on 127.0.0.1:{info.port}"] if info else []

    return _service(args.action, "PostgreSQL", start, lambda: postgres.stop(settings), status)


def cmd_jars(args: argparse.Namespace) -> int:
    from spark_jobs.install import jars
    from spark_jobs.runtime import classpath

    settings = _settings(args)
    if args.action == "archive":
        from spark_jobs.local import class_archive_build

        print(class_archive_build.build(settings).line())
        return 0
    if args.action == "pin":
        lock = jars.pin()
        print(f"pinned {len(lock)} JARs in {jars.LOCK}")
        return 0
    sets = args.sets or list(jars.DEFAULT_SETS)
    unknown = sorted(set(sets) - set(jars.SETS))
    if unknown:
        raise SigflowError(f"unknown JAR set(s): {', '.join(unknown)}", f"choose from {', '.join(jars.SETS)}")
    if args.action == "check":
        paths = classpath.verified_paths(sets, settings.jars_path)
        print(f"{len(paths)} JARs verified in {settings.jars_path} ({', '.join(sets)})")
        return 0
    result = jars.fetch(sets, settings.jars_path)
    fetched = f"{len(result.fetched)} fetched with {result.via}, " if result.fetched else ""
    built = f"; built {', '.join(jar.file_name for jar in result.built)}" if result.built else ""
    print(f"JARs ({', '.join(sets)}): {fetched}{result.present} already there{built}, all verified, in {result.directory}")
    for jar in result.unbuilt:
        print(f"not built: {jar.what} (infra/{jar.folder}) needs mvn; without it the jobs run the same, slower")
    return 0


def cmd_topics(args: argparse.Namespace) -> int:
    from spark_jobs.ops import deploy

    if args.action == "grow":
        if not args.partitions:
            raise SigflowError("say how many partitions the topics should have", "add --partitions N")
        print("\n".join(deploy.grow_topics(_settings(args), args.partitions, args.topic or None)))
        return 0
    if args.action == "use-broker-time":
        print("\n".join(deploy.use_broker_time(_settings(args))))
        return 0
    print("\n".join(deploy.ensure_topics(_settings(args))))
    return 0


def _contract_of(settings: Settings, topic: str):
    from spark_jobs.contracts.contract import ALERT_CONTRACT, EVENT_CONTRACT

    contracts = {settings.streaming.events_topic: EVENT_CONTRACT, settings.streaming.alerts_topic: ALERT_CONTRACT}
    if topic not in contracts:
        raise SigflowError(f"no contract for topic {topic}",
                           f"--validate checks lines for {settings.streaming.events_topic} or {settings.streaming.alerts_topic}")
    return contracts[topic]


def cmd_produce(args: argparse.Namespace) -> int:
    from spark_jobs.contracts import file_check
    from spark_jobs.runtime.kafka import producer

    settings = _settings(args)
    topic = args.topic or settings.streaming.events_topic
    if not Path(args.file).is_file():
        raise SigflowError(f"{args.file}: no such file", "give the path of a file of JSON lines, one record each")
    if args.validate:
        check = file_check.check_file(args.file, _contract_of(settings, topic), settings.streaming.max_clock_ahead.ms)
        if check.failed:
            for line in check.describe():
                print(line)
            raise SigflowError(
                f"{check.failed:,} of {check.lines:,} lines break the {check.contract} contract "
                f"(first {len(check.failures)} above); nothing was sent",
                "fix them (docs/event-contract.md: each reason code), or send without --validate "
                "and the jobs quarantine them",
            )
        print(f"{check.lines:,} lines meet the {check.contract} contract")
    bootstrap = kafka_address.connection(settings)
    records = producer.FileRecords(args.file)
    sent = producer.produce_records(bootstrap, topic, records, progress=True)
    for line in records.refused:
        print(line)
    unkeyed = f" ({records.unkeyed:,} unkeyed: no string device_id found)" if records.unkeyed else ""
    print(f"produced {sent:,} records to {topic}{unkeyed}"
          + (f"; {len(records.refused):,} refused (listed above)" if records.refused else ""))
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from spark_jobs.local import simulate
    from spark_jobs.runtime.kafka import producer

    settings = _settings(args)
    bootstrap = kafka_address.connection(settings)
    count = args.events if args.events else int(args.rate * args.duration)
    records = simulate.generate_events(
        count, devices=args.devices, seed=args.seed,
        late_ratio=args.late, out_of_order_ratio=args.out_of_order,
        duplicate_ratio=args.duplicates, malformed_ratio=args.malformed,
    )
    sent = producer.produce_records(
        bootstrap, settings.streaming.events_topic, ((r.key, r.value) for r in records),
        rate_per_s=None if args.events else args.rate, total=len(records), progress=True,
    )
    kinds = Counter(r.kind for r in records)
    malformed = sum(n for k, n in kinds.items() if k in simulate.MALFORMED_KINDS)
    print(
        f"produced {sent} records to {settings.streaming.events_topic}: {kinds['event']} in order, "
        f"{kinds['out_of_order']} out of order, {kinds['late']} late, "
        f"{kinds['duplicate']} duplicates, {malformed} malformed"
    )
    alerts = simulate.generate_alerts(records, every=args.alert_every, seed=args.seed)
    producer.produce_records(bootstrap, settings.streaming.alerts_topic, ((r.key, r.value) for r in alerts))
    akinds = Counter(r.kind for r in alerts)
    print(
        f"produced {len(alerts)} alerts to {settings.streaming.alerts_topic}: {akinds['silent_alert']} for "
        f"silent devices, {akinds['bad_severity']} malformed"
    )
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from spark_jobs.runtime import launch

    overrides = {"trigger_interval": args.processing_time} if args.processing_time else {}
    settings = load_settings(config_file=args.config, overrides=overrides)
    summary = launch.run(args.job, settings, available_now=not args.processing_time)
    print(summary.line())
    return 0


def cmd_pipeline(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from spark_jobs.jobs.registry import JOBS
    from spark_jobs.runtime import launch
    from spark_jobs.runtime.metrics import summary as run_summary

    settings = _settings(args)
    names = args.jobs or list(JOBS)
    if not args.verbose:  # a line per job here; `sigflow run JOB` shows a line per batch
        logging.getLogger("sigflow.batches").setLevel(logging.WARNING)
    # on a terminal only (disable=None); stderr, like the log lines
    with tqdm(total=len(names), desc="pipeline", unit="job", disable=None) as bar:
        def done(summary) -> None:
            bar.write(f"{summary.job}: {summary.batches} batch(es), {summary.rows_in:,} records in "
                      f"{summary.seconds:.0f} s")
            bar.update()

        summaries = launch.run_pipeline(settings, names, on_job_done=done)
    print("\n".join(run_summary.summary_table(summaries)))
    print(f"tables: {settings.delta_root_uri}; per-batch JSON: {settings.progress_file('JOB')}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from spark_jobs.ops import status

    for job_status in status.all_status(_settings(args)):
        print("\n".join(job_status.lines()))
    return 0


def cmd_tables(args: argparse.Namespace) -> int:
    from spark_jobs.ops import table_overview

    for table in table_overview.overview(_settings(args)):
        print(table.line())
    return 0


def cmd_metrics(args: argparse.Namespace) -> int:
    import threading

    from spark_jobs.ops import prometheus

    settings = _settings(args)
    if not args.serve:
        print(prometheus.exposition(settings), end="")
        return 0
    exporter = prometheus.serve(settings)
    print(f"serving sigflow's metrics for Prometheus at {exporter.url}; Ctrl-C stops")
    print("  alert rules: infra/prometheus/sigflow-alerts.yml; Spark's own: the driver UI's /metrics/prometheus/")
    try:
        threading.Event().wait()  # until Ctrl-C or SIGTERM (KeyboardInterrupt, see main)
    finally:
        exporter.stop()
    return 0


def cmd_checkpoint(args: argparse.Namespace) -> int:
    from spark_jobs.jobs.registry import get_job
    from spark_jobs.ops import restart, status

    settings = _settings(args)
    get_job(args.job)
    if args.action == "inspect" and args.state:
        from spark_jobs.ops.operator_state import read_state
        from spark_jobs.runtime.spark import get_spark

        report = read_state(get_spark(settings, f"sigflow-state-{args.job}"), settings, args.job,
                            device=args.device, batch_id=args.batch)
        print("\n".join(report.lines(limit=args.limit)))
        return 0
    if args.action == "inspect":
        print("\n".join(status.inspect_checkpoint(settings, args.job)))
        return 0
    plan = restart.plan(settings, args.job, args.action, to_batch=getattr(args, "to_batch", None),
                        to_time=getattr(args, "to_time", None), recover_from=getattr(args, "recover_from", "delta"),
                        force=getattr(args, "force", False),
                        accept_state_loss=getattr(args, "accept_state_loss", False))
    print(plan.describe())
    if plan.refusals:
        return 3
    if not args.yes:
        print("dry run: nothing changed; add --yes to do this")
        return 0
    plan.apply()
    print(f"done: {args.action} {args.job}")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from spark_jobs.ops import restart

    pid = restart.stop_running(_settings(args), args.job, args.timeout)
    print(f"{args.job}: stopped pid {pid} after its batch in flight" if pid else f"{args.job}: not running")
    return 0


def cmd_quality(args: argparse.Namespace) -> int:
    if args.action == "assets":
        from spark_jobs.install import datadocs_assets

        print("\n".join(datadocs_assets.fetch()))
        return 0
    from spark_jobs.ops import quality

    print("\n".join(quality.check(_settings(args), args.tables or None, full=args.full)))
    return 0


def cmd_reconcile(args: argparse.Namespace) -> int:
    from spark_jobs.ops import reconcile
    from spark_jobs.runtime.spark import get_spark

    settings = _settings(args)
    reconcile.check_jobs(args.jobs)  # before a Spark session is started
    result = reconcile.run(get_spark(settings, "sigflow-reconcile"), settings, args.jobs or None)
    print("\n".join(result.lines()))
    return 0


def cmd_maintenance(args: argparse.Namespace) -> int:
    from spark_jobs.ops import maintenance

    for line in maintenance.run(_settings(args), dry_run=args.dry_run):
        print(line)
    return 0


def cmd_quarantine(args: argparse.Namespace) -> int:
    from spark_jobs.ops import quarantine

    print("\n".join(quarantine.summary(_settings(args), args.since, args.samples, tuple(args.by))))
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    from spark_jobs.ops.table_lineage import table_lineage

    print("\n".join(table_lineage(_settings(args), args.table).lines(limit=args.runs)))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from spark_jobs.ops import report

    out = report.write(_settings(args), args.out, args.span)
    print(f"report written: {out.resolve()} (open it in a browser)")
    return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def cmd_airflow(args: argparse.Namespace) -> int:
    from spark_jobs.local import airflow_local

    settings = _settings(args)
    airflow = None  # Ctrl-C and SIGTERM reach here as KeyboardInterrupt (main) in any phase
    try:
        start = airflow_local.start_production if args.production else airflow_local.start
        airflow = start(settings, args.port)
        airflow.wait_ready()
        print(f"Airflow is up at {airflow.url} with the sigflow DAGs (paused until you switch them on)")
        print(f"  users: {', '.join(airflow_local.USERS)} (restarts: {airflow_local.OPERATOR} triggers, "
              f"{airflow_local.REVIEWER} approves); passwords in {airflow.password_file}")
        print(f"  logs: {airflow.settings.airflow_home}/<component>.log; Ctrl-C stops every component")
        airflow.process.wait()
        return airflow.process.returncode or 0
    finally:
        if airflow is not None:
            for signum in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut the stop short
                signal.signal(signum, signal.SIG_IGN)
            print("stopping Airflow's components (the scheduler lets running tasks end) ...", flush=True)
            airflow.stop(progress=lambda line: print(line, flush=True))
            print(f"Airflow stopped (every component; logs in {airflow.settings.airflow_home})", flush=True)


def cmd_contract(args: argparse.Namespace) -> int:
    from spark_jobs.contracts.contract import CONTRACTS
    from spark_jobs.contracts.json_schema import schema_text

    sys.stdout.write(schema_text(CONTRACTS[args.name]))
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    from spark_jobs.jobs.registry import ALL_JOBS

    for job in ALL_JOBS.values():
        print(f"{job.name:20s} {job.summary}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from spark_jobs.ops.quarantine import GROUPINGS

    parser = argparse.ArgumentParser(prog="sigflow", description=__doc__)
    parser.add_argument("--config", help="YAML settings file (also SIGFLOW_CONFIG)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--json", action="store_true",
                        help="also print each batch's JSON progress line (always in <data_dir>/progress/<job>.jsonl)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("broker", help="the embedded Apache Kafka broker (KRaft)")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.set_defaults(func=cmd_broker)

    p = sub.add_parser("cluster", help="a Spark standalone master and workers on 127.0.0.1")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.set_defaults(func=cmd_cluster)

    p = sub.add_parser("postgres", help="PostgreSQL for Airflow's metadata on 127.0.0.1 (production topology)")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.set_defaults(func=cmd_postgres)

    p = sub.add_parser("jars", help="the pinned Maven JARs: fetch and verify (make install), check, pin; "
                                    "archive: the Spark drivers' class archive (make install)")
    p.add_argument("action", choices=["fetch", "check", "pin", "archive"])
    p.add_argument("sets", nargs="*", metavar="SET",
                   help="spark, s3, kafka-broker (default: spark and kafka-broker)")
    p.set_defaults(func=cmd_jars)

    p = sub.add_parser("topics", help="create the configured topics (idempotent), grow them, or switch "
                                      "them to the broker's clock")
    p.add_argument("action", choices=["create", "grow", "use-broker-time"])
    p.add_argument("--partitions", type=int, help="grow: the partitions each topic should have")
    p.add_argument("--topic", action="append", help="grow: this topic only (repeatable; default both)")
    p.set_defaults(func=cmd_topics)

    p = sub.add_parser("produce", help="publish each line of a JSONL file as is")
    p.add_argument("--topic")
    p.add_argument("--file", required=True)
    p.add_argument("--validate", action="store_true",
                   help="check every line against the topic's contract first; send none if one fails")
    p.set_defaults(func=cmd_produce)

    p = sub.add_parser("contract", help="the event and alert contracts as JSON Schema")
    p.add_argument("action", choices=["schema"])
    p.add_argument("name", choices=["events", "alerts"])
    p.set_defaults(func=cmd_contract)

    p = sub.add_parser("simulate", help="generate device events with every kind of defect")
    p.add_argument("--events", type=int, default=0, help="how many, as fast as possible")
    p.add_argument("--rate", type=float, default=200.0, help="events per second (with --duration)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds")
    p.add_argument("--devices", type=int, default=20)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--late", type=float, default=0.02)
    p.add_argument("--out-of-order", type=float, default=0.05)
    p.add_argument("--duplicates", type=float, default=0.03)
    p.add_argument("--malformed", type=float, default=0.03)
    p.add_argument("--alert-every", type=int, default=50, help="one alert per N events")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("run", help="run a job from its checkpoint")
    p.add_argument("job")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--available-now", action="store_true", help="process what is there, then exit (default)")
    mode.add_argument("--processing-time", metavar="INTERVAL",
                      help="run continuously, e.g. 10s (a real-time job: continuously, committing every "
                      "real_time_checkpoint_interval)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("pipeline", help="run every job (or those named) at once, as available-now queries in one session")
    p.add_argument("jobs", nargs="*")
    p.set_defaults(func=cmd_pipeline)

    p = sub.add_parser("status", help="per job: running, last batch, rates, watermark, state, lag")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("tables", help="per table: version, rows, change feed, freshness and how complete it is")
    p.set_defaults(func=cmd_tables)

    p = sub.add_parser("metrics", help="what Spark's metrics lack, in Prometheus's format (--serve: an exporter)")
    p.add_argument("--serve", action="store_true",
                   help="serve /metrics on metrics_host:metrics_port (SIGFLOW_METRICS_PORT) until Ctrl-C")
    p.set_defaults(func=cmd_metrics)

    p = sub.add_parser("checkpoint", help="inspect, resume, rewind or recover a job's checkpoint")
    p.set_defaults(func=cmd_checkpoint)
    actions = p.add_subparsers(dest="action", required=True)
    inspect = actions.add_parser("inspect", help="what the checkpoint holds: batches, offsets, lease, tables")
    inspect.add_argument("job")
    inspect.add_argument("--state", action="store_true",
                         help="what each stateful operator holds (Spark's state data source; the job may run)")
    inspect.add_argument("--device", help="with --state: this device's rows only")
    inspect.add_argument("--batch", type=int, help="with --state: at this committed batch (default: the latest)")
    inspect.add_argument("--limit", type=int, default=20, help="with --state: rows shown per operator")
    resume = actions.add_parser("resume", help="finish a rewind or recover that was cut short")
    rewind = actions.add_parser("rewind", help="re-run the batches after a batch or a time")
    target = rewind.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-batch", type=int, help="re-run every batch after this one")
    target.add_argument("--to-time", help="re-run the batches started after this UTC time (ISO 8601)")
    recover = actions.add_parser("recover", help="rebuild a lost or corrupt checkpoint")
    recover.add_argument("--from", dest="recover_from", choices=["delta", "earliest"], default="delta",
                         help="offsets from the Delta commit metadata, or rebuild from earliest")
    recover.add_argument("--force", action="store_true", help="replace a checkpoint that looks sound")
    recover.add_argument("--accept-state-loss", action="store_true",
                         help="--from delta of a stateful job: accept the listed gap")
    for changing in (resume, rewind, recover):
        changing.add_argument("job")
        changing.add_argument("--yes", action="store_true", help="do it (without: print the plan only)")

    p = sub.add_parser("stop", help="stop a running job gracefully (after its batch in flight)")
    p.add_argument("job")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait")
    p.set_defaults(func=cmd_stop)

    p = sub.add_parser("quality", help="Great Expectations checks of the Delta tables")
    p.set_defaults(func=cmd_quality)
    # subcommands, so `run --full TABLE` parses: beside a positional `action`, the tables
    # after an option are refused
    actions = p.add_subparsers(dest="action", required=True)
    run = actions.add_parser("run", help="run the checks")
    run.add_argument("tables", nargs="*", help="default: every table with a suite")
    run.add_argument("--full", action="store_true",
                     help="check every row, not only those added since the last passing run (in chunks)")
    actions.add_parser("assets", help="fetch the JS and CSS their Data Docs pages need offline (make install)")

    p = sub.add_parser("reconcile", help="count late events in the windows, sessions and alert contexts they belong to")
    p.add_argument("jobs", nargs="*", metavar="JOB", help=", ".join(RECONCILED_JOBS) + " (default: all)")
    p.set_defaults(func=cmd_reconcile)

    p = sub.add_parser("maintenance", help="compact, vacuum, prune quarantine and checkpoint logs")
    p.add_argument("--dry-run", action="store_true", help="say what would be done")
    p.set_defaults(func=cmd_maintenance)

    p = sub.add_parser("quarantine", help="quarantined records by reason, topic and partition, with samples")
    p.add_argument("--since", default="24 hours", help="how far back, e.g. 1h (default 24 hours)")
    p.add_argument("--samples", type=int, default=3, help="raw payloads shown per reason")
    p.add_argument("--by", nargs="+", default=[], choices=GROUPINGS,
                   help="counts per device (the payload's device_id) or per producer key")
    p.set_defaults(func=cmd_quarantine)

    p = sub.add_parser("report", help="an HTML page: averages, late data, quarantine; batch time, watermark, lag, state per job")
    p.add_argument("--out", help="default: <data_dir>/report.html")
    p.add_argument("--span", default="24 hours",
                   help="each chart shows this much before its table's newest row (default: 24 hours)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("lineage", help="which job, DAG run and Kafka topics produced a table, up to which version")
    p.add_argument("table")
    p.add_argument("--runs", type=int, default=5, help="how many of the newest runs to show (default 5)")
    p.set_defaults(func=cmd_lineage)

    p = sub.add_parser("airflow", help="Airflow standalone with the sigflow DAGs on 127.0.0.1 (embedded mode)")
    p.add_argument("--port", type=int, help="default: the airflow_port setting (8080)")
    p.add_argument("--production", action="store_true",
                   help="as production runs it: PostgreSQL, LocalExecutor, each component its own process")
    p.set_defaults(func=cmd_airflow)

    p = sub.add_parser("jobs", help="list the jobs")
    p.set_defaults(func=cmd_jobs)
    return parser


# Libraries whose INFO lines are noise on a console (matplotlib's "categorical units",
# Kafka client connection notes, GX's progress); their warnings still show.
QUIET_LOGGERS = ("py4j", "kafka", "matplotlib", "PIL", "great_expectations", "urllib3", "asyncio", "httpx",
                 "openlineage")


class ConsoleFormat(logging.Formatter):
    """``HH:MM:SS message`` for people; warnings and errors say so."""

    def format(self, record: logging.LogRecord) -> str:
        text = terminal(super().format(record), keep_newlines=True)
        if record.levelno >= logging.WARNING:
            stamp, _, message = text.partition(" ")
            return f"{stamp} {record.levelname.lower()}: {message}"
        return text


def configure_logging(verbose: bool = False, json_progress: bool = False) -> None:
    """Logging levels and formats, set once per command."""
    handler = logging.StreamHandler()
    if verbose:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    else:
        handler.setFormatter(ConsoleFormat("%(asctime)s %(message)s", datefmt="%H:%M:%S"))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler], force=True)
    for noisy in QUIET_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # a warning per retry of a request whose failure the caller reports in one line
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    if not verbose:
        # When the driver's JVM dies, py4j logs a traceback per thread that was talking to
        # it, partly through the root logger; the runner says what happened in one line
        # (DriverDied), so those are for -v.
        handler.addFilter(lambda record: f"{os.sep}py4j{os.sep}" not in record.pathname)
    # Per-batch JSON lines go to each job's progress file; on the console only with --json,
    # bare, one per line, for log shippers.
    progress = logging.getLogger("sigflow.progress")
    progress.propagate = False
    progress.handlers.clear()
    if json_progress:
        bare = logging.StreamHandler(sys.stdout)
        bare.setFormatter(logging.Formatter("%(message)s"))
        progress.addHandler(bare)
    else:
        progress.addHandler(logging.NullHandler())


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Lines carry record content (payloads, device ids, keys, reasons): a control character
    # in one is shown escaped, never run by the terminal
    if not isinstance(sys.stdout, TerminalStream):
        sys.stdout = TerminalStream(sys.stdout)
    configure_logging(args.verbose, args.json)
    # SIGTERM (`kill`, a service manager) stops a command as Ctrl-C does, and Ctrl-C works
    # also in a shell's background job, which starts with SIGINT ignored. Long-running jobs
    # replace these with a graceful stop (runtime/runner.py), `sigflow airflow` with its own.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _interrupt)
    try:
        return args.func(args)
    except SigflowError as exc:
        for line in exc.details:
            print(line)
        print(f"sigflow: error: {terminal(exc.message)}", file=sys.stderr)
        if exc.hint:
            print(f"sigflow: hint: {terminal(exc.hint)}", file=sys.stderr)
        if isinstance(exc, DriverDied):
            # py4j's threads still wait on the JVM that is gone, and a normal interpreter
            # exit can abort on them (seen here: SIGABRT instead of exit code 2)
            sys.stderr.flush()
            os._exit(2)
        return 130 if isinstance(exc, Interrupted) else 2
    except KeyboardInterrupt:
        print("sigflow: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
