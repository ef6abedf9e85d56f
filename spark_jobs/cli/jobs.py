"""`sigflow run`, `pipeline`, `stop`, `status`: running the jobs: one from its checkpoint, all at once, a graceful stop, their status."""

from __future__ import annotations

import argparse
import logging

from spark_jobs.cli.common import settings_of
from spark_jobs.config import duration_seconds, load_settings
from spark_jobs.errors import ConfigError


def _trigger(args: argparse.Namespace) -> dict[str, str]:
    """The trigger interval --processing-time sets, checked as the flag it came from (the
    setting's error named the config file and SIGFLOW_TRIGGER_INTERVAL, which were not used)."""
    if not args.processing_time:
        return {}
    try:
        duration_seconds(args.processing_time, "trigger_interval")
    except ConfigError:
        raise ConfigError(f"--processing-time {args.processing_time!r} is not a duration",
                          "write it like 10s, '30 seconds' or 5m") from None
    return {"trigger_interval": args.processing_time}


def cmd_run(args: argparse.Namespace) -> int:
    from spark_jobs.runtime import launch

    settings = load_settings(config_file=args.config, overrides=_trigger(args))
    summary = launch.run(args.job, settings, available_now=not args.processing_time)
    print(summary.line())
    return 0


def cmd_pipeline(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from spark_jobs.jobs.registry import JOBS
    from spark_jobs.runtime import launch
    from spark_jobs.runtime.metrics import summary as run_summary

    if args.processing_time:
        return _keep_pipeline(args)
    settings = settings_of(args)
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


def _keep_pipeline(args: argparse.Namespace) -> int:
    """Every job (or those named) continuously in one application, until SIGTERM or Ctrl-C."""
    from spark_jobs.jobs.registry import JOBS
    from spark_jobs.runtime import launch
    from spark_jobs.runtime.metrics import summary as run_summary

    settings = load_settings(config_file=args.config, overrides=_trigger(args))
    names = args.jobs or list(JOBS)
    def starting() -> None:
        print(f"{', '.join(names)}: one application, a batch every {settings.streaming.trigger_interval} per job, "
              "until Ctrl-C or SIGTERM (each job's batches: its progress lines; `sigflow status`)", flush=True)

    summaries = launch.keep_pipeline(settings, names, on_start=starting)
    print("\n".join(run_summary.summary_table(summaries)))
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from spark_jobs.ops import restart, status

    settings = settings_of(args)
    holder = status.running_holder(settings, args.job)
    pid = restart.stop_running(settings, args.job, args.timeout)
    if pid is not None and (holder is None or holder.shared):  # one of an application's jobs
        print(f"{args.job}: stopped after its batch in flight; the other jobs of its application (pid {pid}) go on, "
              f"and it stays stopped until a restart of it is applied (`sigflow checkpoint resume {args.job} --yes`)")
    else:
        print(f"{args.job}: stopped pid {pid} after its batch in flight" if pid else f"{args.job}: not running")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from spark_jobs.ops import status

    for job_status in status.all_status(settings_of(args)):
        print("\n".join(job_status.lines()))
    return 0


def register(sub) -> None:
    p = sub.add_parser("run", help="run a job from its checkpoint")
    p.add_argument("job")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--available-now", action="store_true", help="process what is there, then exit (default)")
    mode.add_argument("--processing-time", metavar="INTERVAL",
                      help="run continuously, e.g. 10s (a real-time job: continuously, committing every "
                      "real_time_checkpoint_interval)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("pipeline", help="every job (or those named) at once in one application: available-now "
                                        "queries, or continuously with --processing-time")
    p.add_argument("jobs", nargs="*")
    p.add_argument("--processing-time", metavar="INTERVAL",
                   help="run continuously, a batch per job every INTERVAL (e.g. 10s), until Ctrl-C or SIGTERM; "
                        "a failed job starts again alone")
    p.set_defaults(func=cmd_pipeline)

    p = sub.add_parser("stop", help="stop a running job gracefully (after its batch in flight)")
    p.add_argument("job")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait")
    p.set_defaults(func=cmd_stop)

    p = sub.add_parser("status", help="per job: running, last batch, rates, watermark, state, lag")
    p.set_defaults(func=cmd_status)
