"""The pinned JARs a Spark session runs with: Spark's Kafka connector, delta-spark, the S3 set and
sigflow's S3 log store, each checked against ``infra/jars/lock.txt`` before a JVM is handed it.
Fetching and pinning them is install tooling (``spark_jobs.install.jars``)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from spark_jobs.config import ObjectStore
from spark_jobs.config import default_jars_dir as default_dir
from spark_jobs.errors import SigflowError

INFRA = Path(__file__).resolve().parents[2] / "infra" / "jars"
LOCK = INFRA / "lock.txt"
SETS = ("spark", "s3", "openlineage", "kafka-broker", "kafka-tools", "metastore")
# Sets whose JARs join pyspark's own classpath: anything pyspark already ships is left out.
SPARK_CLASSPATH_SETS = ("spark", "s3", "openlineage")
# What `make install` fetches; the other sets are fetched on demand, by name.
DEFAULT_SETS = ("spark", "kafka-broker", "metastore")
# The optional Spark-classpath sets a session takes whenever they were fetched (openlineage
# joins only when its listener is on).
JOINS_WHEN_FETCHED = ("s3",)
FIX = "run `sigflow jars fetch` (or `make install`)"


# delta-spark's session settings: static, so given when a session starts (get_spark, or
# spark-submit's --conf); also in infra/spark/spark-defaults.conf.
DELTA_SESSION_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


@dataclass(frozen=True)
class SourceJar:
    """A JAR of sigflow's own, built from ``infra/<folder>/`` with mvn when its set is fetched and
    put beside that set. Its build is reproducible (the pom fixes the entry times), so its
    bytes are pinned in the folder's jar.sha256 like a fetched JAR's."""

    folder: str
    file_name: str
    set: str
    what: str

    @property
    def source(self) -> Path:
        return INFRA.parent / self.folder

    def path(self, dest: Path) -> Path:
        return dest / self.set / self.file_name

    def sha256(self) -> str:
        return (self.source / "jar.sha256").read_text().split()[0]

    def verified(self, dest: Path) -> Path:
        """The built JAR, checked against its pin; raises saying how to rebuild it."""
        path = self.path(dest)
        actual = sha256(path)
        if actual != self.sha256():
            raise JarError(
                f"{path} is not the build pinned in infra/{self.folder}/jar.sha256 (SHA-256 {actual[:16]}...)",
                f"delete it and run `sigflow jars fetch {self.set}` to build it again; if infra/{self.folder} "
                f"changed, pin the new build's SHA-256 ({actual}) in infra/{self.folder}/jar.sha256")
        return path


# sigflow's Delta log store for s3a:// (why it exists: the class's comment).
LOGSTORE = SourceJar("logstore", "sigflow-delta-logstore-0.1.0.jar", "s3", "the S3 log store")
LOGSTORE_CLASS = "io.sigflow.delta.ConditionalPutS3LogStore"
# The contracts' flat-record parser (spark_jobs/contracts/flat_records.py). Without it (no mvn
# at install) every record takes the contract's checks in Spark: the same rows, slower.
CONTRACT_PARSER = SourceJar("contract-parser", "sigflow-contract-parser-0.1.0.jar", "spark",
                            "the contracts' flat-record parser")
# The catalog's metastore server (spark_jobs.local.catalog): Hive's metastore on the address given.
METASTORE = SourceJar("metastore", "sigflow-metastore-0.1.0.jar", "metastore", "the catalog's metastore server")
METASTORE_CLASS = "io.sigflow.metastore.MetastoreServer"
# Hadoop's local file system, setting permissions and telling links apart in the JVM (why: the
# classes' comments). Without it (no mvn at install) Hadoop starts a process for each.
LOCAL_FS = SourceJar("localfs", "sigflow-local-fs-0.1.0.jar", "spark", "the in-process local file system")
LOCAL_FS_CONF = {"spark.hadoop.fs.file.impl": "io.sigflow.hadoop.InProcessLocalFileSystem",
                 "spark.hadoop.fs.AbstractFileSystem.file.impl": "io.sigflow.hadoop.InProcessLocalFs"}
SOURCE_JARS = (LOGSTORE, CONTRACT_PARSER, METASTORE, LOCAL_FS)


def object_store_conf(dest: Path, store: ObjectStore) -> dict[str, str]:
    """Spark's settings for s3a:// tables: sigflow's log store when the s3 set is installed, and
    S3A pointed at the environment's endpoint. Embedded sessions and spark-submit get the same."""
    log_store = {"spark.delta.logStore.s3a.impl": LOGSTORE_CLASS} if LOGSTORE.path(dest).exists() else {}
    return {**log_store, **s3a_conf(store)}


def driver_class_path(dest: Path) -> str:
    """What joins every driver's launch classpath (``spark.driver.extraClassPath``): sigflow's
    local file system, when it was built. On it whatever the master, so that all drivers of a
    machine share one classpath and so one class archive (runtime/class_archive.py)."""
    path = LOCAL_FS.path(dest)
    return str(path) if path.exists() else ""


def local_fs_conf(dest: Path, master: str) -> dict[str, str]:
    """file:// through sigflow's local file system when it was built and the driver runs its
    tasks itself (a ``local`` master): only that JVM's classpath is known to hold it. On the
    driver's launch classpath, not only ``spark.jars``: spark-submit reads file:// (resolving
    ``spark.jars`` itself) before it loads those JARs."""
    if not driver_class_path(dest):
        return {}
    launch = {"spark.driver.extraClassPath": str(LOCAL_FS.verified(dest))}
    return {**launch, **LOCAL_FS_CONF} if master.startswith("local") else launch


def require_s3_log_store(delta_root: str, configured_log_store: str | None) -> None:
    """Refuse s3a:// tables without sigflow's log store. Without it delta-spark falls back to
    its default S3 log store, which excludes concurrent commits within one driver only:
    several jobs writing a shared table lose commits (docs/deploy.md, several writers on S3)."""
    if delta_root.startswith("s3a://") and configured_log_store != LOGSTORE_CLASS:
        raise JarError(
            f"the tables are on S3 ({delta_root}) but Spark's session has no conditional-put log "
            f"store (spark.delta.logStore.s3a.impl is {configured_log_store or 'unset'}): several "
            "jobs committing to one table would lose commits",
            "run `sigflow jars fetch s3` and start the job again (spark-submit: ship the s3 JARs "
            f"and set spark.delta.logStore.s3a.impl={LOGSTORE_CLASS})",
        )


def s3a_conf(store: ObjectStore) -> dict[str, str]:
    """S3A pointed where the AWS SDKs and delta-rs look, with the credentials from
    AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY: one set of variables for Spark, delta-rs and
    pyarrow. Nothing when no endpoint is set (AWS's own S3)."""
    endpoint = store.endpoint_url
    if not endpoint:
        return {}
    return {
        "spark.hadoop.fs.s3a.endpoint": endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": store.region or "us-east-1",
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


def read_jar_list(path: Path) -> list[Jar]:
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


def locked(sets: tuple[str, ...] | list[str] = SETS) -> list[Jar]:
    return [jar for jar in read_jar_list(LOCK) if jar.set in sets]


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
        raise JarError(f"JAR {jar.coordinate} is {what} in {dest}{more}",
                       FIX if jar.set in DEFAULT_SETS else f"run `sigflow jars fetch {jar.set}`")
    return [path_of(jar, dest) for jar in jars]


def verified_submit_jars(dest: Path) -> str:
    """``--jars`` for a spark-submit of a sigflow job: the installed JARs (openlineage's too
    when fetched: the driver's settings decide whether its listener runs), each hashed
    against its pin before the driver's JVM loads them (raises naming the first missing or
    corrupt one)."""
    fetched = tuple(name for name in ("openlineage",) if any(path_of(j, dest).exists() for j in locked((name,))))
    return ",".join(map(str, spark_jar_paths(dest, required=fetched)))


def submit_conf(dest: Path, store: ObjectStore, master: str) -> dict[str, str]:
    """Delta's session settings, the object store's and the local file system's, as a
    spark-submit's ``--conf``."""
    return {**DELTA_SESSION_CONF, **object_store_conf(dest, store), **local_fs_conf(dest, master)}


def spark_jar_paths(dest: Path | None = None, required: tuple[str, ...] = ()) -> list[Path]:
    """The verified Spark-classpath JARs; raises naming the first missing or corrupt one.
    The s3 set joins when it was fetched, a ``required`` set (openlineage, when its listener
    is on) always; each JAR is hashed once (the AWS SDK is large)."""
    dest = dest or default_dir()
    installed = ["spark", *required] + [name for name in JOINS_WHEN_FETCHED
                                        if any(path_of(j, dest).exists() for j in locked((name,)))]
    built = [jar.verified(dest) for jar in SOURCE_JARS if jar.set in installed and jar.path(dest).exists()]
    return verified_paths(installed, dest) + built


def require_submitted(entries: list[str], name: str) -> None:
    """Under spark-submit: refuse, before the driver starts, a session whose settings need a
    set that ``--jars`` did not ship."""
    shipped = {Path(entry.strip().removeprefix("file:")).name for entry in entries}
    missing = [jar for jar in locked((name,)) if jar.file_name not in shipped]
    if missing:
        raise JarError(f"spark-submit did not ship {missing[0].coordinate}",
                       f"run `sigflow jars fetch {name}` where the DAG is parsed and submit again")


def verify_classpath(entries: list[str]) -> None:
    """Check every JAR a driver was handed (spark-submit's ``--jars``, ``spark.jars``) against
    its pin: each must be a JAR of infra/jars/lock.txt with its SHA-256, or one of sigflow's
    own pinned builds. Raises naming the first that is not."""
    pinned = {jar.file_name: jar.sha256 for jar in locked(SETS)} | {jar.file_name: jar.sha256() for jar in SOURCE_JARS}
    for entry in filter(None, (e.strip() for e in entries)):
        path = Path(entry.removeprefix("file:"))
        if path.name not in pinned:
            raise JarError(f"the driver was given {path}, which is not a pinned JAR",
                           "submit only the JARs of infra/jars/lock.txt (`sigflow jars fetch`)")
        if not path.is_file() or sha256(path) != pinned[path.name]:
            raise JarError(f"JAR {path} is missing or differs from its pin", FIX)
