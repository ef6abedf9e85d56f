"""The catalog: every declared table registered by name in a Hive metastore, as the Delta table
at its path, so that any Spark session pointed at the metastore reads ``sigflow.device_sessions``.

Where the metastore is: ``catalog_uri``, else the embedded one ``spark_jobs.local.catalog``
recorded under ``<data_dir>/catalog/catalog.json``. Jobs keep writing by path: a Delta table's
schema, column comments and description live in its own log, so the metastore holds only a
name and a location, and a migration that changes the table needs nothing from it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from spark_jobs.config import Settings
from spark_jobs.errors import SigflowError
from spark_jobs.runtime.processes import is_recorded_process

MAIN_CLASS = "io.sigflow.metastore.MetastoreServer"  # the embedded metastore's JVM main class


@dataclass(frozen=True)
class CatalogInfo:
    pid: int
    uri: str
    log_file: str
    process_started: float | None = None

    @property
    def alive(self) -> bool:
        return is_recorded_process(self.pid, self.process_started, MAIN_CLASS)


def catalog_dir(settings: Settings) -> Path:
    return Path(settings.data_dir) / "catalog"


def state_file(settings: Settings) -> Path:
    return catalog_dir(settings) / "catalog.json"


def embedded(settings: Settings) -> CatalogInfo | None:
    """The embedded metastore recorded under data_dir if its process is alive, else None."""
    path = state_file(settings)
    if not path.exists():
        return None
    info = CatalogInfo(**json.loads(path.read_text()))
    return info if info.alive else None


def catalog_uri(settings: Settings) -> str:
    """The metastore to use: the configured one, else the embedded one, else "" (no catalog)."""
    if settings.operations.catalog_uri:
        return settings.operations.catalog_uri
    info = embedded(settings)
    return info.uri if info else ""


def required_uri(settings: Settings) -> str:
    uri = catalog_uri(settings)
    if not uri:
        raise SigflowError("no catalog configured and the embedded one is not running",
                           "start it with `sigflow catalog start`, or set SIGFLOW_CATALOG_URI")
    return uri


def session_conf(settings: Settings, uri: str) -> dict[str, str]:
    """A session's settings to use the metastore at ``uri`` as its catalog (static: given at start).
    Its warehouse (where a database made without a location lives) is under data_dir."""
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.hive.metastore.uris": uri,
        "spark.sql.warehouse.dir": str((catalog_dir(settings) / "warehouse").resolve()),
    }


def sql_address(settings: Settings) -> str:
    """The SQL endpoint's connection string, as a client gives ``SparkSession.builder.remote``
    (with ``;token=``). On loopback it says ``localhost``: PySpark's client sends a token
    without TLS only there."""
    host = settings.operations.sql_host
    shown = "localhost" if host in ("127.0.0.1", "localhost") else host
    return f"sc://{shown}:{settings.operations.sql_port}"


def require_session_on(spark: SparkSession, uri: str) -> SparkSession:
    """``spark`` if it was started on the metastore at ``uri``. A session started before
    without it (catalog settings are static) would register in a catalog of its own that no
    other process sees: refused, naming why."""
    on = (spark.conf.get("spark.sql.catalogImplementation", "in-memory"),
          spark.sparkContext.getConf().get("spark.hadoop.hive.metastore.uris", ""))
    if on != ("hive", uri):
        raise SigflowError(f"this process's Spark session was started without the catalog {uri} "
                           f"(its catalog: {on[0]} {on[1]})".rstrip(),
                           "run `sigflow catalog register` in a process of its own")
    return spark


@dataclass(frozen=True)
class Registration:
    table: str
    location: str
    outcome: str  # "registered", "already registered", "moved from <old location>"

    def line(self, database: str) -> str:
        return f"catalog {database}.{self.table}: {self.outcome}"


def register(spark: SparkSession, database: str, tables: Mapping[str, str]) -> list[Registration]:
    """Register each ``name -> location`` as an external Delta table in ``database`` (made if
    missing). Idempotent; a name registered at another location is pointed at this one (the
    table's data is never touched: dropping an external table leaves its files)."""
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {_quoted(database)} COMMENT 'sigflow: the IoT signal pipeline tables'")
    existing = {t.name for t in spark.catalog.listTables(database)}
    done = []
    for name, location in tables.items():
        qualified = f"{_quoted(database)}.{_quoted(name)}"
        outcome = "registered"
        if name in existing:
            old = _location(spark, qualified)
            if _same_place(old, location):
                done.append(Registration(name, location, "already registered"))
                continue
            spark.sql(f"DROP TABLE {qualified}")
            outcome = f"moved from {old}"
        spark.catalog.createTable(qualified, path=location, source="delta")
        done.append(Registration(name, location, outcome))
    return done


def _quoted(name: str) -> str:
    """A name as a SQL identifier. Database and table names are checked where they enter
    (settings, the table declarations); this refuses anything else rather than escape it."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        raise SigflowError(f"{name!r} is not a catalog name sigflow registers (lower-case letters, digits, _)")
    return f"`{name}`"


def _location(spark: SparkSession, qualified: str) -> str:
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {qualified}").collect()
    return next((row.data_type for row in rows if row.col_name == "Location"), "")


def _same_place(registered: str, location: str) -> bool:
    def plain(uri: str) -> str:
        uri = uri.removeprefix("file:").rstrip("/")
        return str(Path(uri).resolve()) if "://" not in uri else uri
    return plain(registered) == plain(location)
