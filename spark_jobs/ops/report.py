"""``sigflow report``: one self-contained HTML page about what the pipeline did.

Reads the Delta tables with delta-rs (no Spark needed) and draws with matplotlib into
PNGs embedded in the page, so the file opens anywhere, offline, after ``make run``.
"""

from __future__ import annotations

import base64
import html
import io
import json
import logging
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd

from spark_jobs.config import Settings, duration_seconds
from spark_jobs.contracts.tables import ALL_TABLES
from spark_jobs.errors import SigflowError
from spark_jobs.runtime.checkpoint import tables_kept
from spark_jobs.runtime.delta import log_damage, table_access
from spark_jobs.runtime.delta.log_damage import TableUnreadable
from spark_jobs.runtime.delta.table_access import read_pandas

DEVICES_PLOTTED = 8  # more lines than this is unreadable
log = logging.getLogger("sigflow.report")


def recent(settings: Settings, name: str, columns: list[str], time_column: str, span_s: float) -> pd.DataFrame:
    """The table's rows of the last ``span_s`` seconds before its newest ``time_column`` (by
    Delta's file statistics): a slice that follows the traffic, not the table's age, and
    still shows a stopped pipeline's last hours."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from spark_jobs.runtime.delta.increments import file_statistics

    uri = settings.table_uri(name)
    if not table_access.exists(uri):
        return pd.DataFrame(columns=columns)
    try:
        newest = pc.max(file_statistics(uri, [time_column]).column(time_column)).as_py()
        if newest is None:
            return read_pandas(uri, columns)  # the writer kept no statistics: small by then, read it
        return read_pandas(uri, columns, where=ds.field(time_column) >= newest - timedelta(seconds=span_s))
    except TableUnreadable as unreadable:  # its chart empty, the table list says why
        log.warning("report: %s; its chart is empty (%s)", unreadable.message, unreadable.hint)
        return pd.DataFrame(columns=columns)


def _figure(draw, title: str) -> str:
    """A matplotlib drawing as an <img> with its PNG inline."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    # labels are device ids, jobs and reason codes as written: a "$" in one is a dollar sign,
    # not the start of a formula that matplotlib would fail to parse
    with plt.rc_context({"text.parse_math": False}):
        fig, ax = plt.subplots(figsize=(9, 3.2), dpi=90)
        drew = draw(ax)
        ax.set_title(title, loc="left", fontsize=11)
        ax.grid(alpha=0.3)
        if drew and ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        plt.close(fig)
    if not drew:
        return f'<p class="empty">{html.escape(title)}: no data yet.</p>'
    data = base64.b64encode(buffer.getvalue()).decode()
    return f'<img alt="{html.escape(title)}" src="data:image/png;base64,{data}">'


def _lines(frame: pd.DataFrame, x: str, y: str, by: str, xlabel: str, ylabel: str):
    def draw(ax) -> bool:
        frame_drawn = frame.dropna(subset=[y]) if y in frame else frame.iloc[0:0]
        if frame_drawn.empty:
            return False
        for key, group in frame_drawn.sort_values(x).groupby(by):
            ax.plot(group[x], group[y], marker=".", label=str(key))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        for axis, column in ((ax.xaxis, x), (ax.yaxis, y)):
            if pd.api.types.is_datetime64_any_dtype(frame_drawn[column]):
                from matplotlib import dates

                axis.set_major_formatter(dates.ConciseDateFormatter(axis.get_major_locator()))
        return True
    return draw


def _stacked(frame: pd.DataFrame, time_column: str, by: str, xlabel: str, ylabel: str):
    """Counts per time bucket as stacked bars, one colour per ``by``; buckets widen until
    there are at most 60 bars, so one minute or a week of data both read well."""
    def draw(ax) -> bool:
        if frame.empty:
            return False
        for width in ("1min", "5min", "15min", "1h", "6h", "1D"):
            buckets = frame[time_column].dt.floor(width)
            if buckets.nunique() <= 60:
                break
        counts = frame.assign(bucket=buckets).pivot_table(index="bucket", columns=by, aggfunc="size", fill_value=0)
        labels = [t.strftime("%m-%d %H:%M") for t in counts.index]
        bottom = pd.Series(0, index=counts.index)
        for key in counts.columns:
            ax.bar(labels, counts[key], bottom=bottom, label=str(key)[:48])
            bottom += counts[key]
        ax.set_xlabel(f"{xlabel} ({width} buckets)")
        ax.set_ylabel(ylabel)
        ax.tick_params(axis="x", labelrotation=45, labelsize=7)
        return True
    return draw


def _counts(settings: Settings) -> pd.DataFrame:
    """Each table's rows and version, from its files' statistics: no row is read."""
    from spark_jobs.runtime.delta.increments import added_since

    rows, lost = [], tables_kept.lost_tables(settings)
    for name in ALL_TABLES:
        uri = settings.table_uri(name)
        if name in lost:
            rows.append((name, f"LOST: it {lost[name]}, its rows with it (see {log_damage.RUNBOOK})", ""))
        elif table_access.exists(uri):
            try:
                whole = added_since(uri, None)
            except TableUnreadable as unreadable:
                rows.append((name, f"CANNOT BE READ: {unreadable.finding} (see {log_damage.RUNBOOK})", ""))
                continue
            rows.append((name, f"{whole.rows:,}", str(whole.version)))
    return pd.DataFrame(rows, columns=["table", "rows", "version"])


def _progress(text: str | None) -> dict | None:
    """A batch's progress JSON, or None when it has none or it does not parse: a row edited or
    cut short by hand loses its lag and state figures, not the whole report."""
    if not text:
        return None
    try:
        progress = json.loads(text)
    except ValueError:
        log.warning("a pipeline_metrics row's progress_json is not JSON; its lag and state are not drawn")
        return None
    return progress if isinstance(progress, dict) else None


def batches(metrics: pd.DataFrame) -> pd.DataFrame:
    """pipeline_metrics with what the plots read: seconds per batch and records behind in
    Kafka at the batch's end (from the progress JSON)."""
    from spark_jobs.runtime.metrics.progress import records_behind

    if metrics.empty:
        return metrics.assign(seconds=pd.Series(dtype=float), records_behind=pd.Series(dtype=float))
    behind = [records_behind(progress) if (progress := _progress(text)) else None for text in metrics.progress_json]
    # Before its first watermark a query reports the epoch; plotted, it would flatten the rest.
    watermark = metrics.watermark.where(metrics.watermark > pd.Timestamp(0, tz=metrics.watermark.dt.tz))
    return metrics.assign(seconds=metrics.duration_ms / 1000, watermark=watermark,
                          records_behind=pd.Series(behind, index=metrics.index, dtype=float))


def state_by_operator(metrics: pd.DataFrame) -> pd.DataFrame:
    """State rows of each stateful operator after each batch (from the progress JSON), one
    row per batch and operator, named "<job> <operator> #<its place in the plan>"."""
    from spark_jobs.runtime.metrics.progress import operator_figures

    rows = [
        (batch.batch_time, f"{batch.job} {figures['operator']} #{n}", figures["state_rows"])
        for batch in metrics.itertuples() if (progress := _progress(batch.progress_json))
        for n, figures in enumerate(operator_figures(progress))
    ]
    return pd.DataFrame(rows, columns=["batch_time", "operator", "state_rows"])


def build(settings: Settings, span: str = "24 hours") -> str:
    """The page: every table's size, and each chart over the last ``span`` of its table."""
    span_s = duration_seconds(span, "span")
    averages = recent(settings, "device_signal_averages",
                     ["device_id", "window_start", "window_kind", "avg_signal", "event_count"], "window_start", span_s)
    if not averages.empty:
        averages = averages[averages.window_kind == averages.window_kind.min()]
        busiest = averages.groupby("device_id").event_count.sum().nlargest(DEVICES_PLOTTED).index
        averages = averages[averages.device_id.isin(busiest)]
    late = recent(settings, "late_events", ["job", "event_time"], "event_time", span_s)
    decided = recent(settings, "late_events_reconciled", ["job", "outcome", "reconciled_at"], "reconciled_at", span_s)
    quarantined = recent(settings, "quarantined_events", ["reason_code", "kafka_timestamp"], "kafka_timestamp", span_s)
    metrics = batches(recent(settings, "pipeline_metrics",
                            ["job", "batch_time", "duration_ms", "watermark", "progress_json"], "batch_time", span_s))
    counts = _counts(settings)

    sections = [
        ("Per-device signal averages", _figure(
            _lines(averages, "window_start", "avg_signal", "device_id", "window start (event time)", "average signal"),
            f"Average signal per window, {DEVICES_PLOTTED} busiest devices")),
        ("Late data", _figure(
            _stacked(late, "event_time", "job", "event time", "events dropped as late"),
            "Events dropped as late, by event time and job")),
        ("Late events counted by reconcile", _figure(
            _stacked(decided.assign(decision=decided.job + ": " + decided.outcome) if not decided.empty else decided,
                     "reconciled_at", "decision", "reconciled at (UTC)", "late events decided on"),
            "Late events sigflow reconcile counted in the results they belong to, or found beyond late_horizon")),
        ("Quarantine", _figure(
            _stacked(quarantined, "kafka_timestamp", "reason_code", "arrival (Kafka timestamp)", "records"),
            "Quarantined records, by arrival time and reason")),
        ("Batch durations", _figure(
            _lines(metrics, "batch_time", "seconds", "job", "batch start (UTC)", "seconds"),
            "Micro-batch duration per job")),
        ("Watermark", _figure(
            _lines(metrics, "batch_time", "watermark", "job", "batch start (UTC)", "watermark (event time)"),
            "Event-time watermark per job: rows older than it are dropped as late")),
        ("Kafka lag", _figure(
            _lines(metrics, "batch_time", "records_behind", "job", "batch start (UTC)", "records behind"),
            "Records left in Kafka after each batch, per job")),
        ("State size", _figure(
            _lines(state_by_operator(metrics), "batch_time", "state_rows", "operator", "batch start (UTC)",
                   "state rows"),
            "State rows per stateful operator after each batch (sigflow checkpoint inspect JOB --state: the rows)")),
    ]
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    body = "\n".join(f"<h2>{html.escape(title)}</h2>\n{content}" for title, content in sections)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>sigflow report</title>
<style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}
td:first-child,th:first-child{{text-align:left}}.empty{{color:#888}}</style></head>
<body><h1>sigflow report</h1>
<p>Tables under <code>{html.escape(settings.delta_root_uri)}</code>, generated {generated}; each chart
shows the last {html.escape(span)} of its table.</p>
<h2>Tables</h2>
{counts.to_html(index=False, border=0)}
{body}
</body></html>
"""


def write(settings: Settings, out: Path | None = None, span: str = "24 hours") -> Path:
    out = Path(out or Path(settings.data_dir) / "report.html")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(build(settings, span))
    except OSError as error:
        why = f"{out.parent} is a file" if out.parent.is_file() else error.strerror or str(error)
        raise SigflowError(f"the report cannot be written to {out}: {why}",
                           "give --out a file in a folder you may write") from None
    return out
