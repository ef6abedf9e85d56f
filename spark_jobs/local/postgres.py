"""PostgreSQL for Airflow's metadata, as production runs it (compose's ``postgres``
service): Debian's PostgreSQL server (`make system-deps`), started by the project on a
loopback port with its own data directory under ``<data_dir>/postgres/``, and stopped by it.

PostgreSQL refuses to run as root; started by root (CI containers), the server runs as
the ``postgres`` system user the Debian package creates, and owns its directory.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from spark_jobs.config import Settings
from spark_jobs.errors import SigflowError
from spark_jobs.local.broker import free_port
from spark_jobs.runtime.private_files import private_dir, write_private

DATABASE = "airflow"
USER = "airflow"


@dataclass(frozen=True)
class PostgresInfo:
    port: int
    password_file: Path

    def url(self, driver: str = "postgresql+psycopg2") -> str:
        """The SQLAlchemy URL of the Airflow database (the password read from its file)."""
        password = self.password_file.read_text().strip()
        return f"{driver}://{USER}:{password}@127.0.0.1:{self.port}/{DATABASE}"


def postgres_dir(settings: Settings) -> Path:
    return Path(settings.data_dir) / "postgres"


def _binary(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))[-1:]), None)
    if not found:
        raise SigflowError(f"PostgreSQL's {name} was not found",
                           "install the server: `make system-deps` (Debian package postgresql)")
    return found


def _as_server_user() -> dict:
    """subprocess arguments that drop root to the postgres user; nothing for anyone else."""
    if os.geteuid() != 0:
        return {}
    account = pwd.getpwnam("postgres")
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


def _owned_by_server(path: Path) -> None:
    if os.geteuid() != 0:
        return
    account = pwd.getpwnam("postgres")
    for parent in path.resolve().parents:  # the server user must reach its directory
        if not parent.stat().st_mode & 0o001:
            raise SigflowError(f"the postgres user cannot reach {path}: {parent} is closed to other users",
                               f"`chmod o+x {parent}`, or set SIGFLOW_DATA_DIR under a directory others can enter")
    for part in [path, *path.rglob("*")]:
        os.chown(part, account.pw_uid, account.pw_gid)


def _run(*command: str) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, **_as_server_user())
    if result.returncode != 0:
        raise SigflowError(f"{Path(command[0]).name} failed: {(result.stderr or result.stdout).strip()[-400:]}")
    return result


def start(settings: Settings) -> PostgresInfo:
    """Initialise the cluster once (an ``airflow`` role and database with a generated
    password), then start it on 127.0.0.1 (idempotent: a running server is returned)."""
    home = postgres_dir(settings)
    data, password_file = home / "data", home / "password"
    port_file = home / "port"
    if not (data / "PG_VERSION").exists():
        private_dir(home)
        write_private(password_file, secrets.token_urlsafe(24) + "\n")
        port_file.write_text(str(settings.local.postgres_port or free_port()))
        initdb_password = home / "initdb.pw"  # initdb reads it as the server's user
        write_private(initdb_password, password_file.read_text())
        try:
            _owned_by_server(home)
            _run(_binary("initdb"), "-D", str(data), "-U", USER, "--auth=scram-sha-256",
                 f"--pwfile={initdb_password}", "--encoding=UTF8", "--locale=C")
        finally:
            initdb_password.unlink(missing_ok=True)
    info = PostgresInfo(int(port_file.read_text()), password_file)
    if status(settings) is None:
        _owned_by_server(home)
        _run(_binary("pg_ctl"), "-D", str(data), "-l", str(home / "postgres.log"), "-w", "-t", "60",
             "-o", f"-c listen_addresses=127.0.0.1 -p {info.port} -k {home}", "start")
    if DATABASE not in _psql(info, "postgres", "SELECT datname FROM pg_database"):
        _psql(info, "postgres", f"CREATE DATABASE {DATABASE}")
    return info


def _psql(info: PostgresInfo, database: str, sql: str) -> str:
    env = {**os.environ, "PGPASSWORD": info.password_file.read_text().strip()}
    result = subprocess.run(
        [_binary("psql"), "-h", "127.0.0.1", "-p", str(info.port), "-U", USER, "-d", database,
         "-At", "-c", sql], capture_output=True, text=True, timeout=60, env=env,
    )
    if result.returncode != 0:
        raise SigflowError(f"PostgreSQL on 127.0.0.1:{info.port}: {result.stderr.strip()[-300:]}")
    return result.stdout


def query(settings: Settings, sql: str) -> str:
    """A query against the Airflow database, for checks and tests."""
    info = status(settings)
    if info is None:
        raise SigflowError("the project's PostgreSQL is not running", "start it with `sigflow postgres start`")
    return _psql(info, DATABASE, sql)


def status(settings: Settings) -> PostgresInfo | None:
    home = postgres_dir(settings)
    if not (home / "data" / "postmaster.pid").exists():
        return None
    result = subprocess.run([_binary("pg_ctl"), "-D", str(home / "data"), "status"],
                            capture_output=True, text=True, timeout=30, **_as_server_user())
    if result.returncode != 0:
        return None
    return PostgresInfo(int((home / "port").read_text()), home / "password")


def stop(settings: Settings) -> bool:
    if status(settings) is None:
        return False
    _run(_binary("pg_ctl"), "-D", str(postgres_dir(settings) / "data"), "-m", "fast", "-w", "stop")
    return True
