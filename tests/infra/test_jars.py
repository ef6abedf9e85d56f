"""infra/spark/fetch-jars.sh and pin-jars.sh against a local Maven-layout repository.

Maven Central is unreachable here, so the scripts' verification logic is proven on a
file:// repository with the same layout (curl reads it like the real one).
"""

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO

FETCH = REPO / "infra/spark/fetch-jars.sh"
PIN = REPO / "infra/spark/pin-jars.sh"


@pytest.fixture
def maven(tmp_path) -> Path:
    """A repository holding org.example:probe:1.0 and its .sha1, as Maven Central lays it out."""
    folder = tmp_path / "maven/org/example/probe/1.0"
    folder.mkdir(parents=True)
    jar = folder / "probe-1.0.jar"
    jar.write_bytes(b"PK probe jar")
    (folder / "probe-1.0.jar.sha1").write_text(hashlib.sha1(jar.read_bytes()).hexdigest() + "\n")
    return tmp_path / "maven"


def run(script: Path, *args, maven: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(script), *map(str, args)], capture_output=True, text=True,
        env={**os.environ, "MAVEN_REPO": maven.as_uri(), **env},
    )


def listing(tmp_path, line: str) -> Path:
    path = tmp_path / "jars.txt"
    path.write_text(f"# test\n{line}\n")
    return path


def test_pinning_records_the_sha256_and_fetch_then_checks_it(tmp_path, maven):
    jars = listing(tmp_path, "org.example:probe:1.0")
    assert run(PIN, jars, maven=maven).returncode == 0
    expected = hashlib.sha256(b"PK probe jar").hexdigest()
    assert jars.read_text().splitlines() == ["# test", f"org.example:probe:1.0:{expected}"]
    dest = tmp_path / "jars"
    dest.mkdir()
    result = run(FETCH, jars, dest, maven=maven, REQUIRE_PINNED="1")
    assert result.returncode == 0, result.stderr
    assert (dest / "probe-1.0.jar").read_bytes() == b"PK probe jar"


def test_a_jar_that_differs_from_its_pin_fails_the_build(tmp_path, maven):
    jars = listing(tmp_path, "org.example:probe:1.0:" + "0" * 64)
    result = run(FETCH, jars, tmp_path, maven=maven)
    assert result.returncode != 0
    assert "FAILED" in result.stdout + result.stderr


def test_an_unpinned_jar_is_refused_when_pins_are_required(tmp_path, maven):
    jars = listing(tmp_path, "org.example:probe:1.0")
    refused = run(FETCH, jars, tmp_path, maven=maven, REQUIRE_PINNED="1")
    assert refused.returncode != 0 and "run infra/spark/pin-jars.sh" in refused.stderr
    # without the requirement it is checked against Maven's .sha1 and its SHA-256 printed to pin
    allowed = run(FETCH, jars, tmp_path, maven=maven)
    assert allowed.returncode == 0, allowed.stderr
    assert hashlib.sha256(b"PK probe jar").hexdigest() in allowed.stderr


def test_the_listed_connectors_are_the_ones_the_images_need():
    jars = (REPO / "infra/spark/jars.txt").read_text()
    for artifact in ("spark-sql-kafka-0-10_2.13:4.2.0", "delta-spark_2.13:4.4.1", "delta-storage:4.4.1", "hadoop-aws:"):
        assert artifact in jars
