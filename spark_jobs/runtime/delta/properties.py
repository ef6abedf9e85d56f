"""A table's own properties that come from the settings: how long a change-feed follower may
fall behind, and what its rows were computed with (the signal's unit, the windows, gaps and
delays of the jobs writing it), so a reader finds them in the table rather than in sigflow's
configuration. Set in the creating commit, and where a table holds other values at every
migration (runtime/delta/schema.py)."""

from __future__ import annotations

from spark_jobs.config import Settings
from spark_jobs.contracts.dictionary import SETTING_PROPERTY, SIGNAL_UNIT_PROPERTY
from spark_jobs.contracts.tables import TableSpec


def follower_properties(settings: Settings) -> dict[str, str]:
    """The tables' own retention, from the settings: how long vacuum leaves a removed file (a
    change-feed follower reads the files of the versions it has not applied yet) and how long
    the log keeps a commit. A follower further behind than the shorter breaks
    (docs/consumers.md)."""
    operations = settings.operations
    return {"delta.deletedFileRetentionDuration": f"interval {int(operations.vacuum_retention.seconds)} seconds",
            "delta.logRetentionDuration": f"interval {int(operations.log_retention.seconds)} seconds"}


def computed_with(settings: Settings, spec: TableSpec) -> dict[str, str]:
    """``sigflow.signal_unit`` for a table with a signal, and ``sigflow.setting.NAME`` for each
    setting a job writing the table computes its rows with: its watermark delay if it keeps
    state, and the settings its checkpoint is bound to (windows, gap, range). Such a setting
    changes only with a new checkpoint, so the value describes the rows written since then;
    the table's history holds the earlier ones."""
    from spark_jobs.jobs import writers_of
    from spark_jobs.jobs.registry import get_job

    found = {}
    if any(column == "signal" or column.endswith("_signal") for column in spec.columns):
        found[SIGNAL_UNIT_PROPERTY] = settings.operations.signal_unit
    for name in writers_of(spec.name):
        job = get_job(name)
        delays = ("watermark_delay",) + (("alert_watermark_delay",) if settings.streaming.alerts_topic in
                                         job.topics(settings.streaming) else ())
        for setting in (delays if job.stateful else ()) + job.checkpoint_settings:
            found[SETTING_PROPERTY + setting] = str(getattr(settings.streaming, setting))
    return found


def table_properties(settings: Settings, spec: TableSpec) -> dict[str, str]:
    return {**follower_properties(settings), **computed_with(settings, spec)}
