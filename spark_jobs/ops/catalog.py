"""`sigflow catalog register` and deploy's step: every declared table by name in the catalog.

A table is registered once its Delta table exists (deploy creates them all first); until then
its line says so. With no catalog configured or running, nothing starts and the line says so:
the tables are read by path as before.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from spark_jobs.config import Settings
from spark_jobs.contracts.tables import ALL_TABLES
from spark_jobs.runtime.catalog import (
    catalog_uri,
    register,
    require_session_on,
    session_conf,
)
from spark_jobs.runtime.delta import table_access

NO_CATALOG = ("catalog: none configured or running, tables are read by path "
              "(`sigflow catalog start`, or set catalog_uri)")


def register_tables(settings: Settings) -> list[str]:
    """Register every existing table in the configured (or embedded) catalog, in a Spark
    session of its own pointed at it."""
    from spark_jobs.runtime.spark import get_spark

    uri = catalog_uri(settings)
    if not uri:
        return [NO_CATALOG]
    spark = get_spark(settings, "sigflow-catalog", conf=session_conf(settings, uri))
    return registered(require_session_on(spark, uri), settings)


def registered(spark: SparkSession, settings: Settings) -> list[str]:
    """Register every existing table through ``spark`` (a session on the catalog): a line each."""
    database = settings.operations.catalog_database
    present = {name: settings.table_uri(name) for name in ALL_TABLES if table_access.exists(settings.table_uri(name))}
    lines = [done.line(database) for done in register(spark, database, present)]
    return lines + [f"catalog {database}.{name}: not registered, the table does not exist yet (deploy creates it)"
                    for name in ALL_TABLES if name not in present]
