"""The pinned JARs: versions follow the installed packages, every file matches its pin, and a
missing or corrupt one fails with its name and the fix."""

import re
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pyspark
import pytest

from spark_jobs.config import load_settings, object_store
from spark_jobs.install import jars
from spark_jobs.runtime import classpath
from spark_jobs.runtime.spark import jar_conf
from tests.helpers import REPO, sigflow


def _root(artifact_prefix: str) -> classpath.Jar:
    return next(j for j in jars.roots() if j.artifact.startswith(artifact_prefix))


def test_the_kafka_connector_is_at_the_installed_pysparks_version():
    assert _root("spark-sql-kafka-0-10_2.13").version == pyspark.__version__


def test_delta_is_the_artifact_built_for_the_installed_spark_at_the_pip_delta_version():
    spark_minor = ".".join(pyspark.__version__.split(".")[:2])
    delta = _root("delta-spark")
    assert (delta.artifact, delta.version) == (f"delta-spark_{spark_minor}_2.13", version("delta-spark"))


def test_hadoop_aws_matches_the_hadoop_client_pyspark_ships():
    shipped = [p.name for p in (Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar")]
    assert shipped == [f"hadoop-client-api-{_root('hadoop-aws').version}.jar"]


def test_nothing_pyspark_ships_is_pinned_again_for_its_classpath():
    ours = {j.artifact for j in classpath.locked(classpath.SPARK_CLASSPATH_SETS)}
    assert ours and not ours & jars.pyspark_artifacts()


def test_every_installed_jar_matches_its_pin():
    paths = classpath.verified_paths(jars.DEFAULT_SETS)
    assert len(paths) == len(classpath.locked(jars.DEFAULT_SETS))
    for jar, path in zip(classpath.locked(jars.DEFAULT_SETS), paths):
        assert classpath.sha256(path) == jar.sha256


def test_no_repository_host_is_written_in_the_repository():
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True).stdout.split()
    hosts = re.compile(r"repo1?\.maven|maven\.org|mvnrepository|https?://repo\.")
    this_test = Path(__file__).resolve().relative_to(REPO).as_posix()  # it names the patterns
    offenders = [name for name in tracked if name != this_test and (REPO / name).is_file() and hosts.search(
        (REPO / name).read_text(errors="ignore"))]
    assert offenders == []


@pytest.fixture
def jars_copy(tmp_path) -> Path:
    """A copy of the installed Spark JARs that a test may damage."""
    dest = tmp_path / "jars"
    shutil.copytree(classpath.default_dir() / "spark", dest / "spark")
    return dest


def test_a_corrupt_jar_stops_the_session_start_naming_it_and_the_fix(jars_copy):
    victim = next(j for j in classpath.locked(("spark",)) if j.artifact.startswith("delta-spark"))
    (jars_copy / "spark" / victim.file_name).write_bytes(b"not a jar")
    settings = load_settings(env={}, overrides={"jars_dir": str(jars_copy)})
    with pytest.raises(classpath.JarError, match=re.escape(victim.coordinate) + " is corrupt") as err:
        jar_conf(settings)
    assert "sigflow jars fetch" in err.value.hint


def test_fetch_restores_a_missing_and_a_corrupt_jar_and_check_then_passes(jars_copy):
    missing, corrupt = classpath.locked(("spark",))[:2]
    (jars_copy / "spark" / missing.file_name).unlink()
    (jars_copy / "spark" / corrupt.file_name).write_bytes(b"PK truncated")
    env = {"SIGFLOW_JARS_DIR": str(jars_copy)}
    check = sigflow(None, "jars", "check", "spark", extra_env=env)
    assert check.returncode == 2 and missing.coordinate in check.stderr and "sigflow jars fetch" in check.stderr
    fetched = sigflow(None, "jars", "fetch", "spark", extra_env=env)
    assert fetched.returncode == 0, fetched.stderr
    assert "2 fetched" in fetched.stdout
    assert sigflow(None, "jars", "check", "spark", extra_env=env).returncode == 0


def test_fetch_builds_the_contract_parser_again_when_its_source_changed_and_goes_on_without_mvn(jars_copy, tmp_path):
    """A parser built from older source is replaced by a build of today's; without mvn the
    install says it is not built and the jobs run without it (every record through the checks)."""
    parser = classpath.CONTRACT_PARSER
    parser.path(jars_copy).write_bytes(b"PK built from older source")
    env = {"SIGFLOW_JARS_DIR": str(jars_copy)}
    fetched = sigflow(None, "jars", "fetch", "spark", extra_env=env)
    assert fetched.returncode == 0, fetched.stderr
    assert f"built {parser.file_name}" in fetched.stdout
    assert classpath.sha256(parser.path(jars_copy)) == parser.sha256()

    parser.path(jars_copy).write_bytes(b"PK built from older source")
    no_mvn = str(Path(sys.executable).parent)  # PATH with the environment's commands only
    unbuilt = sigflow(None, "jars", "fetch", "spark", extra_env={**env, "PATH": no_mvn})
    assert unbuilt.returncode == 0, unbuilt.stderr
    assert "not built: the contracts' flat-record parser (infra/contract-parser) needs mvn" in unbuilt.stdout
    assert not parser.path(jars_copy).exists()  # the older build is gone, not left to stop sessions
    settings = load_settings(env={}, overrides={"jars_dir": str(jars_copy)})
    assert parser.file_name not in jar_conf(settings)["spark.jars"]


def test_s3_tables_without_the_log_store_are_refused_naming_the_fetch(tmp_path):
    """The s3 set absent: the session gets no conditional-put log store, and a job whose tables
    are on s3a:// refuses to start rather than fall back to delta-spark's single-driver one."""
    key = "spark.delta.logStore.s3a.impl"
    without = classpath.object_store_conf(tmp_path / "no-s3-set", object_store({"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}))
    assert key not in without
    with pytest.raises(classpath.JarError, match="would lose commits") as err:
        classpath.require_s3_log_store("s3a://lake/delta", without.get(key))
    assert "sigflow jars fetch s3" in err.value.hint
    classpath.require_s3_log_store(str(tmp_path / "delta"), without.get(key))  # local tables need none
    installed = tmp_path / "with-s3-set"
    classpath.LOGSTORE.path(installed).parent.mkdir(parents=True)
    classpath.LOGSTORE.path(installed).touch()
    classpath.require_s3_log_store("s3a://lake/delta", classpath.object_store_conf(installed, object_store({})).get(key))


def test_the_spark_lineage_listener_without_its_jar_is_refused_naming_the_fetch(jars_copy):
    """Off, a session needs no listener JAR; on, a session (or a submitted driver whose --jars
    lack it) refuses to start rather than fail inside Spark's listener bus."""
    off = load_settings(env={}, overrides={"jars_dir": str(jars_copy)})
    assert "openlineage" not in jar_conf(off)["spark.jars"]
    on = off.replace(lineage_spark_listener=True)
    listener = classpath.locked(("openlineage",))[0]
    with pytest.raises(classpath.JarError, match=re.escape(listener.coordinate) + " is missing") as err:
        jar_conf(on)
    assert err.value.hint == "run `sigflow jars fetch openlineage`"
    spark_set = [str(jars_copy / "spark" / j.file_name) for j in classpath.locked(("spark",))]
    with pytest.raises(classpath.JarError, match="spark-submit did not ship " + re.escape(listener.coordinate)):
        classpath.require_submitted(spark_set, "openlineage")
    classpath.require_submitted([*spark_set, f"file:/opt/jars/{listener.file_name}"], "openlineage")


@pytest.mark.slow  # a spark-submit driver JVM
def test_a_spark_submit_driver_refuses_a_jar_that_differs_from_its_pin(jars_copy, settings):
    """The deploy DAG and a cluster hand the driver its JARs through spark-submit's --jars;
    the driver hashes each before any query starts."""
    import sys

    from tests.helpers import cli_env

    victim = next(j for j in classpath.locked(("spark",)) if j.artifact.startswith("delta-spark"))
    (jars_copy / "spark" / victim.file_name).write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip
    submitted = ",".join(str(path) for path in sorted((jars_copy / "spark").glob("*.jar")))
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = cli_env(settings, {"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"})
    ran = subprocess.run([str(submit), "--master", "local[1]", "--jars", submitted,
                          str(REPO / "spark_jobs" / "cli" / "__main__.py"), "run", "ingest", "--available-now"],
                         env=env, capture_output=True, text=True, timeout=240, cwd=REPO)
    assert ran.returncode == 2, ran.stdout[-2000:]
    # spark-submit's Python runner hands the driver's stderr on through its stdout
    assert f"sigflow: error: JAR {jars_copy / 'spark' / victim.file_name} is missing or differs from its pin" in ran.stdout


@pytest.mark.parametrize("jar", classpath.SOURCE_JARS, ids=lambda jar: jar.folder)
def test_sigflows_own_jars_on_a_classpath_are_the_pinned_builds(tmp_path, jar):
    path = jar.path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"PK a jar built from other source")
    with pytest.raises(classpath.JarError, match=f"is not the build pinned in infra/{jar.folder}/jar.sha256") as err:
        jar.verified(tmp_path)
    assert f"sigflow jars fetch {jar.set}" in err.value.hint
    with pytest.raises(classpath.JarError, match="differs from its pin"):
        classpath.verify_classpath([f"file:{path}"])
    with pytest.raises(classpath.JarError, match="not a pinned JAR"):
        classpath.verify_classpath([str(tmp_path / "anything-else.jar")])