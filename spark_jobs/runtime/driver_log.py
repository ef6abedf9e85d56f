"""Where the driver's JVM writes Spark's warnings and errors.

On a console a person reads (the CLI without -v, its driver started here) each of them is one
line, its exception's first line beside it, and each in full, stack traces included, goes to
``<data_dir>/logs/<app>.log``, which a failure's hint names. A failed query's error otherwise
put about 500 lines of JVM and Python stacks between the command and its one line saying what
failed. Everywhere else Spark's log is whole on stderr: under spark-submit (the task's log),
with -v, and in a driver an Airflow task starts.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from spark_jobs.runtime.jvm_options import LOG4J2_CONFIG
from spark_jobs.runtime.private_files import private_dir

CONSOLE_OVERLAY = Path(__file__).with_name("log4j2-terminal.properties")
LOG_PROPERTY = "sigflow.driver_log"

_console = {"terse": False}


def read_by_a_person(terse: bool) -> None:
    """Say whether drivers started by this process log to a person's console (the CLI's)."""
    _console["terse"] = terse


def log_file(data_dir: str, app_name: str) -> Path:
    return Path(data_dir) / "logs" / f"{app_name}.log"


def java_options(data_dir: str, app_name: str) -> str:
    """The driver's Java options for the console's one-line form and the file beside it;
    none when the console is no person's. The folder is its owner's alone: a JVM error can
    quote a setting."""
    if not _console["terse"]:
        return ""
    path = log_file(data_dir, app_name).resolve()
    private_dir(path.parent)
    # the driver's options are split as a shell would (Spark's splitCommandString): a space in
    # the data directory's path stays in its value
    return (f"-Dlog4j2.configurationFile={LOG4J2_CONFIG},{CONSOLE_OVERLAY} "
            f"-D{LOG_PROPERTY}={shlex.quote(str(path))}")


def written_to() -> Path | None:
    """The file this process's driver writes Spark's log to in full, if it does."""
    from pyspark import SparkContext

    try:
        value = SparkContext._jvm.java.lang.System.getProperty(LOG_PROPERTY)  # noqa: SLF001 - the JVM's own answer
    except Exception:  # noqa: BLE001 - no driver, or one gone, has no file to name
        return None
    return Path(value) if value else None
