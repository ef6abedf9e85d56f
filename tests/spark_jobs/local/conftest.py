"""Fixtures of the one-machine stand-ins."""

import pytest

from spark_jobs.local import cluster
from tests.helpers import QUICK_JIT


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A Spark standalone cluster (about 13 s to start) shared by this worker's tests; a test
    that kills a worker brings it back. Yields the settings it is recorded under."""
    from spark_jobs.config import load_settings

    s = load_settings(env={}, overrides={"data_dir": str(tmp_path_factory.mktemp("cluster")),
                                         "cluster_port": 0, "cluster_ui_port": 0, **QUICK_JIT})
    cluster.start(s, timeout_s=300)  # several JVMs may be starting beside it on 2 cores
    yield s
    cluster.stop(s)
