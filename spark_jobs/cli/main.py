"""The ``sigflow`` command: its parser, made of the command groups' own, and ``main``, which
runs a command and turns a failure into one line saying what failed and what to do."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback

from spark_jobs.cli import (
    catalog,
    checkpoint,
    feed,
    install,
    jobs,
    observe,
    services,
    tables,
)
from spark_jobs.cli.console import configure_logging
from spark_jobs.errors import DriverDied, Interrupted, SigflowError, first_line
from spark_jobs.ops.terminal_text import TerminalStream, terminal

DESCRIPTION = "sigflow: the command line every DAG task and every runbook step uses."
GROUPS = (services, install, feed, jobs, checkpoint, tables, catalog, observe)  # in `sigflow --help`'s order


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sigflow", description=DESCRIPTION)
    parser.add_argument("--config", help="YAML settings file (also SIGFLOW_CONFIG)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--json", action="store_true",
                        help="also print each batch's JSON progress line (always in <data_dir>/progress/<job>.jsonl)")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.register(sub)
    return parser


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
    except Exception as exc:  # noqa: BLE001 - a failure no check foresaw: one line, its traceback behind -v
        if args.verbose:
            traceback.print_exc()
        print(f"sigflow: error: {type(exc).__name__}: {terminal(first_line(exc)[:500])}", file=sys.stderr)
        print("sigflow: hint: sigflow does not explain this failure yet; `sigflow -v` shows its traceback",
              file=sys.stderr)
        return 2
