"""The console: log lines for people (``HH:MM:SS message``; warnings say so), tracebacks
behind -v, each batch's JSON progress line only with --json."""

from __future__ import annotations

import logging
import os
import sys

from spark_jobs.ops.terminal_text import terminal
from spark_jobs.runtime import driver_log

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
    # kafka-python (`sigflow produce`) logs each retry of a broker it lost, several lines a
    # second; produce says in one line what was not delivered
    logging.getLogger("kafka").setLevel(logging.DEBUG if verbose else logging.CRITICAL)
    driver_log.read_by_a_person(not verbose)
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

