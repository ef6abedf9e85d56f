"""What Spark's own metrics cannot say, in Prometheus's exposition format: each job's
verdict and whether it runs, records behind in Kafka, the time of its last committed batch,
its counts (late events, rows in and out) and quarantined records per reason.

An exporter in Prometheus's sense: every scrape reads the checkpoints, the lease, Kafka and
the pipeline_metrics and quarantined_events tables (as `sigflow status` does), so it answers
for jobs run anywhere (the CLI, Airflow, a cluster) and while they are down. Spark's own
metrics (each query's rates, latency and watermark) come from the driver itself
(``spark_jobs.runtime.spark``). The alert rules over both: infra/prometheus/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from spark_jobs.config import Settings
from spark_jobs.contracts.reasons import REASON_CODES

# Not `job`: Prometheus gives that label to the scrape target's job name.
JOB_LABEL = "sigflow_job"
VERDICTS = ("OK", "LAGGING", "STALLED", "FAILED", "NEVER RUN", "DAMAGED", "TABLE LOST", "CHECKPOINT LOST",
            "DATA LOSS", "RESTART UNFINISHED", "SETTINGS CHANGED", "PRODUCER CLOCK")
# pipeline_metrics column -> counter name and help
COUNTS = {
    "input_rows": ("sigflow_input_records_total", "Records read from Kafka by committed batches"),
    "output_rows": ("sigflow_output_records_total", "Rows the job wrote to its tables"),
    "late_events": ("sigflow_late_events_total", "Records that came after the watermark passed them"),
    "rows_dropped_by_watermark": ("sigflow_dropped_by_watermark_total", "Rows Spark's watermark dropped"),
    "duplicates_dropped": ("sigflow_duplicates_dropped_total", "Re-sent records dropped as duplicates"),
}


class SigflowCollector(Collector):
    def __init__(self, settings: Settings):
        from spark_jobs.ops.metrics_totals import MetricsTotals

        self.settings = settings
        # kept across scrapes: each reads only the pipeline_metrics files added since the last
        self.totals = MetricsTotals(settings, ("rows_dropped_by_watermark", *COUNTS))

    def collect(self) -> Iterator[Metric]:
        from spark_jobs.ops import status

        metrics = self.totals.refresh()
        jobs = status.all_status(self.settings, metrics=metrics)
        up = GaugeMetricFamily("sigflow_job_up", "1 while a run of the job holds its checkpoint lease",
                               labels=[JOB_LABEL])
        verdict = GaugeMetricFamily("sigflow_job_status", "1 for the job's verdict in `sigflow status`",
                                    labels=[JOB_LABEL, "status"])
        behind = GaugeMetricFamily("sigflow_kafka_records_behind",
                                   "Records in Kafka the job has not committed (absent while Kafka is unreachable)",
                                   labels=[JOB_LABEL])
        batch = GaugeMetricFamily("sigflow_last_batch_id", "The job's last committed batch", labels=[JOB_LABEL])
        batch_time = GaugeMetricFamily("sigflow_last_batch_timestamp_seconds",
                                       "When the job's last committed batch started", labels=[JOB_LABEL])
        watermark = GaugeMetricFamily("sigflow_watermark_timestamp_seconds",
                                      "The job's event-time watermark after its last batch", labels=[JOB_LABEL])
        waiting = GaugeMetricFamily("sigflow_late_events_waiting",
                                    "Late events sigflow reconcile has not decided on yet", labels=[JOB_LABEL])
        reconciled = GaugeMetricFamily("sigflow_last_reconcile_timestamp_seconds",
                                       "When sigflow reconcile last decided on a late event of the job",
                                       labels=[JOB_LABEL])
        for job in jobs:
            if job.late_backlog is not None:
                waiting.add_metric([job.job], float(job.late_backlog.waiting))
                if job.late_backlog.last_reconciled is not None:
                    reconciled.add_metric([job.job], job.late_backlog.last_reconciled.timestamp())
            up.add_metric([job.job], 1.0 if job.running_pid else 0.0)
            for word in VERDICTS:
                verdict.add_metric([job.job, word], 1.0 if job.verdict and job.verdict.word == word else 0.0)
            if job.behind is not None:
                behind.add_metric([job.job], float(job.behind))
            if job.last_batch is not None:
                batch.add_metric([job.job], float(job.last_batch))
                batch_time.add_metric([job.job], job.last_batch_ms / 1000)
            if job.watermark_ms:
                watermark.add_metric([job.job], job.watermark_ms / 1000)
        yield from (up, verdict, behind, batch, batch_time, watermark, waiting, reconciled)
        yield GaugeMetricFamily("sigflow_trigger_interval_seconds", "The processing-time trigger of long-running jobs",
                                value=self.settings.streaming.trigger_interval.seconds)
        yield from self._counts(metrics)
        yield self._quarantined()

    def _counts(self, metrics) -> Iterator[Metric]:
        batches = CounterMetricFamily("sigflow_batches", "Committed batches recorded in pipeline_metrics",
                                      labels=[JOB_LABEL])
        families = {column: CounterMetricFamily(name.removesuffix("_total"), text, labels=[JOB_LABEL])
                    for column, (name, text) in COUNTS.items()}
        for job, figures in metrics.items():
            batches.add_metric([job], float(figures.batches))
            for column, family in families.items():
                family.add_metric([job], float(figures.sums[column]))
        yield batches
        yield from families.values()

    def _quarantined(self) -> Metric:
        from spark_jobs.ops.quarantine import counts_by_reason

        family = CounterMetricFamily("sigflow_quarantined_records", "Records quarantined by ingest, per reason code",
                                     labels=["reason"])
        counts = counts_by_reason(self.settings)
        # every code from the start: a series that first appears at N shows Prometheus no increase
        for reason in (*REASON_CODES, *sorted(set(counts) - set(REASON_CODES))):
            family.add_metric([reason], float(counts.get(reason, 0)))
        return family


def registry(settings: Settings) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SigflowCollector(settings))
    return registry


def exposition(settings: Settings) -> str:
    """One scrape's text: what `sigflow metrics` prints."""
    from prometheus_client import generate_latest

    return generate_latest(registry(settings)).decode()


@dataclass
class Exporter:
    url: str
    server: object
    thread: object

    def stop(self) -> None:
        self.server.shutdown()
        self.thread.join()


def serve(settings: Settings) -> Exporter:
    """Serve the metrics on ``metrics_host:metrics_port`` (/metrics) from a background thread."""
    from prometheus_client import start_http_server

    from spark_jobs.errors import ConfigError

    try:
        server, thread = start_http_server(settings.operations.metrics_port, settings.operations.metrics_host, registry(settings))
    except OSError as exc:
        raise ConfigError(f"cannot serve metrics on {settings.operations.metrics_host}:{settings.operations.metrics_port}: {exc.strerror}",
                          "set SIGFLOW_METRICS_PORT to a free port") from None
    host, port = server.server_address[:2]
    return Exporter(f"http://{host}:{port}/metrics", server, thread)
