"""What a run did, for people: the counts of one job's run and the table of several."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RunSummary:
    job: str
    counts_late: bool = False  # the job has a lateness rule (every stateful event job)
    batches: int = 0
    batches_skipped: int = 0  # replayed batches whose rows Delta already held
    batches_behind_a_watermark: int = 0  # batches with records that ran after a watermark was set
    rows_in: int = 0
    rows_written: dict[str, int] = field(default_factory=dict)
    rows_dropped_by_watermark: int = 0
    duplicates_dropped: int = 0
    state_rows: int | None = None  # as the run's last batch left them; None when no batch ran
    seconds: float = 0.0  # wall time of the run, when measured (pipeline)

    def add(self, table: str, rows: int) -> None:
        self.rows_written[table] = self.rows_written.get(table, 0) + rows

    def zero_late_reason(self) -> str:
        """Why nothing was dropped late, when records came and none was (a zero should say
        why; with no record, there is nothing to explain)."""
        if not self.counts_late or self.rows_dropped_by_watermark or not self.rows_in:
            return ""
        if self.batches_behind_a_watermark:
            return "none behind the watermark"
        return ("all records came before a watermark was set: cut the stream into batches "
                "with SIGFLOW_MAX_OFFSETS_PER_TRIGGER to see late data dropped")

    def line(self) -> str:
        written = ", ".join(f"{t}={n:,}" for t, n in self.rows_written.items()) or "nothing"
        skipped = f", {self.batches_skipped:,} replayed batch(es) already in Delta" if self.batches_skipped else ""
        stateful = ""
        if self.counts_late:
            late = f"{self.rows_dropped_by_watermark:,} dropped late"
            if self.zero_late_reason():
                late += f" ({self.zero_late_reason()})"
            held = "" if self.state_rows is None else f", {self.state_rows:,} state rows"
            stateful = f"; {self.duplicates_dropped:,} duplicates removed, {late}{held}"
        return (
            f"{self.job}: {self.batches:,} batch(es), {self.rows_in:,} rows in; "
            f"written: {written}{stateful}{skipped}"
        )


def combined(runs: list[RunSummary]) -> RunSummary:
    """One job's runs as one: a job of one application started again after a failure or a
    restart of it has a run each time. Counts add up; the state is what the last run left."""
    total = RunSummary(runs[0].job, runs[0].counts_late)
    for run in runs:
        total.batches += run.batches
        total.batches_skipped += run.batches_skipped
        total.batches_behind_a_watermark += run.batches_behind_a_watermark
        total.rows_in += run.rows_in
        for table, rows in run.rows_written.items():
            total.add(table, rows)
        total.rows_dropped_by_watermark += run.rows_dropped_by_watermark
        total.duplicates_dropped += run.duplicates_dropped
        total.state_rows = run.state_rows if run.state_rows is not None else total.state_rows
        total.seconds += run.seconds
    return total


def summary_table(summaries: list[RunSummary]) -> list[str]:
    """The runs side by side, one row per job (its runs combined), then why a zero
    dropped-late is a zero."""
    by_job: dict[str, list[RunSummary]] = {}
    for run in summaries:
        by_job.setdefault(run.job, []).append(run)
    summaries = [combined(runs) for runs in by_job.values()]
    header = ("job", "batches", "records in", "rows written", "duplicates", "dropped late", "state rows")
    rows = [header]
    for s in summaries:
        stateful = [f"{s.duplicates_dropped:,}", f"{s.rows_dropped_by_watermark:,}",
                    "-" if s.state_rows is None else f"{s.state_rows:,}"]
        rows.append((s.job, f"{s.batches:,}", f"{s.rows_in:,}", f"{sum(s.rows_written.values()):,}",
                     *(stateful if s.counts_late else ["-", "-", "-"])))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
             for row in rows]
    jobs_by_reason: dict[str, list[str]] = {}  # one note per reason, naming its jobs
    for s in summaries:
        if why := s.zero_late_reason():
            jobs_by_reason.setdefault(why, []).append(s.job)
    return lines + [f"{', '.join(jobs)}: {why}" for why, jobs in jobs_by_reason.items()]
