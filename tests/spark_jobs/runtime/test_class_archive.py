"""The Spark drivers' class archive (runtime/class_archive.py): a driver maps the one make
install built, and never one that is not whole."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from spark_jobs.config import default_jars_dir
from spark_jobs.local import class_archive_build
from spark_jobs.runtime import class_archive
from spark_jobs.runtime.spark import ensure_java
from tests.helpers import REPO, cli_env

DRIVER = """
import sys
from spark_jobs.config import load_settings
from spark_jobs.runtime.spark import get_spark
spark = get_spark(load_settings(overrides={"spark_master": "local[1]"}), "archive-probe")
spark.range(3).write.format("delta").save(sys.argv[1])
"""


@pytest.mark.slow
def test_a_driver_loads_sparks_and_deltas_classes_from_the_archive_make_install_built(tmp_path):
    ensure_java()
    archive = class_archive.archive_path(default_jars_dir(), os.environ["JAVA_HOME"])
    log = class_archive_build.build_log(archive)
    assert class_archive.usable(archive), f"no class archive at {archive}: make install builds it" + (
        f"; its last build printed:\n{log.read_text()[-3000:]}" if log.is_file() else "")
    loaded = tmp_path / "class-load.log"
    env = cli_env(None, {"SIGFLOW_JVM_OPTIONS": f"-Xlog:class+load=info:file={loaded}"})
    ran = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path / "table")], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]

    def from_archive(prefix: str) -> tuple[int, int]:
        # classes from a class file; lambdas are made as the JVM runs, archive or not
        lines = [line for line in loaded.read_text().splitlines() if f" {prefix}" in line and "$$Lambda" not in line]
        return sum("shared objects file (top)" in line for line in lines), len(lines)

    # Spark's own classes (the JVM's classpath) and Delta's (spark.jars, a class loader of
    # Spark's); this driver creates a table with Spark, which the archive's pipeline does not
    for prefix in ("org.apache.spark.sql.execution.", "org.apache.spark.sql.delta."):
        mapped, all_loaded = from_archive(prefix)
        assert all_loaded > 300 and mapped > 0.7 * all_loaded, (prefix, mapped, all_loaded)


def test_an_archive_whose_size_is_not_the_one_recorded_is_never_mapped(tmp_path):
    """A truncated archive crashes the JVM that maps it (SIGBUS, measured): only an archive
    of the size recorded as it was put in place is named to the driver."""
    jars, java_home = tmp_path / "jars", "/opt/some-jdk"
    archive = class_archive.archive_path(jars, java_home)
    archive.parent.mkdir(parents=True)
    written = archive.with_name("dump.partial")
    written.write_bytes(b"\0" * 4096)
    assert class_archive.driver_options(jars, True, java_home) == ""  # none yet
    class_archive.adopt(written, archive)
    assert class_archive.driver_options(jars, True, java_home).startswith(f"-XX:SharedArchiveFile={archive} ")
    assert class_archive.driver_options(jars, False, java_home) == ""  # class_data_sharing off
    with archive.open("r+b") as cut:
        cut.truncate(2048)
    assert class_archive.driver_options(jars, True, java_home) == ""
    assert class_archive.archive_path(jars, "/opt/another-jdk") != archive  # another Java: another archive
