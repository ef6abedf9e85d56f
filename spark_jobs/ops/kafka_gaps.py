"""Records Kafka no longer holds that a job has not read: retention (or a deletion of
records) passed the offset its next batch starts at, or the topic was deleted and created
again. Its next run stops on them (Spark's failOnDataLoss), or skips them with
fail_on_data_loss off; `sigflow status` says which, before it runs."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from spark_jobs.config import Settings
from spark_jobs.errors import CheckpointDamaged
from spark_jobs.runtime.checkpoint.directory import Checkpoint


@dataclass(frozen=True)
class KafkaGap:
    """Offsets of one partition a job has not read that Kafka no longer holds."""

    topic: str
    partition: int
    read_to: int  # the offset the job's next batch starts at
    earliest: int  # Kafka's first offset there now
    end: int

    @property
    def recreated(self) -> bool:
        return self.read_to > self.end

    @property
    def records(self) -> int:
        return 0 if self.recreated else self.earliest - self.read_to

    @property
    def name(self) -> str:
        return f"{self.topic}[{self.partition}]"

    def describe(self) -> str:
        if self.recreated:
            return (f"{self.name} ends at offset {self.end:,}, before {self.read_to:,} where the job had read "
                    "to: the topic was deleted and created again")
        return f"{self.name} offsets {self.read_to:,} to {self.earliest - 1:,}"


def gaps(topics: Iterable[str], committed: dict[str, dict[str, int]],
         in_kafka: Callable[[str], dict[int, tuple[int, int]]]) -> list[KafkaGap]:
    """Each partition of ``topics`` where the offset the job's next batch starts at
    (``committed``: topic -> partition -> offset) is not in Kafka (``in_kafka``: a topic ->
    each partition's earliest and end offsets)."""
    found = []
    for topic in topics:
        for p, (earliest, end) in in_kafka(topic).items():
            read_to = committed.get(topic, {}).get(str(p))
            if read_to is not None and not earliest <= int(read_to) <= end:
                found.append(KafkaGap(topic, p, int(read_to), earliest, end))
    return found


def raw_holds(settings: Settings, job: str, found: list[KafkaGap]) -> bool:
    """Whether ingest's committed batches read every record of the gaps into
    device_events_raw (none is a topic made again)."""
    if job == "ingest" or any(gap.recreated for gap in found):
        return False
    wanted: dict[str, dict[int, int]] = {}
    for gap in found:
        wanted.setdefault(gap.topic, {})[gap.partition] = gap.earliest
    try:
        return Checkpoint(settings.checkpoint_uri("ingest")).committed_through(wanted)
    except CheckpointDamaged:
        return False


def described(job: str, found: list[KafkaGap], fail_on_data_loss: bool, in_raw: bool) -> tuple[str, str]:
    """What became of the records, and what gives them back: (reason, next step). ``in_raw``:
    device_events_raw holds them (``raw_holds``), so a recover from raw gives the job every one."""
    counted = sum(gap.records for gap in found)
    reason = (f"Kafka no longer holds {f'{counted:,} records' if counted else 'records'} it has not read: "
              + "; ".join(gap.describe() for gap in found))
    if not fail_on_data_loss:
        return f"{reason}; its next batch skips them (fail_on_data_loss is off), logging each range", ""
    reason += "; its next run stops on them"
    if in_raw:
        return (f"{reason}; ingest read them into device_events_raw",
                f"`sigflow checkpoint recover {job} --from raw --force`, its plan first "
                "(docs/runbooks/recompute-beyond-retention.md)")
    return reason, ("produce them again if their source can, or accept the gap: "
                    f"`SIGFLOW_FAIL_ON_DATA_LOSS=false sigflow run {job}` once (docs/runbooks/checkpoint-lost-or-corrupt.md)")
