"""A re-run that reads device_events_raw where Kafka's retention removed what it needs: what
it will read, and why it cannot (a recover from raw, a rewind past retention)."""

from __future__ import annotations

from dataclasses import dataclass

from spark_jobs.config import Settings
from spark_jobs.contracts.tables import DEVICE_EVENTS, DEVICE_EVENTS_RAW
from spark_jobs.jobs.base import StreamingJob
from spark_jobs.jobs.ingest import INGEST
from spark_jobs.ops.restart.plan import Plan, kafka_bounds
from spark_jobs.runtime.replay.extent import Offsets, RawExtent, hand_off_gaps


def reads_raw(job: StreamingJob) -> bool:
    """Whether a re-run of the job can read raw: every job but ingest, which writes it."""
    return job.name != INGEST.name


@dataclass(frozen=True)
class Replay:
    """A re-run's batches over device_events_raw's records, ``extent``, then Kafka from
    ``until`` (where raw ends, per partition Kafka has)."""

    extent: RawExtent
    until: Offsets


def plan_replay(settings: Settings, job: StreamingJob, start: Offsets, plan: Plan,
                raw_version: int | None) -> Replay | None:
    """What a re-run from ``start`` ({}: each partition's offset 0) reads from raw, or None
    with the plan's refusals: raw must hold each partition from ``start``, and Kafka every
    record from where raw ends. Not for ingest, which writes raw (``reads_raw``)."""
    topics = job.topics(settings.streaming)
    bounds = kafka_bounds(settings, topics)
    extent = RawExtent.of(settings.table_uri(DEVICE_EVENTS_RAW.name), topics, after=start, version=raw_version)
    extent.read_event_times(settings.table_uri(DEVICE_EVENTS.name))
    if not extent.rows:
        plan.refuse(f"device_events_raw holds no record of {', '.join(topics)} to re-run from: use --from earliest")
        return None
    for gap in hand_off_gaps(extent, start, bounds):
        plan.refuse(gap)
    until = {topic: {str(p): extent.end.get(topic, {}).get(str(p), int(start.get(topic, {}).get(str(p), 0)))
                     for p in sorted(parts)}
             for topic, parts in bounds.items()}
    return Replay(extent, until)
