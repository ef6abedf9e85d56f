"""The catalog as production runs it: the metastore on PostgreSQL, its role and database made by
the script compose's postgres runs at initialisation (infra/postgres/metastore-db.sh), the
password read from a file into a private settings file and nowhere else."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from spark_jobs.contracts.tables import ALL_TABLES
from spark_jobs.local import postgres
from spark_jobs.ops.deploy import ensure_tables
from tests.helpers import REPO, sigflow, system_tool

pytestmark = pytest.mark.slow  # PostgreSQL, a metastore JVM, a Spark session


def test_the_metastore_on_postgresql_keeps_every_registration_and_its_password_private(settings):
    system_tool("pg_ctlcluster", "postgresql")
    data = Path(tempfile.mkdtemp(prefix="sigflow-catalog-"))
    data.chmod(0o711)  # PostgreSQL runs as its own user and must enter its directory
    s = settings.replace(data_dir=str(data))
    server = postgres.start(s)
    try:
        secret = data / "metastore-password"
        secret.write_text("metastore's 'password' with quotes\n")  # psql quotes it, not the script
        secret.chmod(0o600)
        made = subprocess.run(
            ["bash", str(REPO / "infra/postgres/metastore-db.sh")], capture_output=True, text=True, timeout=60,
            env={"PATH": f"{Path(postgres._binary('psql')).parent}:{os.environ['PATH']}", "PGHOST": "127.0.0.1",
                 "PGPORT": str(server.port), "PGPASSWORD": server.password_file.read_text().strip(),
                 "POSTGRES_USER": postgres.USER, "METASTORE_DB_PASSWORD_FILE": str(secret)})
        assert made.returncode == 0, made.stderr
        ensure_tables(s)  # every declared table, as deploy makes them
        env = {"SIGFLOW_CATALOG_PORT": "0", "SIGFLOW_CATALOG_DB_URL": f"jdbc:postgresql://127.0.0.1:{server.port}/metastore",
               "SIGFLOW_CATALOG_DB_USER": "metastore", "SIGFLOW_CATALOG_DB_PASSWORD_FILE": str(secret)}
        for step in (("catalog", "start"), ("catalog", "register")):
            done = sigflow(s, *step, extra_env=env, timeout=300)
            assert done.returncode == 0, (step, done.stdout[-2000:], done.stderr[-2000:])
        assert sorted(done.stdout.splitlines()[-len(ALL_TABLES):]) == sorted(
            f"catalog sigflow.{name}: registered" for name in ALL_TABLES)

        # the registrations are rows of the metastore's own database, as the metastore user sees them
        listed = subprocess.run(
            [postgres._binary("psql"), "-h", "127.0.0.1", "-p", str(server.port), "-U", "metastore", "-d", "metastore",
             "-At", "-c", 'SELECT "TBL_NAME" FROM "TBLS" JOIN "DBS" USING ("DB_ID") WHERE "NAME" = \'sigflow\''],
            capture_output=True, text=True, timeout=60, env={**os.environ, "PGPASSWORD": secret.read_text().strip()})
        assert listed.returncode == 0, listed.stderr
        assert sorted(listed.stdout.split()) == sorted(ALL_TABLES)

        # the password: in the metastore's settings file (its owner's only), on no command line, in no log
        conf = data / "catalog" / "conf"
        assert stat.S_IMODE(conf.stat().st_mode) == 0o700
        assert stat.S_IMODE((conf / "hive-site.xml").stat().st_mode) == 0o600
        password = secret.read_text().strip()
        pid = int(__import__("json").loads((data / "catalog" / "catalog.json").read_text())["pid"])
        assert password.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        for path in (data / "catalog").rglob("*"):
            if path.is_file() and path != conf / "hive-site.xml" and path.stat().st_size < 5_000_000:
                assert password not in path.read_text(errors="replace"), path
    finally:
        sigflow(s, "catalog", "stop")
        postgres.stop(s)
        shutil.rmtree(data, ignore_errors=True)
