"""The DAG folder: every DAG loads, is documented and owned, and the asset wiring holds."""

import os
import subprocess
import sys

import pytest

from tests.dags.conftest import DAGS


def _bag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_dag_folder_loads_without_import_errors(airflow_home):
    bag = _bag()
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == [
        "sigflow_deploy", "sigflow_maintenance", "sigflow_quality", "sigflow_reconcile", "sigflow_restart",
        "sigflow_streaming",
    ]
    for dag in bag.dags.values():
        assert dag.owner == "sigflow" and dag.doc_md and "sigflow" in dag.tags, dag.dag_id


def test_on_call_dags_take_their_parameters_from_a_form(airflow_home):
    bag = _bag()
    from airflow.providers.standard.operators.hitl import ApprovalOperator

    restart = bag.get_dag("sigflow_restart")
    assert set(restart.params) == {"job", "action", "to_batch", "to_time", "recover_from", "accept_state_loss",
                                   "force", "approve_within_minutes"}
    # nothing is applied before a person approves the plan
    assert isinstance(restart.get_task("approve_and_apply"), ApprovalOperator)
    assert restart.get_task("approve_and_apply").upstream_task_ids == {"plan"}
    assert restart.get_task("run_job").upstream_task_ids == {"approve_and_apply"}
    assert set(bag.get_dag("sigflow_deploy").params) == {"mode", "trigger_interval", "jobs", "shape"}


def test_an_approval_window_beyond_a_week_is_refused_by_the_form(airflow_home):
    """1e10 minutes overflowed the approval's timeout deep in the task; the form refuses it."""
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    form = ParamsDict(_bag().get_dag("sigflow_restart").params)
    form["approve_within_minutes"] = 7 * 24 * 60
    form.validate()
    with pytest.raises(ParamValidationError, match="approve_within_minutes"):
        form["approve_within_minutes"] = 1e10
        form.validate()


def test_quality_runs_when_any_table_it_checks_is_updated(airflow_home):
    bag = _bag()
    emitted = {a.name for t in bag.get_dag("sigflow_streaming").tasks for a in t.outlets}
    quality = bag.get_dag("sigflow_quality")
    watched = {a.name for a in quality.timetable.asset_condition.objects}
    assert watched and watched <= emitted
    assert {t.task_id for t in quality.tasks} == {f"check_{a.removeprefix('sigflow.')}" for a in watched}


HEAVY_MODULES = ("pyspark", "py4j", "pandas", "pyarrow", "deltalake", "great_expectations", "matplotlib")


# One fresh interpreter parses the files one after the other: a heavy module is charged to
# the first file that loads it, and none may load one (a process per file cost 45 s).
PARSE_EACH = """
import runpy, sys
heavy = set(sys.argv[1].split(","))
for path in sys.argv[2:]:
    runpy.run_path(path)
    print(path, ",".join(sorted({m.split(".")[0] for m in sys.modules} & heavy)), sep="\t")
"""


def test_parsing_a_dag_file_imports_no_spark_pandas_or_arrow(airflow_home):
    """Airflow parses every DAG file again and again: only task code may load the heavy libraries."""
    paths = [str(path) for path in sorted(DAGS.glob("*.py"))]
    out = subprocess.run([sys.executable, "-c", PARSE_EACH, ",".join(HEAVY_MODULES), *paths],
                         capture_output=True, text=True, check=True, env=os.environ).stdout
    loaded = dict(line.split("\t") for line in out.splitlines() if line.startswith(tuple(paths)))
    assert sorted(loaded) == paths  # every file was parsed
    assert {path: heavy for path, heavy in loaded.items() if heavy} == {}


def test_deploy_hands_its_submitted_drivers_the_class_archive_of_this_machine(airflow_home, tmp_path, monkeypatch):
    """spark-submit starts the driver's JVM before sigflow runs, so the submit names the
    drivers' class archive in its Java options, from the worker's environment; none when the
    archive is not whole."""
    from spark_jobs.config import load_settings
    from spark_jobs.runtime import class_archive

    java_home, jars = "/opt/some-jdk", tmp_path / "jars"
    monkeypatch.setenv("JAVA_HOME", java_home)
    monkeypatch.setenv("SIGFLOW_JARS_DIR", str(jars))
    archive = class_archive.archive_path(jars, java_home)
    archive.parent.mkdir(parents=True)
    (tmp_path / "dump").write_bytes(b"\0" * 4096)
    class_archive.adopt(tmp_path / "dump", archive)

    def driver_options() -> str:
        return _bag().get_dag("sigflow_deploy").get_task("start_ingest").spark_properties(load_settings())[
            "spark.driver.extraJavaOptions"]

    assert f"-XX:SharedArchiveFile={archive} " in driver_options()
    archive.write_bytes(b"\0" * 100)  # not the size recorded
    assert "SharedArchiveFile" not in driver_options()


def test_the_deploy_submit_hashes_its_jars_before_spark_submit_loads_them(airflow_home, tmp_path, monkeypatch):
    """spark-submit's JVM loads delta-spark's session extension from --jars before sigflow
    runs: a JAR that differs from its pin fails the task, naming it, before spark-submit starts."""
    import shutil

    from spark_jobs.install import jars
    from spark_jobs.runtime.classpath import JarError

    spark_set = tmp_path / "jars" / "spark"
    shutil.copytree(jars.default_dir() / "spark", spark_set, symlinks=False)
    tampered = next(spark_set.glob("delta-spark_*.jar"))
    tampered.write_bytes(tampered.read_bytes() + b"\0")
    monkeypatch.setenv("SIGFLOW_JARS_DIR", str(tmp_path / "jars"))
    task = _bag().get_dag("sigflow_deploy").get_task("start_ingest")
    with pytest.raises(JarError, match="delta-spark_.* is corrupt"):  # before spark-submit starts
        task.execute({})
