"""Class data sharing for Spark drivers: the classes a driver loads (Spark's, Delta's, the
Kafka source's) parsed and verified once into an archive the JVM maps at start-up, instead
of every driver loading and verifying them again. A job's driver then takes about a third
less CPU and wall time on 2 cores (docs/streaming-facts.md).

The archive belongs to one JVM build, one pyspark install and what sigflow puts on the driver's
launch classpath (together, the driver's classpath): its name carries a key of them, so a
driver never maps an archive another Java, Spark or classpath wrote, and one with no archive
starts as before. Spark-free: it only names JVM options.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
from pathlib import Path

from spark_jobs.runtime.classpath import driver_class_path

# A mismatch (a JAR added to the driver's classpath) makes the JVM skip the archive and load
# classes as usual; it would say so in a warning line nobody can act on.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _java_build(java_home: Path) -> str:
    release = java_home / "release"  # the JDK's version and build, in every JDK image
    return release.read_text() if release.is_file() else str(java_home.resolve())


def archive_path(jars_path: Path, java_home: str) -> Path:
    """Where the drivers' archive for this Java and this pyspark lives: beside the JARs.
    Found without importing pyspark: DAG files name it at parse time."""
    pyspark = importlib.util.find_spec("pyspark")
    material = "\n".join((_java_build(Path(java_home)), str(pyspark.origin if pyspark else ""),
                          importlib.metadata.version("pyspark"), driver_class_path(jars_path)))
    key = hashlib.sha256(material.encode()).hexdigest()[:16]
    return jars_path.parent / "class-data" / f"spark-driver-{key}.jsa"


def _record(archive: Path) -> Path:
    return archive.with_name(archive.name + ".json")


def usable(archive: Path) -> bool:
    """Whether the archive is whole: the JVM maps it, and a truncated one would crash it
    (SIGBUS, measured), so its size must be the one recorded when it was written."""
    try:
        recorded = json.loads(_record(archive).read_text())["bytes"]
        return archive.stat().st_size == recorded
    except (OSError, ValueError, KeyError, TypeError):
        return False


def adopt(written: Path, archive: Path) -> None:
    """Put an archive the JVM has finished writing in place: its size recorded first, then
    one rename, so a driver sees no archive or a whole one."""
    _record(archive).write_text(json.dumps({"bytes": written.stat().st_size}))
    os.replace(written, archive)


def driver_options(jars_path: Path, enabled: bool, java_home: str | None) -> str:
    """The driver's JVM options that map the archive, or nothing when there is none."""
    if not enabled or not java_home:
        return ""
    archive = archive_path(jars_path, java_home)
    return f"-XX:SharedArchiveFile={archive} {QUIET}" if usable(archive) else ""


def dump_options(written: Path) -> str:
    """The JVM options that write the archive of every class the JVM loaded, as it exits."""
    return f"-XX:ArchiveClassesAtExit={written} {QUIET}"
