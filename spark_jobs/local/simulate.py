"""Device traffic for demos, tests and benchmarks: events with every defect we must handle.

Generation is pure and seeded (``generate_events``) so tests can compute the expected
tables from the very records produced; ``runtime/kafka/producer.py`` sends them.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from datetime import datetime, timezone

MALFORMED_KINDS = (
    "not_json", "truncated_json", "binary", "missing_field", "wrong_type",
    "bad_time", "non_finite", "json_array", "far_future", "far_past", "huge",
)
HUGE_PAYLOAD_BYTES = 300 * 1024  # over the contract's 256 KiB limit


RECENT = 50  # how far back a re-sent event is taken from
RESENT_KINDS = ("event", "out_of_order")  # what a device sends again


@dataclass(frozen=True)
class SimRecord:
    key: bytes | None
    value: bytes
    kind: str  # "event", "duplicate", "late", "out_of_order" or a malformed kind


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def event_payload(event_id: str, device_id: str, event_time_ms: int, signal: float, **extra) -> bytes:
    body = {"event_id": event_id, "device_id": device_id, "event_time": iso(event_time_ms),
            "signal": signal, **extra}
    return json.dumps(body).encode()


def _malformed(kind: str, rng: random.Random, device: str, t_ms: int, n: int) -> bytes:
    good = {"event_id": f"bad-{n}", "device_id": device, "event_time": iso(t_ms), "signal": 1.0}
    if kind == "not_json":
        return b"device says hello"
    if kind == "truncated_json":
        return json.dumps(good).encode()[: rng.randint(5, 30)]
    if kind == "binary":
        return bytes([0xFF, 0xFE, 0x00, 0x9C]) + rng.randbytes(12)
    if kind == "missing_field":
        good.pop(rng.choice(["event_id", "device_id", "event_time", "signal"]))
    elif kind == "wrong_type":
        good["signal"] = "high"
    elif kind == "bad_time":
        good["event_time"] = "yesterday at noon"
    elif kind == "non_finite":
        return json.dumps(good).encode().replace(b'"signal": 1.0', b'"signal": 1e999')
    elif kind == "json_array":
        return json.dumps([good]).encode()
    elif kind == "far_future":  # a device clock years ahead: would drag the watermark along
        good["event_time"] = iso(t_ms + rng.randint(2, 30) * 365 * 86_400_000)
    elif kind == "far_past":  # a device clock reset to the epoch
        good["event_time"] = iso(rng.randint(0, 86_400_000))
    elif kind == "huge":
        good["firmware_dump"] = "x" * HUGE_PAYLOAD_BYTES
    return json.dumps(good).encode()


@dataclass(frozen=True)
class Defects:
    """The shares of a stream's records that are late, out of order, re-sent and malformed."""

    late_ratio: float = 0.02
    out_of_order_ratio: float = 0.05
    duplicate_ratio: float = 0.03
    malformed_ratio: float = 0.03

    def record(self, rng: random.Random, n: int, stream: str, device: str, t_ms: int,
               sent: list[SimRecord]) -> SimRecord:
        """Record ``n`` of a stream, sent at ``t_ms`` after ``sent``: malformed, a re-send of
        one of the last RECENT events, or an event on time, late (30 to 60 minutes behind) or
        out of order (up to 2 minutes behind). Its event_id is ``evt-{stream}-{n}``."""
        roll = rng.random()
        if roll < self.malformed_ratio:
            kind = rng.choice(MALFORMED_KINDS)
            return SimRecord(device.encode(), _malformed(kind, rng, device, t_ms, n), kind)
        roll -= self.malformed_ratio
        if roll < self.duplicate_ratio and sent:
            original = rng.choice([r for r in sent[-RECENT:] if r.kind in RESENT_KINDS] or [None])
            if original is not None:
                return SimRecord(original.key, original.value, "duplicate")
        roll -= self.duplicate_ratio
        kind = "event"
        if roll < self.late_ratio:
            kind, t_ms = "late", t_ms - rng.randint(30, 60) * 60_000
        elif roll < self.late_ratio + self.out_of_order_ratio:
            kind, t_ms = "out_of_order", t_ms - rng.randint(1, 120) * 1000
        signal = round(rng.gauss(50, 15), 3)
        return SimRecord(device.encode(), event_payload(f"evt-{stream}-{n}", device, t_ms, signal, firmware="1.4.2"),
                         kind)


def generate_events(
    count: int,
    devices: int = 10,
    seed: int = 7,
    start_ms: int | None = None,
    spacing_ms: int = 1000,
    late_ratio: float = 0.02,
    out_of_order_ratio: float = 0.05,
    duplicate_ratio: float = 0.03,
    malformed_ratio: float = 0.03,
) -> list[SimRecord]:
    """``count`` records whose event times advance by ``spacing_ms``, with defects mixed in.

    late: 30 to 60 minutes behind the stream (beyond a 10-minute watermark);
    out_of_order: up to 2 minutes behind (within it); duplicate: an earlier event re-sent.
    """
    rng = random.Random(seed)
    start_ms = start_ms if start_ms is not None else int(time.time() * 1000) - count * spacing_ms
    defects = Defects(late_ratio, out_of_order_ratio, duplicate_ratio, malformed_ratio)
    sent: list[SimRecord] = []
    for n in range(count):
        device = f"device-{rng.randrange(devices):04d}"
        sent.append(defects.record(rng, n, str(seed), device, start_ms + n * spacing_ms, sent))
    return sent


def generate_alerts(
    events: list[SimRecord], every: int = 50, seed: int = 7, silent_ratio: float = 0.3,
    malformed_ratio: float = 0.05,
) -> list[SimRecord]:
    """About one alert per ``every`` events, at an event's time. A ``silent_ratio`` share name
    a device that sends no telemetry (they end in alerts_without_telemetry)."""
    rng = random.Random(seed)
    alerts = []
    for n, record in enumerate(r for r in events if r.kind == "event"):
        if n % every:
            continue
        event = json.loads(record.value)
        t_ms = int(datetime.fromisoformat(event["event_time"].replace("Z", "+00:00")).timestamp() * 1000)
        silent = rng.random() < silent_ratio
        device = f"silent-{rng.randrange(5):02d}" if silent else event["device_id"]
        body = {
            "alert_id": f"alert-{seed}-{n}", "device_id": device, "alert_time": iso(t_ms),
            "severity": rng.choice(["critical", "warning", "info"]), "kind": "threshold",
        }
        kind = "silent_alert" if silent else "alert"
        if rng.random() < malformed_ratio:
            body["severity"], kind = "catastrophic", "bad_severity"
        alerts.append(SimRecord(device.encode(), json.dumps(body).encode(), kind))
    return alerts
