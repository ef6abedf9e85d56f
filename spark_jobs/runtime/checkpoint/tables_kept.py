"""The tables a job's checkpoint has written, and the checkpoint that wrote them, both still
there. Each table is known by the id Delta gave it when it was created, recorded in
sigflow.json once the run's tables exist and looked for before the next run creates any: a
table deleted (by a hand, a lifecycle rule of its bucket) or created anew under its path
would otherwise be made again empty, or written on, by a job carrying on from its checkpoint
as if the table held its earlier batches. A job with no checkpoint at all whose tables hold
rows its batches wrote has lost it: a new one would write those rows again."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping

from spark_jobs.config import Settings
from spark_jobs.errors import CheckpointDamaged, NeedsRestart
from spark_jobs.jobs import JOB_TABLES, writers_of
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.delta import table_access
from spark_jobs.runtime.delta.increments import added_since
from spark_jobs.runtime.delta.log_damage import TableUnreadable

log = logging.getLogger("sigflow.runner")
RUNBOOK = "docs/runbooks/table-damaged.md"
CHECKPOINT_RUNBOOK = "docs/runbooks/checkpoint-lost-or-corrupt.md"
# a table several jobs write, written again from the tables its rows come from (ops/rebuild.py)
REBUILD_COMMANDS = {"device_status": "sigflow tables rebuild device_status"}


class TableLost(NeedsRestart):
    """A table the job has written is gone, or is another table now."""


class CheckpointMissing(NeedsRestart):
    """A job's tables hold rows, and its checkpoint is not where the settings say."""


def rebuild_command(job: str) -> str:
    """The recover that writes a job's own tables again: from device_events_raw, or for
    ingest, which writes it, from what Kafka holds."""
    return f"sigflow checkpoint recover {job} --from {'earliest' if job == 'ingest' else 'raw'}"


def changed_tables(checkpoint: Checkpoint, tables: Mapping[str, str]) -> dict[str, str]:
    """Each of ``tables`` (name -> URI) the checkpoint's batches wrote that is not the table
    they wrote any more, with what became of it; none before its first committed batch."""
    recorded = checkpoint.table_ids() if checkpoint.last_committed() is not None else {}
    changed = {}
    for name, uri in tables.items():
        if name in recorded and (found := table_access.table_id(uri)) != recorded[name]:
            changed[name] = "is gone" if found is None else "was deleted and created again"
    return changed


def own_tables(job: str, tables: Mapping[str, str]) -> dict[str, str]:
    """Those of ``tables`` only ``job`` writes: the ones its recover rebuilds."""
    return {name: uri for name, uri in tables.items() if writers_of(name) == (job,)}


def own_table_uris(settings: Settings, job: str) -> dict[str, str]:
    """The tables only ``job`` writes, by name, with their URIs."""
    return own_tables(job, {spec.name: settings.table_uri(spec.name) for spec in JOB_TABLES.get(job, ())})


def lost_tables(settings: Settings) -> dict[str, str]:
    """Each job's own table gone, or made anew, since the job's batches wrote it, with what
    became of it and since whose batches; a job whose checkpoint or table cannot be read is
    left to the commands that read them."""
    lost = {}
    for job in JOB_TABLES:
        with contextlib.suppress(CheckpointDamaged, TableUnreadable):
            changed = changed_tables(Checkpoint(settings.checkpoint_uri(job)), own_table_uris(settings, job))
            lost |= {name: f"{change} since {job} wrote it" for name, change in changed.items()}
    return lost


def check_tables_kept(checkpoint: Checkpoint, job: str, tables: Mapping[str, str]) -> dict[str, str]:
    """Refuse a run of ``job`` whose own table (``tables``: name -> URI) is gone or replaced
    since its checkpoint's batches wrote it: its recover rebuilds it. A table other jobs write
    too is not rebuilt by one job's recover: said, and the run goes on (it is created again).
    Returns those of ``tables`` whose ids ``record_tables`` is to record once they exist: every
    one before the first committed batch, then the ones not recorded yet or made again (the
    others were just found as recorded)."""
    own = own_tables(job, tables)
    changed = changed_tables(checkpoint, tables)
    for name, change in changed.items():
        if name not in own:
            log.warning("%s: table %s %s since this job last wrote it: the rows written before are not in it; %s "
                        "(%s)", job, name, change, f"write them again with `{REBUILD_COMMANDS[name]}`"
                        if name in REBUILD_COMMANDS else "restore it from a backup to have them", RUNBOOK)
            continue
        raise TableLost(
            f"{job}: table {name} {change} since {job} wrote it (its batches 0 to {checkpoint.last_committed():,} "
            "committed): written on from the checkpoint, it would lack every row of those batches",
            ("if the tables moved, set delta_root to where they are; else " if change == "is gone" else "")
            + f"restore it as it was, or rebuild it: `{rebuild_command(job)}` ({RUNBOOK})")
    if checkpoint.last_committed() is None:
        return dict(tables)
    recorded = checkpoint.table_ids()
    return {name: uri for name, uri in tables.items() if name not in recorded or name in changed}


def check_checkpoint_there(checkpoint: Checkpoint, job: str, tables: Mapping[str, str], starting_offsets: str) -> None:
    """Refuse a run of ``job`` with no checkpoint at all (no batch, no app id in sigflow.json)
    whose own table holds rows its batches committed: its checkpoint is lost, or the setting
    points elsewhere now. A new one would read Kafka from ``starting_offsets`` again and append
    those rows a second time (from ``latest``: skip what came since)."""
    if checkpoint.exists() or "app_id" in checkpoint.identity():  # a recover's new checkpoint has its id
        return
    for name, uri in own_tables(job, tables).items():
        held = added_since(uri, None) if table_access.exists(uri) else None
        if held is None or not held.files or not _batches_of(job, uri):
            continue
        rows = f"{held.rows:,} rows" if held.rows else "rows"
        fresh = ("start at Kafka's end, skipping every record since its last batch" if starting_offsets == "latest"
                 else f"read Kafka from {starting_offsets} again, writing what it had written a second time")
        raise CheckpointMissing(
            f"{job}: no checkpoint at {checkpoint.uri}, yet {name} holds {rows} an earlier checkpoint of it "
            f"wrote: a new one would {fresh}",
            f"if the checkpoint moved, set checkpoint_root to where it is; if it is lost, rebuild it: "
            f"`sigflow checkpoint recover {job}` ({CHECKPOINT_RUNBOOK})")


def _batches_of(job: str, uri: str) -> bool:
    """Whether a batch of ``job`` committed to the table (rows put there otherwise, a
    migration's or an older sigflow's, are no earlier checkpoint's): its newest 50 commits,
    then its whole history."""
    return any(any(m.get("job") == job and m.get("batch_id") is not None
                   for m in table_access.commit_metadata(uri, limit)) for limit in (50, None))


def own_table_ids(checkpoint: Checkpoint, job: str) -> dict[str, str]:
    """The recorded ids of the tables only ``job`` writes."""
    return {name: table_id for name, table_id in checkpoint.table_ids().items() if writers_of(name) == (job,)}


def record_tables(checkpoint: Checkpoint, ids: Mapping[str, str | None]) -> None:
    """Record the ids of the tables ``check_tables_kept`` returned, read once they exist
    (None: not to be recorded), for its next call to look for."""
    checkpoint.record_table_ids({name: table_id for name, table_id in ids.items() if table_id})
