"""The event-time rules of docs/semantics.md (sections 1 to 4), in plain Python.

It knows nothing of Spark: batch by batch, it drops events at or behind the watermark of
the previous batch (measured: Spark 4.2 filters late rows with offset-log entry N-1), keeps
event ids unique within the watermark delay, and emits a window once the watermark the
batch runs with (entry N, computed at the end of batch N-1) reaches the window's end.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

MINUTE_MS = 60_000


@dataclass(frozen=True)
class Event:
    event_id: str
    device_id: str
    t_ms: int
    signal: float


@dataclass
class EventTimeOracle:
    delay_ms: int = 10 * MINUTE_MS
    tumbling_ms: int = 5 * MINUTE_MS
    sliding_ms: int = 10 * MINUTE_MS
    step_ms: int = 5 * MINUTE_MS
    watermark_ms: int = 0  # offset-log entry of the next batch
    previous_watermark_ms: int = 0  # entry of the batch before: the late-row threshold
    max_event_ms: int | None = None
    dedup_expiry: dict[tuple[str, str], int] = field(default_factory=dict)  # (device_id, event_id)
    open_windows: dict[tuple, list[float]] = field(default_factory=lambda: defaultdict(list))
    emitted: dict[tuple, list[float]] = field(default_factory=dict)
    late: list[tuple[Event, int]] = field(default_factory=list)  # (event, watermark missed)
    duplicates: list[Event] = field(default_factory=list)
    kept: list[Event] = field(default_factory=list)

    def windows_of(self, t_ms: int):
        start = t_ms - t_ms % self.tumbling_ms
        yield ("tumbling", start, start + self.tumbling_ms)
        last = t_ms - t_ms % self.step_ms
        for begin in range(last - self.sliding_ms + self.step_ms, last + 1, self.step_ms):
            yield ("sliding", begin, begin + self.sliding_ms)

    def run_batch(self, events: list[Event]) -> None:
        wm = self.previous_watermark_ms
        for event in events:
            if self.max_event_ms is None or event.t_ms > self.max_event_ms:
                self.max_event_ms = event.t_ms
            if event.t_ms <= wm:
                self.late.append((event, wm))
            elif (event.device_id, event.event_id) in self.dedup_expiry:
                self.duplicates.append(event)
            else:
                self.dedup_expiry[(event.device_id, event.event_id)] = event.t_ms + self.delay_ms
                self.kept.append(event)
                for kind, start, end in self.windows_of(event.t_ms):
                    self.open_windows[(event.device_id, kind, start, end)].append(event.signal)
        self._evict()
        self.previous_watermark_ms = self.watermark_ms
        if self.max_event_ms is not None:
            self.watermark_ms = max(self.watermark_ms, self.max_event_ms - self.delay_ms)

    def run_no_data_batch(self) -> None:
        """What Spark runs when the watermark moved and no input is waiting."""
        if self.watermark_ms != self.previous_watermark_ms:
            self.run_batch([])

    def _evict(self) -> None:
        wm = self.watermark_ms
        for key in [k for k in self.open_windows if k[3] <= wm]:
            self.emitted[key] = self.open_windows.pop(key)
        self.dedup_expiry = {k: exp for k, exp in self.dedup_expiry.items() if exp > wm}

    def window_rows(self) -> set[tuple]:
        """(device, kind, start_ms, end_ms, count, avg, min, max) of every emitted window."""
        return {
            (d, kind, s, e, len(v), round(sum(v) / len(v), 6), min(v), max(v))
            for (d, kind, s, e), v in self.emitted.items()
        }
