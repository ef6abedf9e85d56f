"""`sigflow metrics`, `quarantine`, `report`, `lineage`: what the pipeline did: metrics for Prometheus, the quarantine, an HTML report, lineage."""

from __future__ import annotations

import argparse

from spark_jobs.cli.common import settings_of, whole_number


def cmd_metrics(args: argparse.Namespace) -> int:
    import threading

    from spark_jobs.ops import prometheus

    settings = settings_of(args)
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


def cmd_quarantine(args: argparse.Namespace) -> int:
    from spark_jobs.ops import quarantine

    print("\n".join(quarantine.summary(settings_of(args), args.since, args.samples, tuple(args.by))))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from spark_jobs.ops import report

    out = report.write(settings_of(args), args.out, args.span)
    print(f"report written: {out.resolve()} (open it in a browser)")
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    from spark_jobs.ops.table_lineage import table_lineage

    print("\n".join(table_lineage(settings_of(args), args.table).lines(limit=args.runs)))
    return 0


def register(sub) -> None:
    from spark_jobs.ops.quarantine import GROUPINGS

    p = sub.add_parser("metrics", help="what Spark's metrics lack, in Prometheus's format (--serve: an exporter)")
    p.add_argument("--serve", action="store_true",
                   help="serve /metrics on metrics_host:metrics_port (SIGFLOW_METRICS_PORT) until Ctrl-C")
    p.set_defaults(func=cmd_metrics)

    p = sub.add_parser("quarantine", help="quarantined records by reason, topic and partition, with samples")
    p.add_argument("--since", default="24 hours", help="how far back, e.g. 1h (default 24 hours)")
    p.add_argument("--samples", type=whole_number, default=3, help="raw payloads shown per reason")
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
    p.add_argument("--runs", type=whole_number, default=5, help="how many of the newest runs to show (default 5)")
    p.set_defaults(func=cmd_lineage)
