"""`sigflow broker`, `cluster`, `postgres`, `airflow`: the processes this machine runs in place of production's services (``spark_jobs.local``): the embedded Kafka broker, a Spark standalone cluster, PostgreSQL, Airflow."""

from __future__ import annotations

import argparse
import signal

from spark_jobs.cli.common import run_service, settings_of
from spark_jobs.runtime.kafka import address as kafka_address


def cmd_broker(args: argparse.Namespace) -> int:
    from spark_jobs.local import broker

    settings = settings_of(args)

    def start() -> list[str]:
        info = broker.start(settings)
        return [f"broker running at {info.bootstrap_servers} (pid {info.pid}, log {info.log_file})"]

    def status() -> list[str]:
        info = kafka_address.status(settings)
        return [f"broker running at {info.bootstrap_servers} (pid {info.pid}, log {info.log_file})"] if info else []

    return run_service(args.action, "broker", start, lambda: broker.stop(settings), status)


def cmd_cluster(args: argparse.Namespace) -> int:
    from spark_jobs.local import cluster

    settings = settings_of(args)

    def start() -> list[str]:
        info = cluster.start(settings)
        return [f"Spark master {info.master_url} with {len(info.worker_pids)} workers (UI {info.ui_url}, "
                f"logs in {cluster.cluster_dir(settings)})",
                f"  submit jobs there: export SIGFLOW_SPARK_MASTER={info.master_url}",
                f"  (from another data_dir also SIGFLOW_SPARK_AUTH_SECRET_FILE={cluster.auth_secret_file(settings)})"]

    return run_service(args.action, "Spark cluster", start, lambda: cluster.stop(settings),
                    lambda: cluster.describe(settings) if cluster.recorded(settings) else [])


def cmd_postgres(args: argparse.Namespace) -> int:
    from spark_jobs.local import postgres

    settings = settings_of(args)

    def start() -> list[str]:
        info = postgres.start(settings)
        return [f"PostgreSQL on 127.0.0.1:{info.port}, database {postgres.DATABASE}, user {postgres.USER}, "
                f"password in {info.password_file}"]

    def status() -> list[str]:
        info = postgres.status(settings)
        return [f"PostgreSQL running on 127.0.0.1:{info.port}"] if info else []

    return run_service(args.action, "PostgreSQL", start, lambda: postgres.stop(settings), status)


def cmd_airflow(args: argparse.Namespace) -> int:
    from spark_jobs.local import airflow_local

    settings = settings_of(args)
    airflow = None  # Ctrl-C and SIGTERM reach here as KeyboardInterrupt (main) in any phase
    try:
        start = airflow_local.start_production if args.production else airflow_local.start
        airflow = start(settings, args.port)
        airflow.wait_ready()
        print(f"Airflow is up at {airflow.url} with the sigflow DAGs (paused until you switch them on)")
        users = airflow_local.PEOPLE if args.production else tuple(airflow_local.USERS)
        signing_in = ("the FAB auth manager, sigflow's roles (docs/security.md)" if args.production else
                      "Airflow's simple auth manager, for development only: production runs --production")
        print(f"  sign-in: {signing_in}")
        print(f"  users: {', '.join(users)} (restarts: {airflow_local.OPERATOR} triggers, "
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


def register(sub) -> None:
    p = sub.add_parser("broker", help="the embedded Apache Kafka broker (KRaft)")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.set_defaults(func=cmd_broker)

    p = sub.add_parser("cluster", help="a Spark standalone master and workers on 127.0.0.1")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.set_defaults(func=cmd_cluster)

    p = sub.add_parser("postgres", help="PostgreSQL for Airflow's metadata on 127.0.0.1 (production topology)")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.set_defaults(func=cmd_postgres)

    p = sub.add_parser("airflow", help="Airflow standalone with the sigflow DAGs on 127.0.0.1 (embedded mode)")
    p.add_argument("--port", type=int, help="default: the airflow_port setting (8080)")
    p.add_argument("--production", action="store_true",
                   help="as production runs it: PostgreSQL, LocalExecutor, each component its own process")
    p.set_defaults(func=cmd_airflow)
