"""`sigflow jars`, `topics`, `contract`, `jobs`: what a machine needs before any job runs: the pinned JARs, the topics, the contracts, the list of jobs."""

from __future__ import annotations

import argparse
import sys

from spark_jobs.cli.common import settings_of
from spark_jobs.errors import SigflowError


def cmd_jars(args: argparse.Namespace) -> int:
    from spark_jobs.install import jars
    from spark_jobs.runtime import classpath

    settings = settings_of(args)
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
        print("\n".join(deploy.grow_topics(settings_of(args), args.partitions, args.topic or None)))
        return 0
    if args.action == "use-broker-time":
        print("\n".join(deploy.use_broker_time(settings_of(args))))
        return 0
    print("\n".join(deploy.ensure_topics(settings_of(args))))
    return 0


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


def register(sub) -> None:
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

    p = sub.add_parser("contract", help="the event and alert contracts as JSON Schema")
    p.add_argument("action", choices=["schema"])
    p.add_argument("name", choices=["events", "alerts"])
    p.set_defaults(func=cmd_contract)

    p = sub.add_parser("jobs", help="list the jobs")
    p.set_defaults(func=cmd_jobs)
