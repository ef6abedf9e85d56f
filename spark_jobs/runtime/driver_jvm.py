"""The driver's JVM leaves stopping to its Python process.

A job stops gracefully on SIGTERM: its Python process lets the batch in flight finish, then
stops the query and the session (runtime/runner.py). A SIGTERM sent to the whole process
group or control group reaches the driver's JVM too (`timeout`, systemd's default
``KillMode=control-group``, ``kill -TERM -PGID``), and the JVM's own handler then shuts Spark
down under the batch: a page of Java stack traces and a run that ends as if its driver had
died. PySpark already starts the JVM with SIGINT ignored, so that Ctrl-C reaches only Python;
the JVM started here ignores SIGTERM as well. It still ends with its Python process, which
holds its stdin: Spark's gateway exits when that pipe closes, however Python ended, SIGKILL
included (tests/spark_jobs/test_cli_signals.py).
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def started_deaf_to_sigterm() -> Iterator[None]:
    """A JVM PySpark launches within the block starts with SIGTERM ignored."""
    from pyspark import java_gateway

    # PySpark sets its own preexec_fn (SIGINT ignored) and has no option for more
    popen = java_gateway.Popen

    def launch(*args, preexec_fn: Callable[[], None] | None = None, **kwargs):
        def in_the_child() -> None:
            if preexec_fn is not None:
                preexec_fn()
            signal.signal(signal.SIGTERM, signal.SIG_IGN)

        return popen(*args, preexec_fn=in_the_child, **kwargs)

    java_gateway.Popen = launch
    try:
        yield
    finally:
        java_gateway.Popen = popen
