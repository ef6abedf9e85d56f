"""What a job is: a pure plan over input streams, and a pure split of each micro-batch.

Sources, sinks, triggers and checkpoints are wired around a job in ``spark_jobs.runtime.runner``
only, so the same job runs in tests, in the embedded mode and on a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from pyspark.sql import DataFrame

from spark_jobs.config import StreamingSettings
from spark_jobs.contracts.tables import TableSpec


@dataclass(frozen=True)
class BatchContext:
    """What the runner knows about the micro-batch being written."""

    job: str
    batch_id: int
    watermark_ms: int  # the watermark in force while this batch ran (offset log entry)
    batch_timestamp_ms: int  # Spark's batch timestamp: stable when a batch is replayed
    kafka_end_offsets: dict = field(default_factory=dict)
    cached: list = field(default_factory=list, compare=False)
    previous_watermark_ms: int = 0  # the watermark of the batch before (0: none)
    # a table of the job as committed before this batch (the runner reads it from Delta)
    read_table: Callable[[str], DataFrame] | None = field(default=None, compare=False)

    def cache(self, frame: DataFrame) -> DataFrame:
        """Persist a frame that several of the batch's tables read (ingest parses each record
        once for its valid and its quarantined rows); the runner unpersists it after the
        writes."""
        frame = frame.persist()
        self.cached.append(frame)
        return frame


@dataclass(frozen=True)
class StreamingJob:
    name: str
    summary: str
    topics: Callable[[StreamingSettings], list[str]]
    # streaming Kafka records -> the streaming result of the job (stateful operators live here)
    build: Callable[[StreamingSettings, DataFrame], DataFrame]
    # one micro-batch of that result -> rows per output table
    split: Callable[[StreamingSettings, DataFrame, BatchContext], dict[str, DataFrame]]
    tables: tuple[TableSpec, ...]
    # Kafka records of one batch + the watermark it ran with -> the records it dropped as late,
    # in late_events' columns plus `missed`, what they missed (None: the job drops nothing late)
    late_rule: Callable[[StreamingSettings, DataFrame, int], DataFrame] | None = None
    # keeps state across batches (windows, dedup ids, sessions, join buffers): a checkpoint
    # rebuilt from Delta metadata starts that state empty
    stateful: bool = True
    # settings the checkpoint's state was built with: changing one needs a new checkpoint
    checkpoint_settings: tuple[str, ...] = ()
    # the layout of the job's state: raised when the code changes it, so a checkpoint built
    # with the old layout is refused with the runbook instead of failing in the JVM
    state_format: int = 1
    # branches that each push every record through the same operators (windowed-averages
    # with windows not made of panes: one dedup per window kind); job-level counts take one
    # branch's share (metrics.Counting)
    branches: Callable[[StreamingSettings], int] = lambda settings: 1


@dataclass(frozen=True)
class RealTimeJob:
    """A stateless job run in Spark's real-time mode: records flow from Kafka to a Kafka
    topic as they arrive, with no micro-batch to wait for and no table written."""

    name: str
    summary: str
    topics: Callable[[StreamingSettings], list[str]]
    # streaming Kafka records -> rows of ``key`` and ``value`` for the output topic
    build: Callable[[StreamingSettings, DataFrame], DataFrame]
    output_topic: Callable[[StreamingSettings], str]
    tables: tuple[TableSpec, ...] = ()
    stateful: bool = False
    checkpoint_settings: tuple[str, ...] = ()
    state_format: int = 1
