"""Data-quality checks of the Delta tables with Great Expectations 1.x.

One suite per table, from the rules declared with it (``TableSpec.quality``,
contracts/expectations.py): schema, keys not null, signals in the device range, ``event_id``
unique after dedup, windows and sessions well-ordered, and freshness. Each expectation carries a severity: a failed ``critical`` one fails the run
(and the Airflow task) with the expectation and a sample of the bad rows; a ``warning`` is
recorded and printed only. Every result is appended to the ``dq_results`` Delta table and
rendered as GX Data Docs HTML under ``quality_dir``.

A run reads what is new: the rows a table gained since the version its last passing run
checked (``dq_results.table_version``), in chunks of ``quality_chunk_rows``, so its memory
does not follow the table's size and its time follows the new rows. Checks of the whole
table (not empty, fresh) read Delta's file statistics instead of rows. ``full=True``
checks every row, still in chunks. Tables are read with delta-rs, so a check needs no
Spark: it suits an Airflow worker (docs/runbooks/dq-failure.md).
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_jobs.config import Settings
from spark_jobs.contracts.tables import ALL_TABLES, DQ_RESULTS, TableSpec
from spark_jobs.errors import SigflowError
from spark_jobs.install import datadocs_assets
from spark_jobs.runtime.delta import table_access
from spark_jobs.runtime.delta.increments import ROWS_IN_FILE, Increment

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("sigflow.quality")
CRITICAL, WARNING = "critical", "warning"
ROWS, TABLE = "rows", "table"  # what a check reads: the new rows, or the table's file statistics
SAMPLE_ROWS = 5


@dataclass(frozen=True)
class Check:
    expectation: str  # a GX expectation class name, e.g. ExpectColumnValuesToNotBeNull
    kwargs: dict[str, Any]
    severity: str = CRITICAL
    reads: str = ROWS


def _not_null(*columns: str) -> list[Check]:
    return [Check("ExpectColumnValuesToNotBeNull", {"column": c}) for c in columns]


def _in_range(settings: Settings, *columns: str) -> list[Check]:
    return [
        Check("ExpectColumnValuesToBeBetween",
              {"column": c, "min_value": settings.operations.signal_min, "max_value": settings.operations.signal_max})
        for c in columns
    ]


def _ordered(later: str, earlier: str, or_equal: bool = False) -> Check:
    return Check("ExpectColumnPairValuesAToBeGreaterThanB",
                 {"column_A": later, "column_B": earlier, "or_equal": or_equal})


def _unique_key(spec: TableSpec) -> list[Check]:
    """The table's key (``TableSpec.key``) never null, and unique."""
    key = list(spec.key)
    unique = ([Check("ExpectCompoundColumnsToBeUnique", {"column_list": key})] if len(key) > 1
              else [Check("ExpectColumnValuesToBeUnique", {"column": key[0]})])
    return _not_null(*key) + unique


def _fresh(settings: Settings, column: str) -> Check:
    """The column's newest value, the largest of each file's (its statistics)."""
    oldest = datetime.now(timezone.utc) - timedelta(seconds=settings.operations.quality_freshness.seconds)
    return Check("ExpectColumnMaxToBeBetween", {"column": column, "min_value": oldest}, WARNING, TABLE)


def _not_empty() -> Check:
    """The table's rows, summed over its files' statistics."""
    return Check("ExpectColumnSumToBeBetween", {"column": ROWS_IN_FILE, "min_value": 1}, WARNING, TABLE)


def _checks(settings: Settings, spec: TableSpec) -> list[Check]:
    """A table's declared rules (``TableSpec.quality``) as GX expectations, in the order
    declared: filled, key unique, not null, ordered, counts, signal range, values, fresh."""
    rules = spec.quality
    checks = [_not_empty()] if rules.filled else []
    checks += _unique_key(spec) if rules.unique_key else []
    checks += _not_null(*rules.not_null)
    checks += [_ordered(rule.later, rule.earlier, rule.or_equal) for rule in rules.ordered]
    checks += [Check("ExpectColumnValuesToBeBetween", {"column": column, "min_value": 1})
               for column in rules.at_least_one]
    checks += _in_range(settings, *rules.in_signal_range)
    checks += [Check("ExpectColumnValuesToBeInSet", {"column": column, "value_set": list(values)})
               for column, values in rules.allowed]
    return checks + ([_fresh(settings, rules.fresh)] if rules.fresh else [])


# the tables sigflow quality checks (the schema check is added to every one)
CHECKED_TABLES: tuple[str, ...] = tuple(name for name, spec in ALL_TABLES.items() if spec.quality is not None)


def suites(settings: Settings) -> dict[str, list[Check]]:
    """table -> its checks under these settings, each table's key never null among them (the
    key constraint holds it for every write, but not for rows written before a migration
    could add it)."""
    return {name: _key_not_null(spec, _checks(settings, spec)) for name, spec in ALL_TABLES.items() if spec.quality}


def _key_not_null(spec: TableSpec, checks: list[Check]) -> list[Check]:
    checked = {c.kwargs.get("column") for c in checks if c.expectation == "ExpectColumnValuesToNotBeNull"}
    return _not_null(*(column for column in spec.required if column not in checked)) + checks


@dataclass
class Outcome:
    expectation: str
    column: str | None
    severity: str
    success: bool
    unexpected_count: int
    sample: list[dict] = field(default_factory=list)
    error: str | None = None  # the expectation could not be evaluated (e.g. a type mismatch)
    observed: Any = None  # GX's observed value (a row count, a column's maximum)
    expected: dict = field(default_factory=dict)  # the expectation's bounds
    rows: int = 0

    def line(self) -> str:
        mark = "ok  " if self.success else ("FAIL" if self.severity == CRITICAL else "warn")
        return f"  {mark} [{self.severity}] {self.finding()}"

    def finding(self) -> str:
        """What was checked, on what, and what was found, in words."""
        from spark_jobs.ops.status import format_time

        if self.error:
            return f"{self.expectation}({self.column or ''}) could not be evaluated: {self.error}"
        if self.column == ROWS_IN_FILE:
            return ("the table is empty: expected at least one row once events flow" if not self.observed
                    else f"{self.observed:,} rows, expected at least {self.expected.get('min_value')}")
        if self.expectation == "expect_column_max_to_be_between":
            since = format_time(self.expected.get("min_value"))
            if self.observed is None or self.observed != self.observed:  # NaT: no value
                return f"{self.column}: no rows, so nothing newer than {since} (quality_freshness)"
            return (f"newest {self.column} is {format_time(self.observed)}: expected after {since} "
                    f"(quality_freshness); no new rows since then")
        what = f"{self.expectation}({self.column})" if self.column else self.expectation
        return f"{what}: {self.unexpected_count:,} of {self.rows:,} rows unexpected"

    def merge(self, other: Outcome) -> None:
        """Fold in the same expectation's outcome on a later chunk of rows."""
        self.success = self.success and other.success
        self.unexpected_count += other.unexpected_count
        self.sample = (self.sample + other.sample)[:SAMPLE_ROWS]
        self.error = self.error or other.error
        self.rows += other.rows


@dataclass
class TableReport:
    table: str
    rows: int  # the rows checked: those added since the last passing run's version
    outcomes: list[Outcome]
    increment: Increment | None = None
    # the GX keys of this check's suite and validation result: the Data Docs pages to render
    docs_pages: list = field(default_factory=list, repr=False)

    @property
    def failed_critical(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.success and o.severity == CRITICAL]

    def lines(self) -> list[str]:
        passed = sum(o.success for o in self.outcomes)
        scope, since = "rows", self.increment.since if self.increment else None
        if since is not None:
            scope = (f"new rows (none since version {since})" if since == self.increment.version
                     else f"new rows (versions {since + 1}-{self.increment.version})")
        out = [f"{self.table}: {passed}/{len(self.outcomes)} expectations met on {self.rows:,} {scope}"]
        out += [o.line() for o in self.outcomes if not o.success]
        for outcome in self.failed_critical:
            for row in outcome.sample:
                out.append(f"      bad row: {json.dumps(row, default=str)}")
        return out


class QualityFailed(SigflowError):
    def __init__(self, message: str, hint: str, reports: list[TableReport], gone: list[str] | None = None):
        super().__init__(message, hint, [line for report in reports for line in report.lines()] + (gone or []))
        self.reports = reports
        self.gone = gone or []  # a line per table an earlier run checked that is not there now


def check(settings: Settings, tables: list[str] | None = None, full: bool = False) -> list[str]:
    """``sigflow quality run`` and each sigflow_quality task: what every table's suite found.
    A failed critical expectation raises QualityFailed, whose details are these lines."""
    reports = run(settings, tables, full)
    lines = [line for report in reports for line in report.lines()]
    warnings = sum(not o.success for r in reports for o in r.outcomes if o.severity == WARNING)
    verdict = f"all critical expectations met, {warnings} warning{'s' * (warnings != 1)}"
    return lines + [f"{verdict}; Data Docs: {data_docs_index(settings)}"]


def run(settings: Settings, tables: list[str] | None = None, full: bool = False) -> list[TableReport]:
    """Validate the tables (all with a suite, or those named): the rows each gained since
    its last passing run, or every row when ``full``. Raises QualityFailed on a failed
    critical expectation, after every table was checked and every result recorded."""
    from tqdm import tqdm

    from spark_jobs.runtime.delta import increments
    from spark_jobs.runtime.delta.schema import create_table

    all_suites = suites(settings)
    unknown = sorted(set(tables or []) - set(all_suites))
    if unknown:
        raise SigflowError(f"no quality suite for {', '.join(unknown)}", f"suites: {', '.join(all_suites)}")
    results_uri = settings.table_uri(DQ_RESULTS.name)
    create_table(results_uri, DQ_RESULTS)  # or migrate it: table_version came later
    context = _context(settings)
    run_id, run_time = uuid.uuid4().hex[:12], datetime.now(timezone.utc)
    reports, gone = [], {}  # gone: the line saying so, by table
    # A bar on a terminal only: Airflow task logs and pipes get the result lines alone.
    for name in tqdm(tables or list(all_suites), desc="quality", unit=" table", disable=None, leave=False):
        uri = settings.table_uri(name)
        if not table_access.exists(uri):
            checked = _last_checked(results_uri, name)
            if checked is None:
                log.info("%s: no table yet, skipped", name)
            else:
                gone[name] = (f"{name}: GONE: no table at {uri}, where a run checked it at version {checked:,} "
                              f"(docs/runbooks/table-damaged.md)")
            continue
        increment = increments.added_since(uri, None if full else _last_passed(results_uri, name))
        reports.append(_check_table(context, settings, increment, name, all_suites[name], run_id, run_time))
    _record(results_uri, run_id, run_time, reports)
    # This run's pages only: rebuilding the site renders every result ever stored, which
    # grew each run's cost with the history (docs/streaming-facts.md, "Data Docs").
    context.build_data_docs(resource_identifiers=[key for r in reports for key in r.docs_pages])
    datadocs_assets.bundle(Path(data_docs_index(settings)).parent)  # the pages work offline
    failed = [(r.table, o) for r in reports for o in r.failed_critical]
    if failed or gone:
        named = ", ".join([f"{t}: {o.expectation}({o.column or ''})" for t, o in failed]
                          + [f"{name}: gone" for name in gone])
        raise QualityFailed(
            f"data quality failed: {named}",
            f"see the bad rows above, dq_results run {run_id} and {data_docs_index(settings)}; "
            "runbook docs/runbooks/dq-failure.md",
            reports, list(gone.values()),
        )
    return reports


def data_docs_index(settings: Settings) -> str:
    return str(settings.quality_path / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html")


def _last_checked(results_uri: str, table: str) -> int | None:
    """The newest version of ``table`` any run checked (None: none did)."""
    import pyarrow.dataset as ds

    from spark_jobs.runtime.delta.table_access import read_pandas

    versions = read_pandas(results_uri, ["table_version"], where=ds.field("table_name") == table).table_version.dropna()
    return int(versions.max()) if len(versions) else None


def _last_passed(results_uri: str, table: str) -> int | None:
    """The newest version of ``table`` a run checked with every critical expectation met:
    rows up to it need no second look. A failed run does not count, so the rows it found
    bad are checked again until they are repaired."""
    import pyarrow.dataset as ds

    from spark_jobs.runtime.delta.table_access import read_pandas

    runs = read_pandas(results_uri, ["run_id", "table_version", "severity", "success"],
                       where=ds.field("table_name") == table)
    failed = set(runs.run_id[(runs.severity == CRITICAL) & ~runs.success.astype(bool)])
    passed = runs[~runs.run_id.isin(failed)].table_version.dropna()
    return int(passed.max()) if len(passed) else None


def _check_table(context, settings: Settings, increment: Increment, table: str, checks: list[Check],
                 run_id: str, run_time: datetime) -> TableReport:
    """Every check of one table: its row checks chunk by chunk over the increment, its table
    checks once over the file statistics; one Data Docs page for each of the two."""
    import pyarrow.compute as pc

    from spark_jobs.ops.unique_keys import SeenKeys
    from spark_jobs.runtime.delta import increments
    from spark_jobs.runtime.delta.schema import arrow_schema

    schema = Check("ExpectTableColumnsToMatchSet",
                   {"column_set": [f.name for f in ALL_TABLES[table].schema.fields], "exact_match": True})
    row_checks = [schema, *(c for c in checks if c.reads == ROWS)]
    table_checks = [c for c in checks if c.reads == TABLE]
    unique = {_key_name(c.kwargs): SeenKeys(c.kwargs.get("column_list") or [c.kwargs["column"]]) for c in row_checks
              if c.expectation in UNIQUE_EXPECTATIONS}
    merged: list[Outcome] = []
    shown = None  # the validation whose page Data Docs keep: the first chunk that failed, else the first
    chunks = increments.chunks(increment, settings.operations.quality_chunk_rows)
    for chunk in _at_least_one(chunks, arrow_schema(ALL_TABLES[table]).empty_table()):
        frame = chunk.to_pandas()
        outcomes, result = _validate(context, f"sigflow.{table}", table, frame, row_checks, run_id, run_time)
        for seen in unique.values():
            seen.add(frame)
        if not merged:
            merged = outcomes
        else:
            for total, more in zip(merged, outcomes):
                total.merge(more)
        if shown is None or (shown.success and not result.success):
            shown = result
    for outcome in merged:
        if outcome.expectation in ("expect_column_values_to_be_unique", "expect_compound_columns_to_be_unique") \
                and not outcome.error:
            # a repeat across chunks, or of a row checked before, is one too
            count, sample = unique[outcome.column].repeated(increment, settings.operations.quality_chunk_rows)
            outcome.unexpected_count, outcome.sample = count, _plain(sample)
            outcome.success = count == 0
    columns = [c.kwargs["column"] for c in table_checks if c.kwargs["column"] != ROWS_IN_FILE]
    statistics = increments.file_statistics(increment.uri, columns, increment.version)
    table_outcomes, table_result = _validate(context, f"sigflow_metadata.{table}", f"{table}.files",
                                             statistics.to_pandas(), table_checks, run_id, run_time)
    total = pc.sum(statistics.column(ROWS_IN_FILE)).as_py() or 0
    for outcome in table_outcomes:
        outcome.rows = total
    pages = []
    for result in (shown, table_result):
        pages += _store(context, result, table)
    return TableReport(table, increment.rows, merged + table_outcomes, increment, docs_pages=pages)


UNIQUE_EXPECTATIONS = ("ExpectColumnValuesToBeUnique", "ExpectCompoundColumnsToBeUnique")


def _key_name(kwargs: dict) -> str:
    """How a key is named in results: its column, or its columns joined."""
    return ", ".join(kwargs["column_list"]) if "column_list" in kwargs else kwargs["column"]


def _at_least_one(chunks, empty):
    """The chunks, or the empty one when there are none, so every expectation has a result."""
    any_chunk = False
    for chunk in chunks:
        any_chunk = True
        yield chunk
    if not any_chunk:
        yield empty


def _context(settings: Settings):
    # GX's import logs a line per function it skips registering (about 200 in a task log),
    # burying the one result line
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    settings.quality_path.mkdir(parents=True, exist_ok=True)
    context = gx.get_context(mode="file", project_root_dir=str(settings.quality_path))
    context.variables.progress_bars = ProgressBarsConfig(globally=False)  # one line per table instead
    return context


def _validate(context, suite_name: str, asset_name: str, frame: pd.DataFrame, checks: list[Check],
              run_id: str, run_time: datetime) -> tuple[list[Outcome], Any]:
    """The checks on one frame: their outcomes and GX's checkpoint result (stored by _store)."""
    import great_expectations as gx
    import great_expectations.expectations as gxe
    from great_expectations.core.run_identifier import RunIdentifier

    suite = gx.ExpectationSuite(name=suite_name)
    for check in checks:
        suite.add_expectation(getattr(gxe, check.expectation)(**check.kwargs, meta={"severity": check.severity}))
    suite = context.suites.add_or_update(suite)
    source = context.data_sources.add_or_update_pandas("sigflow")
    asset = next((a for a in source.assets if a.name == asset_name), None) or source.add_dataframe_asset(asset_name)
    batch = next((b for b in asset.batch_definitions if b.name == "whole"), None) \
        or asset.add_batch_definition_whole_dataframe("whole")
    definition = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=suite_name, data=batch, suite=suite)
    )
    checkpoint = context.checkpoints.add_or_update(gx.Checkpoint(
        name=suite_name, validation_definitions=[definition],
        result_format={"result_format": "COMPLETE"},  # Data Docs are built once, by run()
    ))
    # named as dq_results names the run, so a Data Docs page and its rows find each other
    result = checkpoint.run(batch_parameters={"dataframe": frame},
                            run_id=RunIdentifier(run_name=f"sigflow-{run_id}", run_time=run_time))
    outcomes = []
    for validation in result.run_results.values():
        for r in validation.results:
            config = r.expectation_config
            column = _key_name(config.kwargs) if "column_list" in config.kwargs else config.kwargs.get("column") or (
                f"{config.kwargs['column_A']} > {config.kwargs['column_B']}" if "column_A" in config.kwargs else None
            )
            index = (r.result or {}).get("unexpected_index_list") or []
            sample = frame.loc[[i for i in index[:SAMPLE_ROWS] if i in frame.index]].to_dict("records")
            outcomes.append(Outcome(
                expectation=config.type, column=column, severity=config.meta.get("severity", CRITICAL),
                success=bool(r.success), unexpected_count=int((r.result or {}).get("unexpected_count") or 0),
                sample=_plain(sample), error=_error(r), observed=(r.result or {}).get("observed_value"),
                expected={k: v for k, v in config.kwargs.items() if k in ("min_value", "max_value")},
                rows=len(frame),
            ))
    return outcomes, result


def _store(context, result, table: str) -> list:
    """Keep a checkpoint result for Data Docs: the keys of its pages."""
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
    )

    for key, validation in result.run_results.items():
        # a dataframe batch's spec lacks the asset's name, which GX's page header shows
        validation.meta["batch_spec"] = {**(validation.meta.get("batch_spec") or {}), "data_asset_name": table}
        context.validation_results_store.set(key, validation)
    suites = {ExpectationSuiteIdentifier(name=v.suite_name) for v in result.run_results.values()}
    return [*suites, *result.run_results]


def _error(result) -> str | None:
    info = result.exception_info or {}
    if info.get("raised_exception"):
        return (info.get("exception_message") or "error").splitlines()[0][:200]
    return None


def _plain(rows: list[dict]) -> list[dict]:
    """Rows as log-friendly values (bytes and timestamps to text)."""
    return [{k: (v.hex() if isinstance(v, bytes) else v) for k, v in row.items()} for row in rows]


def _record(results_uri: str, run_id: str, run_time: datetime, reports: list[TableReport]) -> None:
    import pyarrow as pa

    from spark_jobs.runtime.delta.schema import arrow_schema

    rows = [
        {
            "run_id": run_id, "run_time": run_time, "table_name": r.table, "rows_checked": o.rows,
            "expectation": o.expectation, "column_name": o.column, "severity": o.severity,
            "success": o.success, "unexpected_count": o.unexpected_count,
            "unexpected_sample": json.dumps(o.sample, default=str) if o.sample else None,
            "table_version": r.increment.version if r.increment else None,
        }
        for r in reports for o in r.outcomes
    ]
    if rows:
        table_access.append(results_uri, pa.Table.from_pylist(rows, schema=arrow_schema(DQ_RESULTS)))
