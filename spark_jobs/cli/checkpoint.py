"""`sigflow checkpoint`: a job's checkpoint inspected, and the on-call restarts (resume, rewind, recover) as plans printed first, applied with --yes."""

from __future__ import annotations

import argparse

from spark_jobs.cli.common import settings_of, whole_number


def cmd_checkpoint(args: argparse.Namespace) -> int:
    from spark_jobs.jobs.registry import get_job
    from spark_jobs.ops import restart, status

    settings = settings_of(args)
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


def register(sub) -> None:
    p = sub.add_parser("checkpoint", help="inspect, resume, rewind or recover a job's checkpoint")
    p.set_defaults(func=cmd_checkpoint)
    actions = p.add_subparsers(dest="action", required=True)
    inspect = actions.add_parser("inspect", help="what the checkpoint holds: batches, offsets, lease, tables")
    inspect.add_argument("job")
    inspect.add_argument("--state", action="store_true",
                         help="what each stateful operator holds (Spark's state data source; the job may run)")
    inspect.add_argument("--device", help="with --state: this device's rows only")
    inspect.add_argument("--batch", type=whole_number, help="with --state: at this committed batch (default: the latest)")
    inspect.add_argument("--limit", type=whole_number, default=20, help="with --state: rows shown per operator")
    resume = actions.add_parser("resume", help="finish a rewind or recover that was cut short")
    rewind = actions.add_parser("rewind", help="re-run the batches after a batch or a time")
    target = rewind.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-batch", type=whole_number, help="re-run every batch after this one")
    target.add_argument("--to-time", help="re-run the batches started after this UTC time (ISO 8601)")
    recover = actions.add_parser("recover", help="rebuild a lost or corrupt checkpoint, or a job's tables")
    recover.add_argument("--from", dest="recover_from", choices=["delta", "earliest", "raw"], default="delta",
                         help="offsets from the Delta commit metadata; or rebuild from Kafka's earliest; or "
                              "from device_events_raw (beyond Kafka's retention), then Kafka")
    recover.add_argument("--force", action="store_true", help="replace a checkpoint that looks sound")
    recover.add_argument("--accept-state-loss", action="store_true",
                         help="--from delta of a stateful job: accept the listed gap")
    for changing in (resume, rewind, recover):
        changing.add_argument("job")
        changing.add_argument("--yes", action="store_true", help="do it (without: print the plan only)")
