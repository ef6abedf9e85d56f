"""`sigflow sql serve`: Spark Connect on the catalog, so that a client in any process or on any
machine it may reach queries the tables by name (``SELECT * FROM sigflow.device_sessions``).

One Spark application holds the server: it registers every table first (so the endpoint
always serves all of them), then serves until SIGTERM or Ctrl-C. Every client presents the
token (Spark Connect's pre-shared key, a bearer token over gRPC): refused without it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from spark_jobs.config import Settings
from spark_jobs.ops.catalog import registered
from spark_jobs.runtime.catalog import (
    require_session_on,
    required_uri,
    session_conf,
    sql_address,
)


def serve(settings: Settings, token: str, ready: Callable[[list[str]], None], stop: threading.Event) -> None:
    """Register the tables, serve Spark Connect until ``stop`` is set, then stop the server."""
    from spark_jobs.runtime.spark import get_spark

    uri = required_uri(settings)
    conf = {
        **session_conf(settings, uri),
        "spark.connect.grpc.binding.address": settings.operations.sql_host,
        "spark.connect.grpc.binding.port": str(settings.operations.sql_port),
        # Spark redacts settings named like a token in its UI and logs
        "spark.connect.authenticate.token": token,
    }
    spark = require_session_on(get_spark(settings, "sigflow-sql", conf=conf), uri)
    service = spark._jvm.org.apache.spark.sql.connect.service.SparkConnectService  # noqa: SLF001
    lines = registered(spark, settings)
    service.start(spark.sparkContext._jsc.sc())  # noqa: SLF001
    try:
        ready([*lines, f"SQL endpoint serving Spark Connect at {sql_address(settings)} (Ctrl-C stops it)"])
        stop.wait()
    finally:
        service.stop(getattr(service, "stop$default$1")(), getattr(service, "stop$default$2")())
        spark.stop()
