"""What a job checks in its checkpoint before it starts: no restart left half done, the
offset log entries its query starts from readable, and the settings its state was built
with unchanged. Each refusal names the fix."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from spark_jobs.config import Settings
from spark_jobs.errors import CheckpointDamaged, NeedsRestart, SigflowError
from spark_jobs.jobs.base import StreamingJob
from spark_jobs.runtime.checkpoint.directory import (
    RECOVER_HINT,
    Checkpoint,
    recover_hint,
)
from spark_jobs.runtime.kafka.admin import BROKER_TIME


def check_no_unfinished_restart(checkpoint: Checkpoint, job: str) -> None:
    """A restart whose apply stopped half way (its process died) left its intent beside the
    checkpoint: the job runs only once the same restart has been applied again. A rewind an
    older sigflow left half done is marked in sigflow.json instead, and refused alike."""
    intent = checkpoint.restart_intent()
    if intent is not None:
        raise NeedsRestart(
            f"{job}: a {intent.action} of its checkpoint did not finish ({len(intent.steps)} steps "
            "planned); running now could skip or repeat rows",
            f"finish it first: `{intent.finishing_command()}` (its plan lists what is left)",
        )
    pending = checkpoint.legacy_pending_rewind()
    if pending is not None:
        raise NeedsRestart(
            f"{job}: a rewind to batch {pending} did not finish",
            f"finish it first: sigflow checkpoint rewind {job} --to-batch {pending} --yes",
        )


def check_readable(checkpoint: Checkpoint, job: str) -> None:
    """The offset log entries a query reads as it starts (its last two planned batches and its
    last committed one): a damaged one is refused here, naming the job's fix, where Spark
    failed the query with its JSON parser's error."""
    last = checkpoint.last_committed()
    with naming_the_job(job):
        for batch_id in {*checkpoint.offset_batches()[-2:], *([] if last is None else [last])}:
            checkpoint.offsets(batch_id)


@contextmanager
def naming_the_job(job: str) -> Iterator[None]:
    """Damage found in the checkpoint, said with the job's own recover: a checkpoint knows no
    job, and its errors name the command for any (``RECOVER_HINT``)."""
    try:
        yield
    except CheckpointDamaged as damaged:
        if damaged.hint != RECOVER_HINT:
            raise
        raise CheckpointDamaged(f"{job}: {damaged.message}", recover_hint(job), damaged.finding) from None


def check_broker_time(job: StreamingJob, settings: Settings, timestamp_types: dict[str, str]) -> None:
    """Refuse source topics stamped with the producer's clock: the contract bounds event time
    by the record's Kafka timestamp, which such a producer sets itself (docs/semantics.md)."""
    producer_time = sorted(topic for topic, kind in timestamp_types.items() if kind != BROKER_TIME)
    if not producer_time:
        return
    if settings.kafka.accept_producer_time:
        log.warning("%s: topic %s stamped by the producer's clock (accept_producer_time): a producer clock "
                    "ahead moves the watermark", job.name, ", ".join(producer_time))
        return
    raise SigflowError(
        f"{job.name}: topic {', '.join(producer_time)} is stamped with the producer's clock (CreateTime), which "
        "bounds event time: one producer's clock ahead would move every watermark",
        "switch it to the broker's clock: `sigflow topics use-broker-time` (from its next record on); "
        "or set kafka_accept_producer_time=true to run anyway")


log = logging.getLogger("sigflow.runner")
INCOMPATIBLE_RUNBOOK = "docs/runbooks/incompatible-change.md"


def checkpoint_settings(job: StreamingJob, settings: Settings) -> dict[str, str]:
    values = {"topics": ",".join(job.topics(settings.streaming)), "state_format": str(job.state_format)}
    values.update({name: str(getattr(settings.streaming, name)) for name in job.checkpoint_settings})
    return values


# Settings Spark itself keeps in the checkpoint's offset log and uses on every restart,
# whatever the session says: a change is silently ignored unless sigflow refuses it.
SPARK_KEEPS = {"multiple_watermark_policy": "spark.sql.streaming.multipleWatermarkPolicy"}
# What a checkpoint that ran before sigflow recorded an entry was built with.
BEFORE_RECORDED = {"state_format": "1"}


def check_settings_compatible(checkpoint: Checkpoint, job: StreamingJob, settings: Settings) -> None:
    """Refuse to resume a checkpoint built with settings its state depends on, now changed.

    Spark would either fail deep in the JVM (a different state schema), carry on with state
    built under the old windows or topics, or keep the old value without a word (SPARK_KEEPS).
    Recorded at the first run. For a checkpoint that ran before an entry was recorded, the
    entry is read from the offset log when Spark keeps it, else taken from BEFORE_RECORDED,
    else as it is now.
    """
    current = checkpoint_settings(job, settings)
    identity = checkpoint.identity()
    recorded = identity.get("settings")
    if recorded is None or set(current) - set(recorded):
        latest = checkpoint.latest_offsets()
        kept = latest.conf if latest else {}
        earlier = {k: v for k, v in BEFORE_RECORDED.items() if latest and k in current}
        from_spark = {k: kept[conf] for k, conf in SPARK_KEEPS.items() if k in current and conf in kept}
        recorded = {**current, **earlier, **from_spark, **(recorded or {})}
        checkpoint.save_identity({**identity, "settings": recorded})
    changed = settings_changed(recorded, current)
    if changed:
        raise incompatible(job.name, changed)


def settings_changed(recorded: dict[str, str], current: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Each setting the checkpoint recorded that is another now: (then, now)."""
    return {k: (recorded[k], v) for k, v in current.items() if k in recorded and recorded[k] != v}


def incompatible(job: str, changed: dict[str, tuple[str, str]]) -> NeedsRestart:
    what = "; ".join(f"{k} was {old!r}, now {new!r}" for k, (old, new) in changed.items())
    return NeedsRestart(
        f"{job}: its checkpoint was built with other settings ({what}); resuming would "
        "mix state built under the old settings with the new",
        f"restore the old value, or rebuild under the new one: sigflow checkpoint recover "
        f"{job} --from earliest --force --yes (see {INCOMPATIBLE_RUNBOOK})",
    )
