"""The pinned Maven JARs: Spark's Kafka connector and delta-spark, and the Kafka broker.

``infra/jars/roots.txt`` names what sigflow asks for; ``sigflow jars pin`` lets Maven resolve
the transitive closure and writes ``infra/jars/lock.txt`` (every JAR and its SHA-256).
``sigflow jars fetch`` (run by ``make install``) downloads the locked JARs with ``mvn`` (which
reads the user's own Maven settings and mirrors), or, without ``mvn``, through Spark's own
``spark.jars.packages`` resolution, and verifies every file against its pin. No repository
host is named here: the resolvers use their configured defaults.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from spark_jobs.config import default_jars_dir as default_dir
from spark_jobs.errors import SigflowError

INFRA = Path(__file__).resolve().parents[2] / "infra" / "jars"
ROOTS = INFRA / "roots.txt"
LOCK = INFRA / "lock.txt"
SETS = ("spark", "s3", "kafka-broker", "kafka-tools")
# what make install fetches; s3 when object storage is used, kafka-tools for make bench
DEFAULT_SETS = ("spark", "kafka-broker")
# Sets whose JARs join pyspark's own classpath: anything pyspark already ships is left out.
SPARK_CLASSPATH_SETS = ("spark", "s3")
# Sets that run on another set's classpath: what that set holds is left out of them.
RUNS_ON = {"kafka-tools": "kafka-broker"}
FIX = "run `sigflow jars fetch` (or `make install`)"


# delta-spark's session settings: static, so given when a session starts (get_spark, or
# spark-submit's --conf); also in infra/spark/spark-defaults.conf.
DELTA_SESSION_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


# sigflow's own Delta log store for s3a:// (infra/logstore/): built from source with mvn when
# the s3 set is fetched, and put beside that set. Why it exists: the class's comment.
LOGSTORE_SOURCE = INFRA.parent / "logstore"
LOGSTORE_CLASS = "io.sigflow.delta.ConditionalPutS3LogStore"
LOGSTORE_JAR = "sigflow-delta-logstore-0.1.0.jar"
# The build is reproducible (infra/logstore/pom.xml), so its bytes are pinned like a fetched JAR.
LOGSTORE_PIN = LOGSTORE_SOURCE / "jar.sha256"


def logstore_jar(dest: Path) -> Path:
    return dest / "s3" / LOGSTORE_JAR


def logstore_sha256() -> str:
    return LOGSTORE_PIN.read_text().split()[0]


def verified_logstore(dest: Path) -> Path:
    """The built log store, checked against its pin; raises saying how to rebuild it."""
    path = logstore_jar(dest)
    actual = sha256(path)
    if actual != logstore_sha256():
        raise JarError(
            f"{path} is not the build pinned in {LOGSTORE_PIN.name} (SHA-256 {actual[:16]}...)",
            "delete it and run `sigflow jars fetch s3` to build it again; if infra/logstore changed, "
            f"pin the new build's SHA-256 ({actual}) in infra/logstore/jar.sha256")
    return path


def build_logstore(dest: Path) -> Path:
    """Compile infra/logstore with mvn (a copy, so the source tree stays clean)."""
    if not shutil.which("mvn"):
        raise JarError("building the S3 log store needs mvn on PATH", "install Maven (apt-get install maven)")
    with tempfile.TemporaryDirectory() as work:
        shutil.copytree(LOGSTORE_SOURCE, work, dirs_exist_ok=True, ignore=shutil.ignore_patterns("target"))
        result = subprocess.run(["mvn", "-B", "-q", "-f", str(Path(work, "pom.xml")), "package"],
                                capture_output=True, text=True)
        if result.returncode != 0:
            detail = next((line for line in result.stdout.splitlines() if "[ERROR]" in line), result.stderr.strip())
            raise JarError(f"mvn could not build infra/logstore: {detail[:300]}", "check your Maven settings")
        logstore_jar(dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(work, "target", LOGSTORE_JAR), logstore_jar(dest))
    return verified_logstore(dest)


def object_store_conf(dest: Path, environ) -> dict[str, str]:
    """Spark's settings for s3a:// tables: sigflow's log store when the s3 set is installed, and
    S3A pointed at the environment's endpoint. Embedded sessions and spark-submit get the same."""
    log_store = {"spark.delta.logStore.s3a.impl": LOGSTORE_CLASS} if logstore_jar(dest).exists() else {}
    return {**log_store, **s3a_conf(environ)}


def require_s3_log_store(delta_root: str, configured_log_store: str | None) -> None:
    """Refuse s3a:// tables without sigflow's log store. Without it delta-spark falls back to
    its default S3 log store, which excludes concurrent commits within one driver only:
    several jobs writing a shared table lose commits (docs/streaming-facts.md)."""
    if delta_root.startswith("s3a://") and configured_log_store != LOGSTORE_CLASS:
        raise JarError(
            f"the tables are on S3 ({delta_root}) but Spark's session has no conditional-put log "
            f"store (spark.delta.logStore.s3a.impl is {configured_log_store or 'unset'}): several "
            "jobs committing to one table would lose commits",
            "run `sigflow jars fetch s3` and start the job again (spark-submit: ship the s3 JARs "
            f"and set spark.delta.logStore.s3a.impl={LOGSTORE_CLASS})",
        )


def s3a_conf(environ) -> dict[str, str]:
    """S3A pointed where the AWS SDKs and delta-rs look (AWS_ENDPOINT_URL, AWS_REGION), with the
    credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY: one set of variables for Spark,
    delta-rs and pyarrow. Nothing when no endpoint is set (AWS's own S3)."""
    endpoint = environ.get("AWS_ENDPOINT_URL", "")
    if not endpoint:
        return {}
    return {
        "spark.hadoop.fs.s3a.endpoint": endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": environ.get("AWS_REGION", "us-east-1"),
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": str(endpoint.startswith("https")).lower(),
        "spark.hadoop.fs.s3a.aws.credentials.provider":
            "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider",
    }


class JarError(SigflowError):
    pass


@dataclass(frozen=True)
class Jar:
    set: str
    group: str
    artifact: str
    version: str
    sha256: str = ""

    @property
    def coordinate(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"


def _read(path: Path) -> list[Jar]:
    jars = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        coordinate = parts[1].split(":") if len(parts) >= 2 else []
        if len(coordinate) != 3 or parts[0] not in SETS:
            raise JarError(f"{path}:{number}: expected '<set> group:artifact:version [sha256]'")
        jars.append(Jar(parts[0], *coordinate, sha256=parts[2] if len(parts) > 2 else ""))
    return jars


def roots() -> list[Jar]:
    return _read(ROOTS)


def locked(sets: tuple[str, ...] | list[str] = SETS) -> list[Jar]:
    return [jar for jar in _read(LOCK) if jar.set in sets]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def path_of(jar: Jar, dest: Path) -> Path:
    """Each set in its own folder: two sets may hold one artifact at different versions."""
    return dest / jar.set / jar.file_name


def problems(jars: list[Jar], dest: Path) -> dict[Jar, str]:
    """The JARs that are missing or differ from their pin, with what is wrong."""
    found = {}
    for jar in jars:
        path = path_of(jar, dest)
        if not path.is_file():
            found[jar] = "missing"
        elif sha256(path) != jar.sha256:
            found[jar] = "corrupt (SHA-256 differs from infra/jars/lock.txt)"
    return found


def verified_paths(sets: tuple[str, ...] | list[str], dest: Path | None = None) -> list[Path]:
    """The locked JARs of ``sets``, each checked; raises naming the first bad one and the fix."""
    dest = dest or default_dir()
    jars = locked(sets)
    bad = problems(jars, dest)
    if bad:
        jar, what = next(iter(bad.items()))
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise JarError(f"JAR {jar.coordinate} is {what} in {dest}{more}", FIX)
    return [path_of(jar, dest) for jar in jars]


@dataclass(frozen=True)
class FetchResult:
    directory: Path
    fetched: list[Jar]
    present: int
    via: str  # "mvn", "spark" or "" (nothing to fetch)


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
    if "s3" in sets and not bad and not logstore_jar(dest).exists():
        build_logstore(dest)
    if bad:
        jar, what = next(iter(bad.items()))
        raise JarError(
            f"JAR {jar.coordinate} is {what} after fetching it with {via}",
            "check your Maven settings (mirror, proxy); if the served file changed, "
            "re-pin deliberately with `sigflow jars pin`",
        )
    return FetchResult(dest, wanted, len(jars) - len(wanted), via)


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


def submit_options(dest: Path | None = None) -> tuple[str, dict[str, str]]:
    """``--jars`` and the Delta ``--conf`` for a spark-submit of a sigflow job, from the
    installed JARs (checked for presence only: cheap enough for a DAG file; the submitted
    driver hashes each before it starts a query, ``verify_classpath``); nothing when none is
    installed, and the submitted job then stops saying to fetch them."""
    dest = dest or Path(os.environ.get("SIGFLOW_JARS_DIR") or default_dir())
    present = [path_of(j, dest) for j in locked(SPARK_CLASSPATH_SETS) if path_of(j, dest).exists()]
    if not any(p.parent.name == "spark" for p in present):
        return "", {}
    present += [logstore_jar(dest)] if logstore_jar(dest).exists() else []
    return ",".join(map(str, present)), {**DELTA_SESSION_CONF, **object_store_conf(dest, os.environ)}


def spark_jar_paths(dest: Path | None = None) -> list[Path]:
    """The verified Spark-classpath JARs; raises naming the first missing or corrupt one.
    The s3 set joins when it was fetched; each JAR is hashed once (the AWS SDK is large)."""
    dest = dest or default_dir()
    installed = ["spark"] + [name for name in SPARK_CLASSPATH_SETS if name != "spark"
                             and any(path_of(j, dest).exists() for j in locked((name,)))]
    built = [verified_logstore(dest)] if "s3" in installed and logstore_jar(dest).exists() else []
    return verified_paths(installed, dest) + built


def verify_classpath(entries: list[str]) -> None:
    """Check every JAR a driver was handed (spark-submit's ``--jars``, ``spark.jars``) against
    its pin: each must be a JAR of infra/jars/lock.txt with its SHA-256, or the pinned log
    store. Raises naming the first that is not."""
    pinned = {jar.file_name: jar.sha256 for jar in locked(SETS)} | {LOGSTORE_JAR: logstore_sha256()}
    for entry in filter(None, (e.strip() for e in entries)):
        path = Path(entry.removeprefix("file:"))
        if path.name not in pinned:
            raise JarError(f"the driver was given {path}, which is not a pinned JAR",
                           "submit only the JARs of infra/jars/lock.txt (`sigflow jars fetch`)")
        if not path.is_file() or sha256(path) != pinned[path.name]:
            raise JarError(f"JAR {path} is missing or differs from its pin", FIX)


