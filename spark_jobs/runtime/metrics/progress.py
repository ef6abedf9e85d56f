"""Per-batch figures from Spark's query progress -> rows of the pipeline_metrics table."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

from pyspark.sql.streaming import StreamingQueryListener

from spark_jobs.jobs.late_rows import OBSERVATION_PREFIX

QUERY_PREFIX = "sigflow_"  # query names are sigflow_<job>


def query_name(job: str) -> str:
    """The streaming query's name of a job: how its progress and its batch's plan are found."""
    return f"{QUERY_PREFIX}{job}"

progress_log = logging.getLogger("sigflow.progress")
batch_log = logging.getLogger("sigflow.batches")  # the same, as a sentence for people


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True)
class Counting:
    """How one batch's progress of a job turns into job-level figures, decided in one place.

    ``scans``: how many times the plan reads its source. Spark's numInputRows counts the rows
    of every scan (measured, Spark 4.2): a job that reads its topics in two branches
    (alert-join: events and alerts; windowed-averages with windows not made of panes:
    tumbling and sliding) reports every Kafka record twice. ``branches``: how many branches
    push every record through the same operators (that windowed-averages: a dedup per window
    kind). Each of their dedup operators
    drops the same duplicates and late rows, so a job-level count takes one branch's share.
    """

    scans: int = 1
    branches: int = 1


def source_scans(frame) -> int:
    """How many times one batch of ``frame`` reads its source (see Counting)."""
    leaves = frame._jdf.queryExecution().logical().collectLeaves()
    return max(1, sum(1 for i in range(leaves.size()) if leaves.apply(i).isStreaming()))


def batch_in_flight(spark, query_name: str):
    """The JVM's execution of ``query_name``'s batch in flight (its plan, and once the plan
    has run, its metrics and observations); None when the query or its plan is not found."""
    jvm_session = spark._jsparkSession  # noqa: SLF001
    queries = jvm_session.streams().active()
    query = next((q for q in queries if q.name() == query_name), None)
    return query.streamingQuery().lastExecution() if query is not None else None


def rows_dropped_by_watermark(spark, query_name: str) -> int | None:
    """The rows the stateful operators of ``query_name``'s batch in flight dropped as late,
    once that batch's plan has run: Spark's own ``numRowsDroppedByWatermark``, read from the
    batch's executed plan (the figure its progress reports after the batch). None when the
    query or its plan is not found."""
    execution = batch_in_flight(spark, query_name)
    if execution is None:
        return None
    dropped, found, nodes = 0, False, [execution.executedPlan()]
    while nodes:
        node = nodes.pop()
        metric = node.metrics().get("numRowsDroppedByWatermark")
        if metric.isDefined():
            found = True
            dropped += metric.get().value()
        children = node.children()
        nodes.extend(children.apply(i) for i in range(children.size()))
    return dropped if found else None


def operator_figures(progress: dict[str, Any]) -> list[dict[str, Any]]:
    """Each stateful operator's own figures, in Spark's order."""
    return [
        {"operator": op.get("operatorName"), "state_rows": int(op.get("numRowsTotal") or 0),
         "memory_bytes": int(op.get("memoryUsedBytes") or 0),
         "dropped_by_watermark": int(op.get("numRowsDroppedByWatermark") or 0),
         "duplicates_dropped": int((op.get("customMetrics") or {}).get("numDroppedDuplicateRows") or 0)}
        for op in progress.get("stateOperators") or []
    ]


def progress_row(
    job: str, progress: dict[str, Any], output_rows: int, late_events: int, counting: Counting = Counting()
) -> dict[str, Any]:
    operators = operator_figures(progress)
    watermark = (progress.get("eventTime") or {}).get("watermark")
    return {
        "job": job,
        "batch_id": int(progress["batchId"]),
        "batch_time": _time(progress.get("timestamp")),
        "input_rows": int(progress.get("numInputRows") or 0) // counting.scans,  # Kafka records
        "output_rows": output_rows,
        "rows_dropped_by_watermark": sum(op["dropped_by_watermark"] for op in operators) // counting.branches,
        "duplicates_dropped": sum(op["duplicates_dropped"] for op in operators) // counting.branches,
        "late_events": late_events,
        # all the state the job holds, every operator's (per operator: progress_line)
        "state_rows": sum(op["state_rows"] for op in operators),
        "state_memory_bytes": sum(op["memory_bytes"] for op in operators),
        "watermark": _time(watermark),
        "duration_ms": int((progress.get("durationMs") or {}).get("triggerExecution") or 0),
        "input_rows_per_second": float(progress.get("inputRowsPerSecond") or 0.0) / counting.scans,
        "processed_rows_per_second": float(progress.get("processedRowsPerSecond") or 0.0) / counting.scans,
        "progress_json": json.dumps(_late_rows_counted(progress)),
    }


def _late_rows_counted(progress: dict[str, Any]) -> dict[str, Any]:
    """The progress with each late-rows observation's rows as their number: the rows are in
    late_events, and would make each metrics row as large as the batch's late events."""
    observed = progress.get("observedMetrics") or {}
    if not any(name.startswith(OBSERVATION_PREFIX) for name in observed):
        return progress
    counted = {name: {**values, "rows": len(values.get("rows") or [])} if name.startswith(OBSERVATION_PREFIX) else values
               for name, values in observed.items()}
    return {**progress, "observedMetrics": counted}


def progress_dicts(query, after_batch: int = -1) -> Iterable[dict[str, Any]]:
    """Progress of the batches after ``after_batch`` that ran (idle reports, without addBatch,
    are skipped). Only those are turned into JSON: a batch's progress carries the late rows
    its plan observed (jobs/late_rows.py), too many to read again at every batch."""
    for progress in query._jsq.recentProgress():  # noqa: SLF001
        if progress.batchId() <= after_batch:
            continue
        parsed = json.loads(progress.json())
        if "addBatch" in (parsed.get("durationMs") or {}):
            yield parsed


def last_batch_id(query) -> int:
    """The newest progress's batch id, without reading any progress whole (-1: none yet)."""
    latest = query._jsq.lastProgress()  # noqa: SLF001
    return -1 if latest is None else int(latest.batchId())


def progress_line(job: str, progress: dict[str, Any], counting: Counting = Counting()) -> dict[str, Any]:
    """One batch as a JSON log line: the pipeline_metrics figures plus what a table row
    flattens away (figures per operator, offsets per source, records behind per partition)."""
    row = progress_row(job, progress, output_rows=0, late_events=0, counting=counting)
    line = {k: v for k, v in row.items() if k not in ("progress_json", "output_rows", "late_events")}
    line["batch_time"] = progress.get("timestamp")
    line["watermark"] = (progress.get("eventTime") or {}).get("watermark")
    line["state_operators"] = operator_figures(progress)
    line["sources"] = [
        {"source": source.get("description"), "end_offsets": _offsets(source.get("endOffset")),
         "lag": _lag(_offsets(source.get("endOffset")), _offsets(source.get("latestOffset")))}
        for source in progress.get("sources") or []
    ]
    return {"event": "batch_progress", **line}


def end_offsets(progress: dict[str, Any]) -> dict:
    """The batch's end offsets, every source's together: {topic: {partition: offset}}."""
    ends = {}
    for source in progress.get("sources") or []:
        ends.update(_offsets(source.get("endOffset")) or {})
    return ends


def reached_latest(progress: dict[str, Any]) -> bool:
    """Whether the batch read every source up to the latest offsets Kafka had when the batch
    was planned (after its trigger began): False for a batch max_offsets_per_trigger cut
    short, and when a source does not report its latest offsets."""
    lags = _source_lags(progress)
    return bool(lags) and all(lag is not None and not any(lag.values()) for lag in lags)


def records_behind(progress: dict[str, Any]) -> int | None:
    """Records in Kafka past the batch's end, all sources together; None when no source
    reports its latest offsets."""
    known = [sum(lag.values()) for lag in _source_lags(progress) if lag is not None]
    return sum(known) if known else None


def progress_sentence(line: dict[str, Any]) -> str:
    """A progress line as people read it: counts, rate, watermark, state, records behind."""
    seconds = line["duration_ms"] / 1000
    rate = line["input_rows"] / seconds if seconds > 0 else 0.0
    behind = [sum(lag.values()) for source in line["sources"] if (lag := source.get("lag")) is not None]
    parts = [f"{line['job']} batch {line['batch_id']}: {line['input_rows']:,} records in {seconds:.1f} s "
             f"({rate:,.0f}/s)"]
    if line["watermark"]:
        parts.append(f"watermark {line['watermark']}")
    if line["state_operators"]:
        parts.append(f"{line['state_rows']:,} state rows")
    if line["rows_dropped_by_watermark"]:
        parts.append(f"{line['rows_dropped_by_watermark']:,} dropped late")
    if line["duplicates_dropped"]:
        parts.append(f"{line['duplicates_dropped']:,} duplicates removed")
    if behind:
        parts.append(f"{sum(behind):,} records behind in Kafka")
    return ", ".join(parts)


def _offsets(value) -> dict | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def _source_lags(progress: dict[str, Any]) -> list[dict[str, int] | None]:
    """Each source's records behind per partition (``_lag``), in the progress's source order."""
    return [_lag(_offsets(source.get("endOffset")), _offsets(source.get("latestOffset")))
            for source in progress.get("sources") or []]


def _lag(end: dict | None, latest: dict | None) -> dict[str, int] | None:
    """Records behind per "topic[partition]", when the source reports its latest offsets."""
    if not end or not latest:
        return None
    return {
        f"{topic}[{partition}]": max(int(latest_offset) - int(end.get(topic, {}).get(partition, 0)), 0)
        for topic, partitions in latest.items() if isinstance(partitions, dict)
        for partition, latest_offset in partitions.items()
    }


class ProgressLog(StreamingQueryListener):
    """Every finished batch of a sigflow query: one JSON line appended to the job's progress
    file (and logged on ``sigflow.progress``, which ``sigflow --json`` shows), and one
    sentence for people on ``sigflow.batches``.

    The listener bus is asynchronous: a batch's event can arrive after the query has
    stopped. pipeline_metrics is therefore written from the query's ``recentProgress``,
    which is complete when the run returns; both come from the same ``progress_row``. A run
    waits for its last batch's line (``wait_for``) before it returns, so a process that
    exits right after a run still logs every batch.
    """

    def __init__(self):
        super().__init__()
        self.counting: dict[str, Counting] = {}  # job -> how its progress is counted
        self.files: dict[str, Path] = {}  # job -> its JSON lines file
        self.logged: dict[str, int] = {}  # job -> the newest batch id of this run logged
        self.delivered = threading.Condition()

    def follow(self, job: str, counting: Counting, progress_file: Path) -> None:
        """Count and file this job's batches so (one session runs many jobs in turn)."""
        self.counting[job] = counting
        self.files[job] = progress_file
        with self.delivered:
            self.logged[job] = -1  # batch ids start again with each checkpoint

    def wait_for(self, job: str, batch_id: int, timeout_s: float = 30) -> bool:
        """Whether the job's batch ``batch_id`` was logged within ``timeout_s``."""
        with self.delivered:
            return self.delivered.wait_for(lambda: self.logged.get(job, -1) >= batch_id, timeout_s)

    @property
    def _jlistener(self):
        """What Spark calls: ``_ProgressJson`` in place of PySpark's adapter, which turns
        every event into Python objects first. Each Java map it copies ends in a Java
        exception that PySpark converts with dozens of py4j calls, most of them failed class
        lookups through every JAR: measured at 5% of the driver JVM's samples in `make run`."""
        if not hasattr(self, "_jlistenerobj"):
            from pyspark import SparkContext

            self._jlistenerobj = SparkContext._jvm.PythonStreamingQueryListenerWrapper(_ProgressJson(self))  # noqa: SLF001
        return self._jlistenerobj

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        self.log_progress(event.progress.json)

    def log_progress(self, progress_json: str) -> None:
        progress = json.loads(progress_json)
        name = progress.get("name") or ""
        if name.startswith(QUERY_PREFIX) and "addBatch" in (progress.get("durationMs") or {}):
            job = name[len(QUERY_PREFIX):]
            line = progress_line(job, progress, self.counting.get(job, Counting()))
            text = json.dumps(line, default=str)
            if job in self.files:
                self.files[job].parent.mkdir(parents=True, exist_ok=True)
                with self.files[job].open("a") as out:
                    out.write(text + "\n")
            progress_log.info(text)
            batch_log.info(progress_sentence(line))
            with self.delivered:
                self.logged[job] = max(self.logged.get(job, -1), int(progress["batchId"]))
                self.delivered.notify_all()

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass


class _ProgressJson:
    """Spark's ``PythonStreamingQueryListener``, implemented through py4j: hands each
    progress event's JSON to the ``ProgressLog`` (two py4j calls an event)."""

    def __init__(self, progress_log: ProgressLog):
        self.progress_log = progress_log

    def onQueryStarted(self, jevent) -> None:
        pass

    def onQueryProgress(self, jevent) -> None:
        self.progress_log.log_progress(jevent.progress().json())

    def onQueryIdle(self, jevent) -> None:
        pass

    def onQueryTerminated(self, jevent) -> None:
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def listen(spark) -> ProgressLog:
    """Register the progress log once per SparkSession."""
    if not getattr(spark, "_sigflow_progress_log", None):
        spark._sigflow_progress_log = ProgressLog()
        spark.streams.addListener(spark._sigflow_progress_log)
    return spark._sigflow_progress_log
