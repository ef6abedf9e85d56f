"""Each job's figures from pipeline_metrics (one row per committed batch): its batches, the
sums of its count columns and its latest batch's row. Read in chunks, so memory does not
follow the table, and kept up to date by reading only the files added since the last read
(the exporter, scraped every few seconds, reads what is new); a rewind or a recover that
deleted rows starts the sums over."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spark_jobs.config import Settings
from spark_jobs.runtime.delta import table_access
from spark_jobs.runtime.delta.increments import CHUNK_ROWS

# what `sigflow status` shows of a job's latest batch
LATEST_COLUMNS = ("input_rows_per_second", "processed_rows_per_second", "state_rows")


@dataclass
class JobFigures:
    batches: int = 0
    sums: dict[str, int] = field(default_factory=dict)
    latest_batch: int = -1
    latest: dict[str, Any] = field(default_factory=dict)


class MetricsTotals:
    def __init__(self, settings: Settings, summed: tuple[str, ...], chunk_rows: int = CHUNK_ROWS):
        self.uri = settings.table_uri("pipeline_metrics")
        self.chunk_rows = chunk_rows
        self.summed = tuple(dict.fromkeys(summed))
        self.version: int | None = None
        self.jobs: dict[str, JobFigures] = {}

    def refresh(self) -> dict[str, JobFigures]:
        """The figures as of the table's current version; {} before the table exists."""
        from spark_jobs.runtime.delta.increments import added_since, chunks

        if not table_access.exists(self.uri):
            return {}
        increment = added_since(self.uri, self.version)
        if increment.removed:
            self.jobs, increment = {}, added_since(self.uri, None)
        columns = list(dict.fromkeys(("job", "batch_id", *self.summed, *LATEST_COLUMNS)))
        for chunk in chunks(increment, self.chunk_rows, columns):
            self._fold(chunk.to_pandas())
        self.version = increment.version
        return self.jobs

    def _fold(self, frame) -> None:
        for job, rows in frame.groupby("job"):
            figures = self.jobs.setdefault(job, JobFigures(sums=dict.fromkeys(self.summed, 0)))
            figures.batches += len(rows)
            for column in self.summed:
                figures.sums[column] += int(rows[column].fillna(0).sum())
            newest = rows.loc[rows.batch_id.idxmax()]
            if int(newest.batch_id) >= figures.latest_batch:
                figures.latest_batch = int(newest.batch_id)
                figures.latest = {column: newest[column] for column in LATEST_COLUMNS}
