"""Reading and repairing sigflow's Delta tables outside Spark (delta-rs): commit history,
versions, restores, row counts and deletes. The on-call operations use these; the
streaming writes themselves go through ``spark_jobs.runtime.delta_sink``."""

from __future__ import annotations

from spark_jobs.runtime.delta_sink import commit_metadata


def history(uri: str) -> list[dict]:
    from deltalake import DeltaTable

    return commit_metadata(uri) if DeltaTable.is_deltatable(uri) else []


def version_left_by(uri: str, job: str, checkpoint_id: str, batch_id: int) -> int | None:
    """The newest table version written by this checkpoint's batch ``batch_id`` or earlier.

    Newest wins because a rewind re-writes batch ids: after rewinding to N the commits of
    batches above N that came before it are no longer part of the answer.
    """
    for entry in history(uri):
        same = entry.get("job") == job and entry.get("checkpoint_id", checkpoint_id) == checkpoint_id
        if same and int(entry.get("batch_id", -1)) <= batch_id:
            return int(entry["version"])
    return None


def table_version(uri: str) -> int | None:
    from deltalake import DeltaTable

    return DeltaTable(uri).version() if DeltaTable.is_deltatable(uri) else None


def restore(uri: str, version: int) -> None:
    from deltalake import DeltaTable

    DeltaTable(uri).restore(version)


def predicate(job: str | None, after_batch: int | None) -> str | None:
    parts = ([f"job = '{job}'"] if job else []) + ([f"batch_id > {after_batch}"] if after_batch is not None else [])
    return " AND ".join(parts) or None


def count_rows(uri: str, job: str | None = None, after_batch: int | None = None) -> int:
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(uri):
        return 0
    dataset = DeltaTable(uri).to_pyarrow_dataset()
    condition = None
    if job:
        condition = ds.field("job") == job
    if after_batch is not None:
        later = ds.field("batch_id") > after_batch
        condition = later if condition is None else condition & later
    return dataset.count_rows(filter=condition)


def delete_rows(uri: str, job: str | None = None, after_batch: int | None = None) -> None:
    from deltalake import DeltaTable

    if DeltaTable.is_deltatable(uri):
        DeltaTable(uri).delete(predicate(job, after_batch))
