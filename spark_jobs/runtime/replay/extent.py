"""What device_events_raw holds of a job's topics, and whether a replay from it hands off to
Kafka with no record missing: raw must begin where Kafka's history began (offset 0; a
partition begun later lost records to raw's retention or was ingested from a later start),
and Kafka must still hold every record from where raw ends (ingest not behind retention)."""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, field
from datetime import datetime

Offsets = dict[str, dict[str, int]]


@dataclass
class RawExtent:
    """Per (topic, partition): the first offset raw holds, the offset after its last, and
    its rows; the span of their Kafka timestamps."""

    first: Offsets = field(default_factory=dict)
    end: Offsets = field(default_factory=dict)
    counts: Offsets = field(default_factory=dict)  # rows per partition
    rows: int = 0
    sent_from: datetime | None = None
    sent_until: datetime | None = None
    version: int | None = None  # of device_events_raw, read again alike by a plan made again
    # the event times of the valid events among them (device_events, where ingest typed them)
    events_from: datetime | None = None
    events_until: datetime | None = None

    @classmethod
    def of(cls, raw_uri: str, topics: list[str], after: Offsets | None = None, version: int | None = None) -> RawExtent:
        """Raw's rows of ``topics`` at ``version`` (the current one by default; those at or
        after ``after``'s offsets, when given), read a file at a time so memory stays flat
        whatever raw's size."""
        import pyarrow.dataset as ds

        from spark_jobs.runtime.delta.table_access import exists, scan, table_version

        extent = cls()
        if not exists(raw_uri):
            return extent
        extent.version = table_version(raw_uri) if version is None else version
        where = ds.field("topic").isin(topics)
        if after:  # as ORs of offset ranges, which the files' statistics prune (raw's age costs no read)
            known = [(topic, int(part)) for topic, parts in after.items() for part in parts]
            later = [(ds.field("topic") == topic) & (ds.field("partition") == int(part)) & (ds.field("offset") >= int(o))
                     for topic, parts in after.items() for part, o in parts.items()]
            others = ~functools.reduce(operator.or_, [(ds.field("topic") == t) & (ds.field("partition") == p)
                                                      for t, p in known])
            where &= functools.reduce(operator.or_, later) | others
        for batch in scan(raw_uri, ["topic", "partition", "offset", "kafka_timestamp"], where, extent.version):
            grouped = batch.group_by(["topic", "partition"]).aggregate(
                [("offset", "min"), ("offset", "max"), ("offset", "count")])
            for topic, part, low, high, count in zip(*(grouped.column(name).to_pylist() for name in (
                    "topic", "partition", "offset_min", "offset_max", "offset_count"))):
                key = str(part)
                extent.first.setdefault(topic, {})[key] = min(low, extent.first.get(topic, {}).get(key, low))
                extent.end.setdefault(topic, {})[key] = max(high + 1, extent.end.get(topic, {}).get(key, 0))
                extent.counts.setdefault(topic, {})[key] = extent.counts.get(topic, {}).get(key, 0) + count
                extent.rows += count
            extent.sent_from, extent.sent_until = _widened(extent.sent_from, extent.sent_until,
                                                           batch.column("kafka_timestamp"))
        return extent

    def ranges_text(self) -> str:
        """Each partition's offsets, e.g. ``device-events[0] 0..9,999``."""
        return ", ".join(f"{topic}[{part}] {self.first[topic][part]:,}..{end - 1:,}"
                         for topic, parts in sorted(self.end.items())
                         for part, end in sorted(parts.items(), key=lambda item: int(item[0])))

    def missing(self) -> dict[str, int]:
        """Per partition (``topic[p]``), how many offsets between its first and last raw does
        not hold: a transactional producer's commit markers take offsets, and so do rows
        deleted from raw by hand. A replay reads what is there, so its plan says so."""
        return {f"{topic}[{part}]": gap for topic, parts in sorted(self.end.items())
                for part, end in sorted(parts.items(), key=lambda item: int(item[0]))
                if (gap := end - self.first[topic][part] - self.counts[topic][part]) > 0}

    def read_event_times(self, events_uri: str) -> RawExtent:
        """The span of event times of the valid events in these offset ranges, from the
        table ingest typed them into (device_events), scanning only its files that hold them."""
        import pyarrow.dataset as ds

        from spark_jobs.runtime.delta.table_access import exists, scan

        ranges = [(ds.field("topic") == topic) & (ds.field("partition") == int(part))
                  & (ds.field("offset") >= self.first[topic][part]) & (ds.field("offset") < end)
                  for topic, parts in self.end.items() for part, end in parts.items()]
        if not ranges or not exists(events_uri):
            return self
        for batch in scan(events_uri, ["event_time"], functools.reduce(operator.or_, ranges)):
            self.events_from, self.events_until = _widened(self.events_from, self.events_until,
                                                           batch.column("event_time"))
        return self

    def describe(self) -> str:
        """What a replay of it reads, for a plan: the records, their offsets, when they were
        sent, their events' times, and the offsets raw lacks between them."""
        lacking = "".join(f"; raw lacks {n:,} of {where}'s offsets (a transactional producer's markers, or rows "
                          "deleted from raw)" for where, n in self.missing().items())
        return f"{self.rows:,} records ({self.ranges_text()}; {self.span_text()}{lacking})"

    def span_text(self) -> str:
        """When its records were sent, and the event times of its valid events."""
        if self.sent_from is None:
            return "no records"
        sent = f"sent {self.sent_from:%Y-%m-%d %H:%M:%S} to {self.sent_until:%Y-%m-%d %H:%M:%S} UTC (Kafka time)"
        if self.events_from is None:
            return sent
        return f"{sent}, events timed {self.events_from:%Y-%m-%d %H:%M:%S} to {self.events_until:%Y-%m-%d %H:%M:%S} UTC"


def _widened(low: datetime | None, high: datetime | None, times) -> tuple[datetime | None, datetime | None]:
    """(low, high) widened to hold ``times`` (an Arrow column; its nulls ignored)."""
    import pyarrow.compute as pc

    span = pc.min_max(times).as_py()
    if span["min"] is None:
        return low, high
    return min(filter(None, (low, span["min"]))), max(filter(None, (high, span["max"])))


def hand_off_gaps(extent: RawExtent, start: Offsets, kafka_bounds: dict[str, dict[int, tuple[int, int]]]) -> list[str]:
    """Why a replay from ``start`` through raw, then Kafka from raw's end, would miss records
    ([] when it would not), per partition Kafka has: records before raw's first that the
    replay needs, or records after raw's end that Kafka no longer holds."""
    gaps = []
    for topic, parts in sorted(kafka_bounds.items()):
        for part, (earliest, _) in sorted(parts.items()):
            key = str(part)
            needed_from = int(start.get(topic, {}).get(key, 0))
            first = extent.first.get(topic, {}).get(key)
            end = extent.end.get(topic, {}).get(key, needed_from)
            if first is not None and first > needed_from:
                where = "Kafka still holds them: recover --from earliest" if earliest <= needed_from else \
                    "neither raw nor Kafka holds them"
                gaps.append(f"raw holds {topic}[{part}] from offset {first:,}, the replay needs it from "
                            f"{needed_from:,} ({where})")
            if earliest > end:
                gaps.append(f"Kafka retention removed {topic}[{part}] offsets {end:,}..{earliest - 1:,} and raw "
                            "does not have them (ingest fell behind retention)")
    return gaps
