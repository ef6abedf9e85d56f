"""The catalog's metastore: Apache Hive's (pyspark's own Hive 2.3.10, the version Spark's Hive
client speaks) served by sigflow's server (infra/metastore) on the address it is given.

On this machine (``start``/``stop``) it runs on 127.0.0.1 in a JVM of its own, like the broker:
started once, kept across CLI runs, stopped by its recorded pid (``<data_dir>/catalog/catalog.json``),
its own database in Derby under ``<data_dir>/catalog/`` unless ``catalog_db_url`` names a
PostgreSQL one. A restart keeps every registration and its port. In a container (``serve``, the
production stack's ``metastore``) the JVM takes the command's place, on PostgreSQL.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from xml.sax.saxutils import escape

import pyspark

from spark_jobs.config import Settings
from spark_jobs.errors import ConfigError, SigflowError
from spark_jobs.local import recorded
from spark_jobs.local.broker import free_port, java_binary, port_open
from spark_jobs.runtime import classpath
from spark_jobs.runtime.catalog import (
    MAIN_CLASS,
    CatalogInfo,
    catalog_dir,
    embedded,
    state_file,
)
from spark_jobs.runtime.private_files import private_dir, write_private
from spark_jobs.runtime.processes import start_time

HEAP = "512m"
# Hive's persistent classes (package.jdo of hive-metastore 2.3.10)
MODEL = ("MDatabase MFieldSchema MType MTable MConstraint MSerDeInfo MOrder MColumnDescriptor MStringList "
         "MStorageDescriptor MPartition MIndex MRole MRoleMap MGlobalPrivilege MDBPrivilege MTablePrivilege "
         "MPartitionPrivilege MTableColumnPrivilege MPartitionColumnPrivilege MPartitionEvent MMasterKey "
         "MDelegationToken MTableColumnStatistics MPartitionColumnStatistics MVersionTable MResourceUri MFunction "
         "MNotificationLog MNotificationNextId").split()


def _port(settings: Settings) -> int:
    """Chosen on the first start and kept in port (0 in the setting: a free one)."""
    path = catalog_dir(settings) / "port"
    if path.exists() and (not settings.local.catalog_port or settings.local.catalog_port == int(path.read_text())):
        return int(path.read_text())
    port = settings.local.catalog_port or free_port()
    path.write_text(str(port))
    return port


def _database(settings: Settings, home: Path) -> dict[str, str]:
    """Where the metastore keeps its own database: PostgreSQL when configured, else Derby."""
    operations = settings.operations
    if not operations.catalog_db_url:
        return {"javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={home / 'metastore_db'};create=true",
                "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver"}
    try:
        password = Path(operations.catalog_db_password_file).read_text().strip()
    except OSError as exc:
        raise ConfigError(f"catalog_db_password_file {operations.catalog_db_password_file!r} cannot be read "
                          f"({exc.strerror})", "point it at the file holding the metastore database's password") from None
    return {"javax.jdo.option.ConnectionURL": operations.catalog_db_url,
            "javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
            "javax.jdo.option.ConnectionUserName": operations.catalog_db_user,
            "javax.jdo.option.ConnectionPassword": password}


def hive_site(settings: Settings, home: Path) -> str:
    """The metastore's settings: its database, the warehouse under ``home``, and its schema made
    whole when it starts (DataNucleus, every persistent class of Hive's at once). Made class by
    class on first use instead, a table's first registration on PostgreSQL waits forever: its
    request holds TBLS locked while DataNucleus, on a connection of its own, adds a foreign key
    to TBLS for the privileges table (measured)."""
    home = home.resolve()
    values = {
        **_database(settings, home),
        "datanucleus.schema.autoCreateAll": "true",
        "datanucleus.autoStartMechanism": "Classes",
        "datanucleus.autoStartClassNames": ",".join(f"org.apache.hadoop.hive.metastore.model.{name}" for name in MODEL),
        "hive.metastore.schema.verification": "false",
        "hive.metastore.warehouse.dir": (home / "warehouse").as_uri(),
    }
    properties = "".join(f"<property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
                         for k, v in values.items())
    return f'<?xml version="1.0"?>\n<configuration>\n{properties}</configuration>\n'


def command(settings: Settings, host: str, port: int, conf_dir: Path) -> list[str]:
    """The metastore's JVM: its settings folder first, sigflow's server and the PostgreSQL
    driver, then pyspark's JARs (Hive, Thrift, DataNucleus, Derby, Hadoop)."""
    ours = [*classpath.verified_paths(("metastore",), settings.jars_path),
            classpath.METASTORE.verified(settings.jars_path)]
    jars = Path(pyspark.__file__).parent / "jars"
    return [
        java_binary(), f"-Xmx{HEAP}", "-Djava.awt.headless=true",
        f"-Dderby.stream.error.file={catalog_dir(settings).resolve() / 'derby.log'}",
        "-cp", ":".join([str(conf_dir), *map(str, ours), f"{jars}/*"]), MAIN_CLASS, host, str(port),
    ]


def _write_conf(settings: Settings, home: Path) -> Path:
    """The metastore's settings folder, its owner's only: the file may hold a password."""
    conf_dir = private_dir(home / "conf")
    write_private(conf_dir / "hive-site.xml", hive_site(settings, home))
    return conf_dir


def serve(settings: Settings, host: str, port: int) -> None:
    """Run the metastore in this process's place (a container's command): signals reach the
    JVM itself, which stops its server on SIGTERM."""
    home = catalog_dir(settings)
    home.mkdir(parents=True, exist_ok=True)
    argv = command(settings, host, port, _write_conf(settings, home))
    os.chdir(home)  # Derby and Hive write beside their database, not in the caller's folder
    os.execv(argv[0], argv)


def start(settings: Settings, timeout_s: float = 120.0) -> CatalogInfo:
    """Start the embedded metastore (idempotent: a live recorded one is returned as is)."""
    running = embedded(settings)
    if running:
        return running
    home = catalog_dir(settings)
    home.mkdir(parents=True, exist_ok=True)
    port = _port(settings)
    if port_open("127.0.0.1", port):
        raise SigflowError(f"port {port} on 127.0.0.1 is already taken by another process",
                           f"set SIGFLOW_CATALOG_PORT to a free port, or 0 to pick one (and remove {home / 'port'})")
    conf_dir = _write_conf(settings, home)
    log_file = home / "metastore.log"
    proc = recorded.launch(command(settings, "127.0.0.1", port, conf_dir), log_file,
                           lambda: port_open("127.0.0.1", port), timeout_s,
                           f"the catalog's metastore on 127.0.0.1:{port}", cwd=home)
    info = CatalogInfo(pid=proc.pid, uri=f"thrift://127.0.0.1:{port}", log_file=str(log_file),
                       process_started=start_time(proc.pid))
    state_file(settings).write_text(json.dumps(info.__dict__))
    return info


def stop(settings: Settings, timeout_s: float = 30.0) -> bool:
    """Stop the recorded metastore. False when none was running."""
    return recorded.stop(embedded(settings), state_file(settings), timeout_s)
