"""`sigflow tables`, `quality`, `reconcile`, `maintenance`: the tables: their state, their data-quality checks, late events counted, maintenance."""

from __future__ import annotations

import argparse

from spark_jobs.cli.common import settings_of
from spark_jobs.jobs import RECONCILED_JOBS


def cmd_tables(args: argparse.Namespace) -> int:
    if args.action == "rebuild":
        from spark_jobs.ops import rebuild
        from spark_jobs.runtime.spark import get_spark

        settings = settings_of(args)
        print("\n".join(rebuild.rebuild(get_spark(settings, "sigflow-rebuild"), settings, args.table).lines()))
        return 0
    from spark_jobs.ops import table_overview

    for table in table_overview.overview(settings_of(args)):
        print(table.line())
    return 0


def cmd_quality(args: argparse.Namespace) -> int:
    if args.action == "assets":
        from spark_jobs.install import datadocs_assets

        print("\n".join(datadocs_assets.fetch()))
        return 0
    from spark_jobs.ops import quality

    print("\n".join(quality.check(settings_of(args), args.tables or None, full=args.full)))
    return 0


def cmd_reconcile(args: argparse.Namespace) -> int:
    from spark_jobs.ops import reconcile
    from spark_jobs.runtime.spark import get_spark

    settings = settings_of(args)
    reconcile.check_jobs(args.jobs)  # before a Spark session is started
    result = reconcile.run(get_spark(settings, "sigflow-reconcile"), settings, args.jobs or None)
    print("\n".join(result.lines()))
    return 0


def cmd_maintenance(args: argparse.Namespace) -> int:
    from spark_jobs.ops import maintenance

    for line in maintenance.run(settings_of(args), dry_run=args.dry_run):
        print(line)
    return 0


def register(sub) -> None:
    p = sub.add_parser("tables", help="per table: version, rows, change feed, freshness and how complete it is")
    p.set_defaults(func=cmd_tables)
    actions = p.add_subparsers(dest="action")  # none: the overview
    rebuild = actions.add_parser("rebuild", help="write a table several jobs keep again from the tables its "
                                 "rows come from (while the jobs run)")
    rebuild.add_argument("table", choices=("device_status",))

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
