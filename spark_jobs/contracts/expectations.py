"""What a table's rows must hold, declared with the table (``TableSpec.quality``) in plain
data; ``sigflow quality`` checks each rule as a Great Expectations expectation
(spark_jobs/ops/quality.py). Every checked table's key is never null, and its columns are
exactly its schema's, without saying so here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ordered:
    """``later`` is greater than ``earlier`` (or equal, with ``or_equal``) in every row."""

    later: str
    earlier: str
    or_equal: bool = False


@dataclass(frozen=True)
class Quality:
    # filled by the jobs whenever events flow: a warning when it has no row (quarantine and
    # the alert tables may rightly be empty: docs/runbooks/dq-failure.md)
    filled: bool = False
    unique_key: bool = False  # the key identifies one row
    not_null: tuple[str, ...] = ()
    ordered: tuple[Ordered, ...] = ()
    at_least_one: tuple[str, ...] = ()  # counts of what a row sums up
    in_signal_range: tuple[str, ...] = ()  # between the signal_min and signal_max settings
    allowed: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (column, the values it may hold)
    fresh: str | None = None  # a warning when its newest value is older than quality_freshness
