"""OpenLineage run events of a job's run: the Kafka topics it read, the Delta tables (with
the version each reached) or the topic it wrote, and the Airflow task run that started it.

A run emits START when it begins and COMPLETE or FAIL when it ends, through the OpenLineage
client: one JSON line per event in ``<lineage_dir>/<job>.jsonl``, and to ``lineage_url``
too when it is set. A run that spark-submit started from Airflow finds the task run in its
Spark properties (``spark.openlineage.parent*``, which the Apache Spark provider sets with
``openlineage_inject_parent_job_info``) and names it as its parent, the DAG run as the
root. An event that cannot be sent is logged, never allowed to fail the job.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlparse

from spark_jobs.config import Settings
from spark_jobs.runtime.delta import table_access
from spark_jobs.runtime.kafka.connection import KafkaConnection

log = logging.getLogger("sigflow.lineage")
NAMESPACE = "sigflow"  # the jobs' namespace in OpenLineage
PRODUCER = "urn:sigflow:spark_jobs"  # OpenLineage asks for a URI naming the producer; a name, not an address
PARENT_PROPERTIES = ("parentJobNamespace", "parentJobName", "parentRunId",
                     "rootParentJobNamespace", "rootParentJobName", "rootParentRunId")


def topic_dataset(kafka: KafkaConnection | str, topic: str) -> tuple[str, str]:
    """OpenLineage's name of a Kafka topic: (kafka://<first bootstrap server>, topic)."""
    first = KafkaConnection.of(kafka).bootstrap_servers.split(",")[0].strip()
    return f"kafka://{first}", topic


def table_dataset(uri: str) -> tuple[str, str]:
    """OpenLineage's name of a Delta table: (file, absolute path) or (s3://bucket, key)."""
    parsed = urlparse(uri)
    if parsed.scheme in ("s3", "s3a"):
        return f"s3://{parsed.netloc}", parsed.path.lstrip("/")
    return "file", str(Path(parsed.path if parsed.scheme == "file" else uri).resolve())


def events_file(settings: Settings, job: str) -> Path:
    return settings.lineage_path / f"{job}.jsonl"


def file_transport(path: Path) -> dict:
    return {"type": "file", "log_file_path": str(path), "append": True}


def http_transport(url: str) -> dict:
    """The client's HTTP transport, retrying twice within about a second: an endpoint that is
    down holds a run's start and end for that long, not for the 7 to 9 s per event of the
    client's default five retries (measured, docs/lineage.md)."""
    return {"type": "http", "url": url, "timeout": 5,
            "retry": {"total": 2, "connect": 2, "read": 2, "backoff_factor": 0.5}}


def transport(settings: Settings, path: Path) -> dict:
    """OpenLineage transport settings (for Airflow's provider): JSON lines appended to
    ``path``, and to lineage_url too when set (a failure to reach it does not stop the file)."""
    if not settings.operations.lineage_url:
        return file_transport(path)
    return {"type": "composite", "continue_on_failure": True,
            "transports": [file_transport(path), http_transport(settings.operations.lineage_url)]}


SPARK_LISTENER = "io.openlineage.spark.agent.OpenLineageSparkListener"


def spark_events_file(settings: Settings, app_name: str) -> Path:
    """Where OpenLineage's Spark listener writes a driver's events (apart from sigflow's own,
    which ``sigflow lineage`` reads)."""
    return settings.lineage_path / "spark" / f"{app_name}.jsonl"


def spark_listener_conf(settings: Settings, app_name: str) -> dict[str, str]:
    """A session's settings for OpenLineage's Spark listener when ``lineage_spark_listener``
    is on: the same namespace and transports as sigflow's own events. The task run Airflow
    injects (``spark.openlineage.parent*``) the listener reads by itself."""
    if not settings.operations.lineage_spark_listener:
        return {}
    path = spark_events_file(settings, app_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    conf = {"spark.extraListeners": SPARK_LISTENER, "spark.openlineage.namespace": NAMESPACE}
    url = settings.operations.lineage_url
    if not url:
        return {**conf, "spark.openlineage.transport.type": "file",
                "spark.openlineage.transport.location": str(path)}
    prefix = "spark.openlineage.transport.transports"
    return {**conf, "spark.openlineage.transport.type": "composite",
            "spark.openlineage.transport.continueOnFailure": "true",
            f"{prefix}.file.type": "file", f"{prefix}.file.location": str(path),
            f"{prefix}.api.type": "http", f"{prefix}.api.url": url}


class RunLineage:
    """The events of one run of one job."""

    def __init__(self, settings: Settings, job: str, inputs: list[tuple[str, str]],
                 tables: dict[str, str], topics_out: list[tuple[str, str]] = (),
                 spark_properties: dict[str, str] | None = None):
        self.settings, self.job = settings, job
        self.inputs, self.tables, self.topics_out = inputs, tables, list(topics_out)
        from openlineage.client.uuid import generate_new_uuid

        self.run_id = str(generate_new_uuid())  # a UUIDv7, as the spec asks
        self.parent = _parent(spark_properties or {})
        self._clients = None

    def start(self) -> None:
        self._emit("START", with_versions=False)

    def complete(self) -> None:
        self._emit("COMPLETE", with_versions=True)

    def fail(self, message: str) -> None:
        self._emit("FAIL", with_versions=True, error=message)

    def _clients_for(self) -> list[tuple[str, object]]:
        """(where, client): the events file, then lineage_url when set. Each is sent on its
        own, so a failure names which one and the other still gets the event."""
        from openlineage.client import OpenLineageClient

        if self._clients is None:
            path = events_file(self.settings, self.job)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._clients = [(str(path), OpenLineageClient(config={"transport": file_transport(path)}))]
            url = self.settings.operations.lineage_url
            if url:
                self._clients.append((url, OpenLineageClient(config={"transport": http_transport(url)})))
        return self._clients

    def _emit(self, state: str, with_versions: bool, error: str | None = None) -> None:
        try:
            event = self._event(state, with_versions, error)
            clients = self._clients_for()
        except Exception as exc:  # lineage is a report of the run, never a reason to fail it
            log.warning("%s: its OpenLineage %s event was not made (%s); the job goes on", self.job, state, _short(exc))
            return
        for where, client in clients:
            try:
                client.emit(event)
            except Exception as exc:
                log.warning("%s: its OpenLineage %s event did not reach %s (%s); the job goes on",
                            self.job, state, where, _short(exc))

    def _event(self, state: str, with_versions: bool, error: str | None):
        from openlineage.client.event_v2 import (
            InputDataset,
            Job,
            OutputDataset,
            Run,
            RunEvent,
            RunState,
        )
        from openlineage.client.facet_v2 import (
            dataset_version_dataset,
            error_message_run,
            job_type_job,
        )

        run_facets = {}
        if self.parent:
            run_facets["parent"] = self.parent
        if error:
            run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
                message=error[:2000], programmingLanguage="python")
        outputs = []
        for name, uri in self.tables.items():
            facets = {}
            version = _version(uri) if with_versions else None
            if version is not None:
                facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(version))
            namespace, path = table_dataset(uri)
            outputs.append(OutputDataset(namespace=namespace, name=path, facets=facets))
        outputs += [OutputDataset(namespace=namespace, name=name) for namespace, name in self.topics_out]
        return RunEvent(
            eventType=getattr(RunState, state),
            eventTime=datetime.now(timezone.utc).isoformat(),
            run=Run(runId=self.run_id, facets=run_facets),
            job=Job(namespace=NAMESPACE, name=self.job, facets={"jobType": job_type_job.JobTypeJobFacet(
                processingType="STREAMING", integration="SPARK", jobType="JOB")}),
            inputs=[InputDataset(namespace=namespace, name=name) for namespace, name in self.inputs],
            outputs=outputs,
            producer=PRODUCER,
        )


def _short(exc: BaseException) -> str:
    """The innermost cause's first line: "Connection refused", not urllib3's retry story."""
    while exc.__cause__ is not None or (exc.__context__ is not None and not exc.__suppress_context__):
        exc = exc.__cause__ or exc.__context__
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text.rsplit("] ", 1)[-1].rstrip("')\"")[:200]


def _version(uri: str) -> int | None:
    """The table's version, or None when it cannot be read now (the event goes without it)."""
    try:
        return table_access.table_version(uri)
    except Exception as exc:
        log.warning("lineage: the version of %s was not read (%s)", uri, str(exc).splitlines()[0] if str(exc) else exc)
        return None


def _parent(properties: dict[str, str]):
    """The Airflow task run (and DAG run, the root) from the Spark properties, if any."""
    from openlineage.client.facet_v2 import parent_run

    value = {key: properties.get(f"spark.openlineage.{key}") for key in PARENT_PROPERTIES}
    if not (value["parentRunId"] and value["parentJobName"] and value["parentJobNamespace"]):
        return None
    root = None
    if value["rootParentRunId"] and value["rootParentJobName"]:
        root = parent_run.Root(
            run=parent_run.RootRun(runId=value["rootParentRunId"]),
            job=parent_run.RootJob(namespace=value["rootParentJobNamespace"] or value["parentJobNamespace"],
                                   name=value["rootParentJobName"]))
    return parent_run.ParentRunFacet(
        run=parent_run.Run(runId=value["parentRunId"]),
        job=parent_run.Job(namespace=value["parentJobNamespace"], name=value["parentJobName"]), root=root)
