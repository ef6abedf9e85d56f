"""`sigflow catalog`, `sql`: the tables by name. The catalog (a Hive metastore: the embedded one
started here, or production's) and the SQL endpoint (Spark Connect) that serves it."""

from __future__ import annotations

import argparse
import threading

from spark_jobs.cli.common import run_service, settings_of


def cmd_catalog(args: argparse.Namespace) -> int:
    from spark_jobs.local import catalog
    from spark_jobs.runtime.catalog import embedded

    settings = settings_of(args)
    if args.action == "register":
        from spark_jobs.ops.catalog import register_tables

        print("\n".join(register_tables(settings)))
        return 0
    if args.action == "serve":
        print(f"catalog's metastore serving on {args.host}:{args.port}", flush=True)
        catalog.serve(settings, args.host, args.port)  # does not return: the JVM takes this process's place

    def describe(info) -> list[str]:
        return [f"catalog's metastore running at {info.uri} (pid {info.pid}, log {info.log_file})",
                f"  register the tables: sigflow catalog register; a Spark session reads them by name with "
                f"spark.sql.catalogImplementation=hive and spark.hadoop.hive.metastore.uris={info.uri}"]

    return run_service(args.action, "catalog", lambda: describe(catalog.start(settings)),
                       lambda: catalog.stop(settings), lambda: describe(info) if (info := embedded(settings)) else [])


def cmd_sql(args: argparse.Namespace) -> int:
    from spark_jobs.local import sql_endpoint

    settings = settings_of(args)
    if args.action == "serve":
        from spark_jobs.ops.sql_endpoint import serve

        serve(settings, sql_endpoint.ensure_token(settings),
              lambda lines: print("\n".join(lines), flush=True), threading.Event())
        return 0

    def describe(info) -> list[str]:
        return [f"SQL endpoint serving Spark Connect at {info.address} (pid {info.pid}, log {info.log_file})",
                f"  clients: SparkSession.builder.remote(\"{info.address}/;token=\" + the token in "
                f"{sql_endpoint.token_file(settings)})"]

    return run_service(args.action, "SQL endpoint", lambda: describe(sql_endpoint.start(settings)),
                       lambda: sql_endpoint.stop(settings),
                       lambda: describe(info) if (info := sql_endpoint.status(settings)) else [])


def register(sub) -> None:
    p = sub.add_parser("catalog", help="the tables by name: the embedded Hive metastore, and registering the tables")
    p.add_argument("action", choices=["start", "stop", "status", "register", "serve"],
                   help="start|stop|status: the embedded metastore on 127.0.0.1; register: every table in "
                        "the configured (or embedded) catalog; serve: the metastore in the foreground "
                        "(a container, a service manager)")
    p.add_argument("--host", default="127.0.0.1", help="serve: the address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=9083, help="serve: the port (default 9083)")
    p.set_defaults(func=cmd_catalog)

    p = sub.add_parser("sql", help="the SQL endpoint: Spark Connect on the catalog, with a token")
    p.add_argument("action", choices=["start", "stop", "status", "serve"],
                   help="start|stop|status: in the background on this machine; serve: in the foreground "
                        "(a container, a service manager)")
    p.set_defaults(func=cmd_sql)
