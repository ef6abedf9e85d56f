"""PySpark's own log of the errors Spark raises, routed into sigflow's log.

PySpark 4 logs every error that comes with a query context (a column that does not resolve,
a value that does not cast) as it converts it: a JSON line with the JVM's stack, on stderr,
through handlers of its own that ignore the logging set up around it, and even when the
caller handles the error. The console then showed that line beside the command's one line
saying what failed. Here those records become debug records of ``sigflow.spark``: shown
with -v, like every traceback, and dropped otherwise; the error itself is raised as before.
"""

from __future__ import annotations

import logging

PYSPARK_ERROR_LOGGERS = ("DataFrameQueryContextLogger", "SQLQueryContextLogger")
LOGGER = "sigflow.spark"


class AsDebugRecord(logging.Handler):
    """Hands a record to ``sigflow.spark`` at debug level, if that level is on."""

    def emit(self, record: logging.LogRecord) -> None:
        target = logging.getLogger(LOGGER)
        if target.isEnabledFor(logging.DEBUG):
            record.levelno, record.levelname, record.name = logging.DEBUG, "DEBUG", LOGGER
            target.handle(record)


def route_into_sigflow_log() -> None:
    """Give PySpark's error loggers the one handler above (idempotent). PySpark makes each
    logger once and keeps it, so the handler stays for the process."""
    from pyspark.logger import PySparkLogger

    for name in PYSPARK_ERROR_LOGGERS:
        logger = PySparkLogger.getLogger(name)
        logger.handlers.clear()
        # the base class's: PySparkLogger's own would set a JSON formatter on the handler
        logging.Logger.addHandler(logger, AsDebugRecord())
