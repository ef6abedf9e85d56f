"""Installing the pinned Maven JARs: Spark's Kafka connector and delta-spark, and the Kafka broker.

``infra/jars/roots.txt`` names what sigflow asks for; ``sigflow jars pin`` lets Maven resolve
the transitive closure and writes ``infra/jars/lock.txt`` (every JAR and its SHA-256).
``sigflow jars fetch`` (run by ``make install``) downloads the locked JARs with ``mvn`` (which
reads the user's own Maven settings and mirrors), or, without ``mvn``, through Spark's own
``spark.jars.packages`` resolution, and verifies every file against its pin. No repository
host is named here: the resolvers use their configured defaults. How a session uses them:
``spark_jobs.runtime.classpath``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from spark_jobs.runtime.classpath import (
    DEFAULT_SETS,  # noqa: F401 - what `sigflow jars fetch` takes without a set
    INFRA,
    LOCK,
    LOGSTORE,
    SETS,
    SOURCE_JARS,
    SPARK_CLASSPATH_SETS,
    Jar,
    JarError,
    SourceJar,
    default_dir,
    locked,
    path_of,
    problems,
    read_jar_list,
    sha256,
)

ROOTS = INFRA / "roots.txt"
# Sets that run on another set's classpath: what that set holds is left out of them.
RUNS_ON = {"kafka-tools": "kafka-broker"}


def roots() -> list[Jar]:
    return read_jar_list(ROOTS)


def build(jar: SourceJar, dest: Path) -> Path:
    """Compile one of sigflow's own JARs with mvn (from a copy, so the source tree stays clean)."""
    if not shutil.which("mvn"):
        raise JarError(f"building {jar.what} needs mvn on PATH", "install Maven (apt-get install maven)")
    with tempfile.TemporaryDirectory() as work:
        shutil.copytree(jar.source, work, dirs_exist_ok=True, ignore=shutil.ignore_patterns("target"))
        result = subprocess.run(["mvn", "-B", "-q", "-f", str(Path(work, "pom.xml")), "package"],
                                capture_output=True, text=True)
        if result.returncode != 0:
            detail = next((line for line in result.stdout.splitlines() if "[ERROR]" in line), result.stderr.strip())
            raise JarError(f"mvn could not build infra/{jar.folder}: {detail[:300]}", "check your Maven settings")
        jar.path(dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(work, "target", jar.file_name), jar.path(dest))
    return jar.verified(dest)


@dataclass(frozen=True)
class FetchResult:
    directory: Path
    fetched: list[Jar]
    present: int
    via: str  # "mvn", "spark" or "" (nothing to fetch)
    built: list[SourceJar]
    unbuilt: list[SourceJar]  # optional ones, without mvn


def fetch(sets: tuple[str, ...] | list[str], dest: Path | None = None) -> FetchResult:
    """Download the locked JARs of ``sets`` that are missing or corrupt, then verify all."""
    dest = dest or default_dir()
    jars = locked(sets)
    wanted = list(problems(jars, dest))
    via = ("mvn" if shutil.which("mvn") else "spark") if wanted else ""
    for name in sets:
        members = [jar for jar in wanted if jar.set == name]
        if not members:
            continue
        folder = dest / name
        folder.mkdir(parents=True, exist_ok=True)
        for jar in members:
            path_of(jar, dest).unlink(missing_ok=True)
        (_fetch_with_mvn if via == "mvn" else _fetch_with_spark)(members, folder)
    bad = problems(jars, dest)
    # a build from other source (infra/ changed since) is built again
    missing = [jar for jar in SOURCE_JARS
               if jar.set in sets and not (jar.path(dest).exists() and sha256(jar.path(dest)) == jar.sha256())]
    # the log store is needed (S3 tables refuse to run without it); the parser only saves time
    unbuilt = [] if shutil.which("mvn") else [jar for jar in missing if jar is not LOGSTORE]
    for jar in unbuilt:  # a build of other source would stop every session at its pin check
        jar.path(dest).unlink(missing_ok=True)
    built = [jar for jar in missing if jar not in unbuilt]
    if not bad:
        for jar in built:
            build(jar, dest)
    if bad:
        jar, what = next(iter(bad.items()))
        raise JarError(
            f"JAR {jar.coordinate} is {what} after fetching it with {via}",
            "check your Maven settings (mirror, proxy); if the served file changed, "
            "re-pin deliberately with `sigflow jars pin`",
        )
    return FetchResult(dest, wanted, len(jars) - len(wanted), via, built, unbuilt)


def _pom(coordinates: list[Jar], transitive: bool) -> str:
    exclude = "" if transitive else (
        "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>"
    )
    deps = "".join(
        f"<dependency><groupId>{j.group}</groupId><artifactId>{j.artifact}</artifactId>"
        f"<version>{j.version}</version>{exclude}</dependency>"
        for j in coordinates
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>sigflow</groupId><artifactId>jars</artifactId><version>0</version>"
        f"<dependencies>{deps}</dependencies></project>"
    )


def _mvn_copy(coordinates: list[Jar], out: Path, transitive: bool, layout: bool) -> None:
    with tempfile.TemporaryDirectory() as work:
        Path(work, "pom.xml").write_text(_pom(coordinates, transitive))
        command = [
            "mvn", "-B", "-q", "-f", str(Path(work, "pom.xml")),
            "dependency:copy-dependencies", f"-DoutputDirectory={out}", "-DincludeScope=runtime",
        ]
        if layout:
            command.append("-Dmdep.useRepositoryLayout=true")
        result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        detail = next((l for l in result.stdout.splitlines() if "[ERROR]" in l), result.stderr.strip())
        raise JarError(f"mvn could not fetch the JARs: {detail[:300]}", "check your Maven settings and network")


def _fetch_with_mvn(jars: list[Jar], dest: Path) -> None:
    _mvn_copy(jars, dest, transitive=False, layout=False)


def _fetch_with_spark(jars: list[Jar], dest: Path) -> None:
    """Without mvn: Spark's Ivy resolution (``spark.jars.packages``) in a throwaway JVM."""
    with tempfile.TemporaryDirectory() as ivy:
        script = (
            "from pyspark.sql import SparkSession; import sys; "
            "SparkSession.builder.master('local[1]').config('spark.jars.packages', sys.argv[1])"
            ".config('spark.jars.ivy', sys.argv[2]).getOrCreate().stop()"
        )
        result = subprocess.run(
            [sys.executable, "-c", script, ",".join(j.coordinate for j in jars), ivy],
            capture_output=True, text=True,
        )
        if result.returncode != 0:
            raise JarError(
                "Spark could not resolve the JARs (spark.jars.packages): "
                + (result.stderr.strip().splitlines() or ["no output"])[-1][:300],
                "install Maven (`apt-get install maven`) and run `sigflow jars fetch`",
            )
        for jar in jars:
            source = Path(ivy, "jars", f"{jar.group}_{jar.artifact}-{jar.version}.jar")
            if source.exists():
                shutil.copyfile(source, dest / jar.file_name)


_LAYOUT = re.compile(r"^(?P<group>.+)/(?P<artifact>[^/]+)/(?P<version>[^/]+)/(?P=artifact)-(?P=version)\.jar$")


def resolve(root_jars: list[Jar], exclude_artifacts: set[str]) -> list[Jar]:
    """The transitive closure Maven resolves for ``root_jars`` (one set), with checksums."""
    with tempfile.TemporaryDirectory() as out:
        _mvn_copy(root_jars, Path(out), transitive=True, layout=True)
        resolved = []
        for path in sorted(Path(out).rglob("*.jar")):
            match = _LAYOUT.match(path.relative_to(out).as_posix())
            if not match or match["artifact"] in exclude_artifacts:
                continue
            resolved.append(Jar(
                root_jars[0].set, match["group"].replace("/", "."), match["artifact"],
                match["version"], sha256(path),
            ))
    return resolved


def pyspark_artifacts() -> set[str]:
    """Artifact ids of the JARs pyspark ships (its own classpath wins for those)."""
    import pyspark

    names = (p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    return {re.sub(r"-\d[^-]*(-[A-Za-z0-9.]+)?\.jar$", "", name) for name in names}


def pin() -> list[Jar]:
    """Resolve every set of roots.txt with mvn and rewrite lock.txt."""
    if not shutil.which("mvn"):
        raise JarError("pinning needs mvn on PATH", "install Maven (apt-get install maven)")
    every = roots()
    on_spark = pyspark_artifacts()
    lock: list[Jar] = []
    for name in SETS:
        members = [j for j in every if j.set == name]
        if not members:
            continue
        if name in SPARK_CLASSPATH_SETS:
            exclude = on_spark | {j.artifact for j in lock if j.set in SPARK_CLASSPATH_SETS}
        else:
            exclude = {j.artifact for j in lock if j.set == RUNS_ON.get(name)}
        lock += resolve(members, exclude)
    lines = [
        "# Generated by `sigflow jars pin` from roots.txt: every JAR sigflow fetches, with its",
        "# SHA-256. `sigflow jars fetch` (make install) and the production image verify each one.",
    ]
    width = max(len(j.coordinate) for j in lock)
    lines += [f"{j.set:<13} {j.coordinate:<{width}} {j.sha256}" for j in lock]
    LOCK.write_text("\n".join(lines) + "\n")
    return lock
