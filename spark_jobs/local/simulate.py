"""Device traffic for demos, tests and benchmarks: events with every defect we must handle.

Generation is pure and seeded (``generate_events``) so tests can compute the expected
tables from the very records produced; ``produce_records`` sends them with kafka-python.
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterable, Iterator

from spark_jobs.errors import BrokerUnavailable, Interrupted, SigflowError
from spark_jobs.runtime.kafka.connection import KafkaConnection

MALFORMED_KINDS = (
    "not_json", "truncated_json", "binary", "missing_field", "wrong_type",
    "bad_time", "non_finite", "json_array", "far_future", "far_past", "huge",
)
HUGE_PAYLOAD_BYTES = 300 * 1024  # over the contract's 256 KiB limit


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
    sent: list[SimRecord] = []
    for n in range(count):
        device = f"device-{rng.randrange(devices):04d}"
        t_ms = start_ms + n * spacing_ms
        roll = rng.random()
        if roll < malformed_ratio:
            kind = rng.choice(MALFORMED_KINDS)
            sent.append(SimRecord(device.encode(), _malformed(kind, rng, device, t_ms, n), kind))
            continue
        roll -= malformed_ratio
        if roll < duplicate_ratio and sent:
            original = rng.choice([r for r in sent[-50:] if r.kind in ("event", "out_of_order")] or [None])
            if original is not None:
                sent.append(SimRecord(original.key, original.value, "duplicate"))
                continue
        roll -= duplicate_ratio
        kind = "event"
        if roll < late_ratio:
            kind, t_ms = "late", t_ms - rng.randint(30, 60) * 60_000
        elif roll < late_ratio + out_of_order_ratio:
            kind, t_ms = "out_of_order", t_ms - rng.randint(1, 120) * 1000
        signal = round(rng.gauss(50, 15), 3)
        value = event_payload(f"evt-{seed}-{n}", device, t_ms, signal, firmware="1.4.2")
        sent.append(SimRecord(device.encode(), value, kind))
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


def produce_records(
    target: KafkaConnection | str,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes]],
    rate_per_s: float | None = None,
    total: int | None = None,
    progress: bool = False,
) -> int:
    """Send (key, value) pairs; returns how many the broker acknowledged."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError
    from tqdm import tqdm

    from spark_jobs.runtime.kafka.client import check_reachable, topic_partitions

    conn = KafkaConnection.of(target)
    # Refused credentials, an unknown CA or a missing topic fail here, in one line, rather
    # than after a minute of the producer's retries (one log line each).
    check_reachable(conn)
    topic_partitions(conn, topic)
    try:
        producer = KafkaProducer(
            # acks=all with idempotence: a record is acknowledged once the in-sync replicas
            # hold it, and a retry after a lost leader cannot write it twice.
            **conn.kafka_python(), linger_ms=5, acks="all", enable_idempotence=True,
            max_request_size=4 * 1024 * 1024, request_timeout_ms=15000,
        )
    except KafkaError:
        raise BrokerUnavailable(
            f"Kafka at {conn} did not answer",
            "start the embedded broker with `sigflow broker start`, or set KAFKA_BOOTSTRAP_SERVERS",
        ) from None
    # a bar with rate and ETA on a terminal; nothing when not a terminal (disable=None)
    meter = tqdm(total=total, desc=f"produce {topic}", unit=" records", disable=None if progress else True)
    futures = []
    started = time.monotonic()
    try:
        for key, value in records:
            # A signal landing inside send() could leave a record in the producer's buffer
            # with no future to count it by (CI saw the message say one more than Kafka
            # held): the hand-over and its bookkeeping happen with signals held back.
            with _signals_deferred():
                futures.append(producer.send(topic, key=key, value=value))
            if rate_per_s:
                ahead = len(futures) / rate_per_s - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
            meter.update()
        producer.flush()
        for future in futures:
            future.get(timeout=30)
    except KafkaError as exc:
        raise SigflowError(f"producing to {topic} failed after {len(futures)} records: {exc}") from None
    except KeyboardInterrupt:
        producer.close()  # delivers what was handed over before the signal
        acknowledged = sum(1 for f in futures if f.is_done and f.succeeded())
        of_total = f" of {total:,}" if total else ""
        raise Interrupted(f"interrupted after {acknowledged:,}{of_total} records sent to {topic}",
                          "the records sent are in Kafka; a new run sends new ones") from None
    finally:
        producer.close()
        meter.close()
    return len(futures)


@contextmanager
def _signals_deferred():
    """Hold SIGINT and SIGTERM back for the block; one that arrived meanwhile is handled
    (as KeyboardInterrupt, see cli.py) right after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


# Kafka's default message.max.bytes is 1,048,588 bytes with the record's overhead: a longer
# line would fail the whole produce at the broker, so it is refused alone, by line number.
MAX_LINE_BYTES = 1_000_000


@dataclass
class FileRecords:
    """``sigflow produce``: each non-empty line of a file as one record, as is. The key is
    the line's device_id when it is a JSON object with a string one; any other line (not
    JSON, nested too deep to parse, no device_id) is sent unkeyed. A line over
    MAX_LINE_BYTES is refused, with its number. Content never stops the file."""

    path: str
    unkeyed: int = 0
    refused: list[str] = field(default_factory=list)

    def __iter__(self) -> Iterator[tuple[bytes | None, bytes]]:
        for number, line in _numbered_lines(self.path):
            if len(line) > MAX_LINE_BYTES:
                self.refused.append(f"line {number}: {len(line):,} bytes is over the {MAX_LINE_BYTES:,}-byte "
                                    "limit of a Kafka record (message.max.bytes); not sent")
                continue
            key = _device_key(line)
            self.unkeyed += key is None
            yield key, line


def _numbered_lines(path: str) -> Iterator[tuple[int, bytes]]:
    """Each non-empty line of a file, without its line end, with its number."""
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.rstrip(b"\r\n")
            if line:
                yield number, line


@dataclass(frozen=True)
class FileCheck:
    """``sigflow produce --validate``: a file's lines against a contract, before any is sent."""

    contract: str
    lines: int
    failures: list[tuple[int, str, str]]  # (line number, reason code, reason), the first ones
    failed: int

    def describe(self) -> list[str]:
        return [f"line {number}: {code}: {reason}" for number, code, reason in self.failures]


def check_file(path: str, contract, max_ahead_ms: float, shown: int = 10) -> FileCheck:
    """Each non-empty line as the jobs would take it, with now as its Kafka timestamp."""
    from spark_jobs.contracts.json_schema import problem

    now_ms = time.time() * 1000
    lines = failed = 0
    failures: list[tuple[int, str, str]] = []
    for number, line in _numbered_lines(path):
        lines += 1
        found = problem(contract, line, now_ms, max_ahead_ms)
        if found is not None:
            failed += 1
            if len(failures) < shown:
                failures.append((number, found.code, found.detail))
    return FileCheck(contract.name, lines, failures, failed)


def _device_key(line: bytes) -> bytes | None:
    try:
        parsed = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than Python parses
        return None
    if isinstance(parsed, dict) and isinstance(parsed.get("device_id"), str):
        return parsed["device_id"].encode("utf-8", "surrogatepass")
    return None
