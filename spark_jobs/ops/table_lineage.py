"""`sigflow lineage TABLE`: which job, which Airflow DAG run and which Kafka topics produced
a table, up to which version, from the OpenLineage events under lineage_dir (the jobs'
own, ``runtime/lineage_events.py``, and Airflow's when its OpenLineage provider writes there)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from spark_jobs.config import Settings
from spark_jobs.contracts.tables import ALL_TABLES
from spark_jobs.errors import ConfigError
from spark_jobs.runtime.lineage_events import table_dataset

log = logging.getLogger("sigflow.lineage")


@dataclass
class TableRun:
    """One finished run of a job that wrote the table."""

    job: str
    run_id: str
    ended: str
    version: str | None
    topics: list[str]  # "kafka://host:port/topic"
    airflow_task: str | None = None  # "dag.task" that started it
    dag_run: str | None = None  # the Airflow DAG run id, when Airflow's events say it


@dataclass
class TableLineage:
    table: str
    dataset: str
    runs: list[TableRun] = field(default_factory=list)
    skipped: int = 0  # event lines that were not JSON (a file cut mid-line)

    def lines(self, limit: int = 5) -> list[str]:
        if not self.runs:
            return [f"{self.table} ({self.dataset}): no run of a job that wrote it has reported lineage yet"]
        newest = self.runs[0]
        out = [f"{self.table} ({self.dataset}): version {newest.version or '?'}, written by {newest.job}"]
        for run in self.runs[:limit]:
            out.append(f"  {run.job} run {run.run_id} ended {run.ended}: table at version {run.version or '?'}")
            out.append(f"    read {', '.join(run.topics) or 'no topic'}")
            if run.airflow_task:
                out.append(f"    started by Airflow task {run.airflow_task}"
                           + (f", DAG run {run.dag_run}" if run.dag_run else ""))
        if len(self.runs) > limit:
            out.append(f"  ({len(self.runs) - limit} earlier runs)")
        if self.skipped:
            out.append(f"  ({self.skipped} unreadable event lines skipped)")
        return out


def _events(directory: Path, lineage: TableLineage) -> Iterator[dict[str, Any]]:
    for path in sorted(directory.glob("*.jsonl")):
        with path.open() as lines:
            for line in lines:
                try:
                    yield json.loads(line)
                except ValueError:
                    lineage.skipped += 1


def table_lineage(settings: Settings, table: str) -> TableLineage:
    if table not in ALL_TABLES:
        raise ConfigError(f"no table {table!r}", f"tables: {', '.join(ALL_TABLES)} (docs/tables.md)")
    namespace, name = table_dataset(settings.table_uri(table))
    lineage = TableLineage(table, f"{namespace} {name}")
    events = list(_events(settings.lineage_path, lineage)) if settings.lineage_path.is_dir() else []
    dag_runs = {event["run"]["runId"]: run_id for event in events if (run_id := _airflow_dag_run(event))}
    for event in events:
        if event.get("eventType") != "COMPLETE":
            continue
        written = [o for o in event.get("outputs") or [] if (o.get("namespace"), o.get("name")) == (namespace, name)]
        if not written:
            continue
        version = ((written[0].get("facets") or {}).get("version") or {}).get("datasetVersion")
        parent = (event["run"].get("facets") or {}).get("parent") or {}
        parent_run = (parent.get("run") or {}).get("runId")
        lineage.runs.append(TableRun(
            job=event["job"]["name"], run_id=event["run"]["runId"], ended=event["eventTime"][:19] + "Z",
            version=version,
            topics=[f"{i['namespace']}/{i['name']}" for i in event.get("inputs") or []
                    if i.get("namespace", "").startswith("kafka://")],
            airflow_task=(parent.get("job") or {}).get("name"),
            dag_run=dag_runs.get(parent_run),
        ))
    lineage.runs.sort(key=lambda run: run.ended, reverse=True)
    return lineage


def _airflow_dag_run(event: dict[str, Any]) -> str | None:
    """The DAG run id Airflow's OpenLineage provider puts in a task run's event."""
    facets = (event.get("run") or {}).get("facets") or {}
    for key in ("airflow", "airflowDagRun"):
        dag_run = (facets.get(key) or {}).get("dagRun") or {}
        if dag_run.get("run_id"):
            return dag_run["run_id"]
    return None
