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

Its stderr passes through a thread of the Python process, line by line, to the process's
own stderr, less one line: "WARNING: Using incubator modules: jdk.incubator.vector", which
the Java launcher prints on every start because Spark's launcher adds that module (for its ML
vector code, which no job uses), and which nobody can act on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO

UNACTIONABLE_LINES = (b"WARNING: Using incubator modules: jdk.incubator.vector\n",)


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

        if kwargs.get("stderr") is not None:  # a caller's own choice stands
            return popen(*args, preexec_fn=in_the_child, **kwargs)
        process = popen(*args, preexec_fn=in_the_child, stderr=subprocess.PIPE, **kwargs)
        threading.Thread(target=_forward, args=(process.stderr,), name="sigflow-driver-stderr", daemon=True).start()
        return process

    java_gateway.Popen = launch
    try:
        yield
    finally:
        java_gateway.Popen = popen


def _forward(stream: IO[bytes]) -> None:
    """Copy the JVM's stderr to this process's (its file descriptor, as the JVM would have
    written it), until the JVM closes it. Read to the end whatever becomes of this process's
    stderr (a reader gone, a pipe closed): a full pipe would hold the JVM at its next line."""
    writable = True
    with stream:
        for line in stream:
            if not writable or line in UNACTIONABLE_LINES:
                continue
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(2, view):]
            except OSError:
                writable = False
