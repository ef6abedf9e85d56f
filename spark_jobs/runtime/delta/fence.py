"""A takeover's fence: a stale writer's commit under way cannot land beside its successor's.

A run appends a batch it planned itself without Delta's application transaction, whose
lookup rebuilds the table's state on every append (docs/streaming-facts.md). So when the
lease passes to a new holder while the old one is still writing (on another host: a driver
cut off from the lease's storage while its S3 write goes on retrying, a stalled JVM, a clock
stepped back), the old write could land after the new holder replayed the batch: the batch
twice. Whoever takes over a lease from a holder on another host that did not release it
(one on this host is killed first, lease.py) commits a metadata change to each table the job
appends to: Delta's conflict check fails every transaction begun before that commit, so the
stale write cannot land. A run whose commit fails so checks its lease (``sink.DeltaSink.append``): lost,
it stops; still held (another job fenced a table both append to), it writes again.

What it leaves: a writer that passed its lease check and then stalled, for longer than the
whole takeover, before its Delta transaction began (docs/semantics.md).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Iterable

from spark_jobs.runtime.delta import table_access

if TYPE_CHECKING:
    from spark_jobs.config import Settings
    from spark_jobs.contracts.tables import TableSpec
    from spark_jobs.runtime.checkpoint.lease import Lease

log = logging.getLogger("sigflow.lease")
FENCE_PROPERTY = "sigflow.fenced_by.{job}"  # the run (lease owner) that took over last


def fence_after_takeover(settings: Settings, job: str, tables: Iterable[TableSpec], lease: Lease,
                         tables_created: Callable[[], object] = lambda: None) -> list[str]:
    """Fence the ``tables`` that ``job`` appends to (not those kept by merge, whose replay
    changes nothing) when ``lease`` was taken over from a holder on another host that did
    not release it: the tables fenced (none otherwise). ``tables_created`` waits for the
    run's creation of its tables, still under way (``JobRun._prepare``), which a fence
    follows."""
    if lease.taken_over is None or lease.taken_over.on_this_host():
        return []
    tables_created()
    fenced = [spec.name for spec in tables if not spec.merge_key and fence(settings.table_uri(spec.name), job, lease.owner)]
    if fenced:
        log.warning("%s: took the lease over from %s; fenced %s so none of its writes under way can land",
                    job, lease.taken_over.describe(), ", ".join(fenced))
    return fenced


def fence(uri: str, job: str, owner: str) -> bool:
    """Commit the metadata change that fails every transaction on ``uri`` begun before it:
    True when the table exists and was fenced."""
    if not table_access.exists(uri):
        return False
    table_access.set_properties(uri, {FENCE_PROPERTY.format(job=job): owner})
    return True


def is_fenced_commit(error: BaseException) -> bool:
    """Whether a Delta commit failed because another writer changed the table's metadata
    after its transaction began (a fence, a migration)."""
    return "MetadataChangedException" in f"{type(error).__name__} {str(error)[:2000]}"
