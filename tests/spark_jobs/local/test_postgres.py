"""The project's PostgreSQL (Airflow's metadata database in the production topology)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from spark_jobs.config import load_settings
from spark_jobs.local import postgres
from tests.helpers import system_tool

pytestmark = pytest.mark.slow  # PostgreSQL


@pytest.fixture
def data_dir():
    system_tool("pg_ctlcluster", "postgresql")  # Debian's server; initdb is found beside it
    path = Path(tempfile.mkdtemp(prefix="sigflow-pg-"))
    path.chmod(0o711)  # run as root, the server runs as the postgres user and must enter it
    yield path
    postgres.stop(load_settings(env={}, overrides={"data_dir": str(path)}))


def test_postgres_starts_on_loopback_with_the_airflow_database_and_restarts_with_its_data(data_dir):
    s = load_settings(env={}, overrides={"data_dir": str(data_dir)})
    info = postgres.start(s)
    assert postgres.start(s) == info  # idempotent
    postgres.query(s, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (42)")
    assert postgres.query(s, "SHOW listen_addresses").strip() == "127.0.0.1"
    assert info.url().startswith("postgresql+psycopg2://airflow:") and info.url().endswith(f"@127.0.0.1:{info.port}/airflow")

    assert postgres.stop(s) is True and postgres.status(s) is None
    assert postgres.start(s).port == info.port
    assert postgres.query(s, "SELECT n FROM kept").strip() == "42"


def test_a_wrong_password_is_refused(data_dir):
    s = load_settings(env={}, overrides={"data_dir": str(data_dir)})
    info = postgres.start(s)
    wrong = postgres.PostgresInfo(info.port, data_dir / "wrong")
    wrong.password_file.write_text("not-it\n")
    with pytest.raises(Exception, match="password authentication failed"):
        postgres._psql(wrong, "airflow", "SELECT 1")
    assert os.stat(info.password_file).st_mode & 0o077 == 0  # the password file is private
