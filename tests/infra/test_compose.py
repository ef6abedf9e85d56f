"""docker-compose.yml and the images, checked without a Docker engine (none runs here)."""

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from spark_jobs.config import load_settings, object_store
from spark_jobs.runtime.classpath import SPARK_CLASSPATH_SETS
from spark_jobs.runtime.kafka.source import kafka_options
from tests.helpers import system_tool

REPO = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
ONE_SHOT = {"minio-init", "airflow-init"}  # gate others via service_completed_successfully


def _compose_config(env_file: Path) -> subprocess.CompletedProcess:
    docker_compose = system_tool("docker-compose", "docker-compose")
    return subprocess.run(
        [docker_compose, "--project-directory", str(REPO), "--file", str(REPO / "docker-compose.yml"),
         "--env-file", str(env_file), "config"],
        capture_output=True, text=True,
    )


def test_compose_file_validates_with_a_real_compose_parser():
    """Debian's docker-compose checks the file against the Compose schema and resolves
    variables, anchors and build contexts, with no engine running."""
    result = _compose_config(REPO / ".env.example")
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)
    assert set(resolved["services"]) == set(SERVICES)
    # `$${X}` is the container shell's variable, escaped; anything else must be resolved
    assert "${" not in result.stdout.replace("$${", ""), "an unresolved variable is left"


def test_a_missing_secret_stops_compose_with_what_to_set(tmp_path):
    env = tmp_path / ".env"
    env.write_text("\n".join(
        line for line in (REPO / ".env.example").read_text().splitlines() if not line.startswith("POSTGRES_PASSWORD")
    ))
    result = _compose_config(env)
    assert result.returncode != 0
    assert "set POSTGRES_PASSWORD in .env" in result.stderr


def test_every_long_running_service_has_a_health_check():
    missing = [name for name, svc in SERVICES.items() if name not in ONE_SHOT and "healthcheck" not in svc]
    assert missing == []


def test_images_are_pinned():
    for name, svc in SERVICES.items():
        image = svc["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name} image {image} is not pinned"


def test_dependencies_wait_for_health_or_completion():
    for name, svc in SERVICES.items():
        for dependency, rule in (svc.get("depends_on") or {}).items():
            assert dependency in SERVICES, f"{name} depends on unknown {dependency}"
            expected = "service_completed_successfully" if dependency in ONE_SHOT else "service_healthy"
            assert rule["condition"] == expected, f"{name} -> {dependency}"


def test_volumes_and_networks_referenced_exist():
    for name, svc in SERVICES.items():
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            assert source.startswith(".") or source in COMPOSE["volumes"], f"{name}: volume {source}"
        for network in svc.get("networks", []):
            assert network in COMPOSE["networks"], f"{name}: network {network}"


def test_published_ports_bind_localhost_only():
    for name, svc in SERVICES.items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond localhost"


def test_resource_limits_are_set():
    for name, svc in SERVICES.items():
        if name not in ONE_SHOT:
            assert svc["deploy"]["resources"]["limits"]["memory"], name


def test_every_secret_variable_is_in_env_example():
    used = set(re.findall(r"\$\{(\w+):\?", (REPO / "docker-compose.yml").read_text()))
    example = {line.split("=")[0] for line in (REPO / ".env.example").read_text().splitlines() if "=" in line}
    assert used and used <= example


def _env(service: str) -> dict[str, str]:
    return {k: str(v) for k, v in SERVICES[service]["environment"].items()}


@pytest.mark.parametrize("service", ["airflow-scheduler", "spark-master", "spark-worker-1"])
def test_services_get_a_valid_production_configuration(service):
    env = {k: v for k, v in _env(service).items() if k.startswith("SIGFLOW_") or k == "KAFKA_BOOTSTRAP_SERVERS"}
    settings = load_settings(env=env)  # raises on any unknown or malformed setting
    assert settings.kafka.bootstrap_servers == "kafka:9092"
    assert settings.table_uri("device_events").startswith("s3a://sigflow/delta/")
    assert settings.checkpoint_uri("ingest").startswith("s3a://sigflow/checkpoints/")
    assert kafka_options(settings, settings.kafka.bootstrap_servers, [settings.streaming.events_topic])["subscribe"] == "device-events"


AIRFLOW_SERVICES = sorted(name for name, svc in SERVICES.items()
                          if svc.get("image", "").startswith("sigflow-airflow") and "entrypoint" not in svc)


def test_compose_airflow_reads_the_settings_file_the_loopback_topology_reads(tmp_path):
    """infra/airflow/airflow.env is the one list of Airflow's production settings: compose's
    Airflow services resolve to it (through the real compose parser), and `sigflow airflow
    --production` starts its components with it (airflow_local.start_production)."""
    from spark_jobs.local import airflow_local

    result = _compose_config(REPO / ".env.example")
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)["services"]
    shared = airflow_local.production_settings()
    assert shared["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    # production signs people in through FAB, with sigflow's roles (not the development auth manager)
    assert shared["AIRFLOW__CORE__AUTH_MANAGER"] == "spark_jobs.airflow.auth_manager.SigflowFabAuthManager"
    assert not [key for key in shared if "SIMPLE_AUTH_MANAGER" in key]
    assert len(AIRFLOW_SERVICES) == 5
    for name in AIRFLOW_SERVICES:
        environment = {k: str(v) for k, v in resolved[name]["environment"].items()}
        assert shared.items() <= environment.items(), name
        # several processes: one token key for all, and the metadata in PostgreSQL
        assert environment["AIRFLOW__API_AUTH__JWT_SECRET"], name
        assert environment["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql"), name


def test_spark_defaults_are_what_sigflow_drivers_set_for_compose():
    """spark-submit drivers and executors start before sigflow's code runs, so the image's
    spark-defaults.conf must hold the session settings get_spark and the deploy DAG give:
    delta-spark's extension, the log store, and S3A pointed at compose's MinIO."""
    from spark_jobs.runtime import classpath

    conf = dict(
        line.split(None, 1) for line in (REPO / "infra/spark/spark-defaults.conf").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    conf = {key: value.strip() for key, value in conf.items()}
    installed = Path(__import__("tempfile").mkdtemp())
    classpath.LOGSTORE.path(installed).parent.mkdir(parents=True)
    classpath.LOGSTORE.path(installed).touch()  # as the image has it
    expected = {**classpath.DELTA_SESSION_CONF, **classpath.object_store_conf(installed, object_store(_env("spark-master")))}
    assert expected["spark.delta.logStore.s3a.impl"] == classpath.LOGSTORE_CLASS
    assert {key: conf.get(key) for key in expected} == expected


# The Airflow image runs the drivers: every set of the drivers' classpath. The Spark image
# runs the executors: all but OpenLineage's listener, which lives in the driver.
@pytest.mark.parametrize(("dockerfile", "sets"), [("infra/spark/Dockerfile", ("spark", "s3")),
                                                  ("infra/airflow/Dockerfile", SPARK_CLASSPATH_SETS)])
def test_images_fetch_the_locked_jars_and_bake_in_sigflows_own(dockerfile, sets):
    from spark_jobs.runtime import classpath

    text = (REPO / dockerfile).read_text()
    for jar in classpath.SOURCE_JARS:
        pom = (jar.source / "pom.xml").read_text()
        built = "{}-{}.jar".format(*re.search(
            r"<artifactId>(sigflow-[\w-]+)</artifactId>\s*<version>([^<]+)</version>", pom).groups())
        assert built == jar.file_name
        assert f"mvn -B -q -f /build/{jar.folder}/pom.xml package" in text
        # where classpath.SourceJar.path looks
        assert f"/build/{jar.folder}/target/{built} /opt/sigflow/jars/{jar.set}/" in text
    assert "ENV SIGFLOW_JARS_DIR=/opt/sigflow/jars" in text
    assert f"sigflow jars fetch {' '.join(sets)}" in text


def test_airflow_gets_its_connections_from_the_environment():
    env = _env("airflow-scheduler")
    assert env["AIRFLOW_CONN_SPARK_DEFAULT"] == "spark://spark-master:7077"


@pytest.mark.parametrize("dockerfile", sorted(str(p.relative_to(REPO)) for p in REPO.glob("infra/*/Dockerfile")))
def test_dockerfiles_pass_hadolint(dockerfile):
    hadolint = shutil.which("hadolint") or str(Path(__import__("sys").executable).parent / "hadolint")
    result = subprocess.run([hadolint, dockerfile], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_spark_submit_drivers_get_the_same_java_options_as_embedded_ones():
    """Under spark-submit the driver JVM starts before get_spark runs, so its options come
    from the image's spark-defaults.conf: out of memory must exit there too, not hang."""
    from spark_jobs.runtime.jvm_options import DRIVER_JAVA_OPTIONS

    conf = dict(
        line.split(None, 1) for line in (REPO / "infra/spark/spark-defaults.conf").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    assert conf["spark.driver.extraJavaOptions"].strip() == DRIVER_JAVA_OPTIONS


def test_the_embedded_cluster_is_the_compose_cluster_on_loopback():
    """`sigflow cluster` runs what compose's Spark services run, where compose publishes them:
    the same master and worker classes, the master on 7077 and its UI on 8090, two workers."""
    from spark_jobs.local import cluster

    defaults = load_settings(env={})
    published = {int(host.split(":")[1]): int(container) for host, container in
                 (str(p).rsplit(":", 1) for p in SERVICES["spark-master"]["ports"])}
    assert published == {defaults.local.cluster_ui_port: 8080, defaults.local.cluster_port: 7077}
    workers = [name for name in SERVICES if name.startswith("spark-worker")]
    assert len(workers) == defaults.local.cluster_workers
    assert all(cluster.WORKER_CLASS in " ".join(SERVICES[name]["command"]) for name in workers)
    assert all(f"spark-master:{defaults.local.cluster_port}" in " ".join(SERVICES[name]["command"]) for name in workers)
    assert _env("spark-master")["SIGFLOW_SPARK_MASTER"] == f"spark://spark-master:{defaults.local.cluster_port}"


def test_compose_publishes_kafka_and_airflow_where_the_embedded_ones_listen():
    """A client pointed at localhost works the same against `make run` and `make up`."""
    defaults = load_settings(env={})

    def published(service: str) -> set[int]:
        return {int(str(port).split(":")[1]) for port in SERVICES[service]["ports"]}

    assert defaults.local.broker_port in published("kafka")
    assert f"HOST://localhost:{defaults.local.broker_port}" in _env("kafka")["KAFKA_ADVERTISED_LISTENERS"]
    assert published("airflow-apiserver") == {defaults.local.airflow_port}


def test_only_the_object_store_itself_gets_its_root_keys_and_the_host_listener_asks_for_a_user(tmp_path):
    """Jobs, Airflow and Spark use a user limited to the sigflow bucket (made by minio-init);
    the root keys reach MinIO and minio-init only. Checked on compose's resolution of an
    .env whose every value is distinct."""
    names = [line.split("=")[0] for line in (REPO / ".env.example").read_text().splitlines()
             if "=" in line and not line.startswith("#")]
    values = {name: f"value-of-{name.lower()}" for name in names if name != "COMPOSE_PROJECT_NAME"}
    env = tmp_path / ".env"
    env.write_text("".join(f"{name}={value}\n" for name, value in values.items()))
    result = _compose_config(env)
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)["services"]
    root = (values["MINIO_ROOT_USER"], values["MINIO_ROOT_PASSWORD"])
    holding_root = sorted(name for name, svc in resolved.items()
                          if any(key in str(value) for value in (svc.get("environment") or {}).values() for key in root))
    assert holding_root == ["minio", "minio-init"]
    jobs = _env("spark-worker-1")
    assert "SIGFLOW_S3_USER" in jobs["AWS_ACCESS_KEY_ID"] and "SIGFLOW_S3_PASSWORD" in jobs["AWS_SECRET_ACCESS_KEY"]
    assert not [name for name, svc in resolved.items() for arg in svc.get("command") or []
                if any(key in str(arg) for key in root)]  # never on a command line (ps)
    protocols = dict(pair.split(":") for pair in _env("kafka")["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert protocols["HOST"] == "SASL_PLAINTEXT"


def test_every_spark_process_authenticates_with_the_shared_secret_from_a_file(tmp_path):
    """The master, the workers and the drivers Airflow submits get the secret file; the
    images' entrypoint writes it into a private Spark configuration (run here for real)."""
    spark = [name for name, svc in SERVICES.items() if svc.get("image", "").startswith(("sigflow-spark", "sigflow-airflow"))
             and name not in ("sigflow-metrics", "metastore")]
    assert len(spark) == 9  # master, 2 workers, 5 Airflow components, the SQL endpoint's driver
    for name in spark:
        assert SERVICES[name]["secrets"][0] == "spark_auth_secret", name
        assert _env(name)["SPARK_AUTH_SECRET_FILE"] == "/run/secrets/spark_auth_secret", name
    assert COMPOSE["secrets"]["spark_auth_secret"]["file"].startswith("./secrets/")

    home = tmp_path / "spark"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "spark-defaults.conf").write_text("spark.sql.session.timeZone UTC\n")
    (tmp_path / "secret").write_text("s3cr3t-shared\n")
    conf_dir = tmp_path / "conf"
    ran = subprocess.run(
        ["bash", str(REPO / "infra/spark/with-auth-secret.sh"), "sh", "-c", 'stat -c %a "$SPARK_CONF_DIR" '
         '"$SPARK_CONF_DIR/spark-defaults.conf"'],
        env={"PATH": "/usr/bin:/bin", "SPARK_HOME": str(home), "SPARK_CONF_DIR": str(conf_dir),
             "SPARK_AUTH_SECRET_FILE": str(tmp_path / "secret")}, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["700", "600"]
    conf = (conf_dir / "spark-defaults.conf").read_text().splitlines()
    assert conf == ["spark.sql.session.timeZone UTC", "spark.authenticate true", "spark.authenticate.secret s3cr3t-shared"]


def _run_one_shot(service: str, tmp_path, env: dict[str, str], fakes: dict[str, str]) -> None:
    """Run a one-shot service's shell command as its container would, with each program in
    ``fakes`` replaced by a script that logs its arguments and standard input."""
    import os
    import subprocess
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in fakes.items():
        (bin_dir / name).unlink(missing_ok=True)  # never write through the link to the real python
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    if not (bin_dir / "python").exists():
        (bin_dir / "python").symlink_to(sys.executable)
    command = SERVICES[service]["command"][-1].replace("$$", "$")  # compose's escape of a shell $
    subprocess.run(["/bin/sh", "-c", command], env={"PATH": f"{bin_dir}:{os.environ['PATH']}", **env},
                   cwd=tmp_path, check=True, timeout=60)


def test_the_one_shot_services_pass_passwords_by_environment_or_stdin_never_as_arguments(tmp_path):
    """minio-init hands the jobs' S3 key to mc on its standard input, airflow-init writes the
    users' passwords from its environment into a file only its owner reads: no password is
    in any program's arguments (what `ps` shows)."""
    import json
    import sys

    log = tmp_path / "calls.log"
    record = f'echo "ARGS $*" >> {log}; if [ ! -t 0 ]; then echo "STDIN $(cat)" >> {log}; fi'
    _run_one_shot("minio-init", tmp_path, {"SIGFLOW_S3_USER": "jobs", "SIGFLOW_S3_PASSWORD": "s3-pw-1",
                                           "MC_HOST_local": "http://root:root-pw@minio:9000"}, {"mc": record})
    calls = log.read_text().splitlines()
    assert "ARGS admin user add local jobs" in calls and "STDIN s3-pw-1" in calls
    assert not [line for line in calls if line.startswith("ARGS") and ("s3-pw-1" in line or "root-pw" in line)]

    # airflow-init: the first users' passwords from its environment into a file only its owner
    # reads, which the people step reads (here: a stand-in noting what it found) and which is
    # gone afterwards
    from spark_jobs.airflow.people import USERS
    from spark_jobs.local import airflow_local

    assert tuple(USERS) == airflow_local.PEOPLE  # the local production stack's first users too
    passwords = tmp_path / "auth" / "passwords.json"
    passwords.parent.mkdir()
    users = {f"AIRFLOW_{user.upper()}_PASSWORD": f"{user[0]}-pw" for user in USERS}
    fake_python = (f'if [ "$1" = "-m" ]; then echo "ARGS python $*" >> {log}; '
                   f'echo "READ $(stat -c %a "$SIGFLOW_AIRFLOW_PASSWORDS_FILE") $(cat "$SIGFLOW_AIRFLOW_PASSWORDS_FILE")" '
                   f'>> {log}; else exec {sys.executable} "$@"; fi')
    _run_one_shot("airflow-init", tmp_path, {**users, "SIGFLOW_AIRFLOW_PASSWORDS_FILE": str(passwords)},
                  {"airflow": record, "python": fake_python})
    calls = log.read_text().splitlines()
    assert "ARGS python -m spark_jobs.airflow.people" in calls
    (read,) = [line for line in calls if line.startswith("READ ")]
    mode, text = read[5:].split(" ", 1)
    assert mode == "600" and json.loads(text) == {user: f"{user[0]}-pw" for user in USERS}
    assert not passwords.exists()  # hashed in the database, nowhere else
    assert not [line for line in calls if line.startswith("ARGS") and "-pw" in line]


@pytest.mark.parametrize("dockerfile", ["infra/spark/Dockerfile", "infra/airflow/Dockerfile"])
def test_images_install_exactly_the_lock(dockerfile, tmp_path):
    """Both images install the versions and hashes of uv.lock, as `make install` does, not
    whatever pyproject.toml's ranges resolve to on the day of the build: the export command
    they run is run here for real on the repository, and gives every locked package pinned
    with its hashes."""
    import shlex
    import sys

    text = (REPO / dockerfile).read_text()
    uv_pin = re.search(r"'uv==([\d.]+)'", (REPO / "Makefile").read_text()).group(1)
    assert f"uv=={uv_pin}" in text  # the version that wrote the lock
    export = re.search(r"(uv export [^\n\\]+)", text).group(1)
    assert "--frozen" in export and "--require-hashes -r /tmp/locked.txt" in text and "--no-deps -e /opt/sigflow" in text
    args = shlex.split(export.replace("/opt/sigflow", str(REPO)).replace("/tmp/locked.txt", str(tmp_path / "locked.txt")))
    subprocess.run([str(Path(sys.executable).parent / "uv"), *args[1:]], check=True, capture_output=True)
    locked = (tmp_path / "locked.txt").read_text()
    requirements: dict[str, list[str]] = {}  # "name==version" -> its hashes
    for line in locked.splitlines():
        if re.match(r"[a-z0-9]", line):
            current = requirements.setdefault(line.split()[0].split(";")[0], [])
        elif line.strip().startswith("--hash=sha256:"):
            current.append(line.split()[0])
    assert requirements and all(requirements.values())  # each one pinned with its hashes
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    versions = {package["name"]: package["version"] for package in lock["package"] if "version" in package}
    pins = dict(requirement.split("==") for requirement in requirements)
    for name in ("pyspark", "delta-spark", "apache-airflow", "great-expectations", "kafka-python"):
        assert pins[name] == versions[name], name
