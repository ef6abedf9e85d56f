"""Sending records to Kafka outside Spark (``sigflow produce``, ``sigflow simulate``, the
tests and benchmarks), with kafka-python: the client the producing teams' gateways use, in
pure Python with no native library, so sigflow sends as they do. Records are acknowledged by
the in-sync replicas (acks=all) under idempotence.

``FileRecords`` is a file of JSON lines as records, keyed by each line's device id.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from spark_jobs.contracts.file_check import numbered_lines
from spark_jobs.errors import BrokerUnavailable, Interrupted, SigflowError
from spark_jobs.runtime.kafka.admin import check_reachable, topic_partitions
from spark_jobs.runtime.kafka.connection import KafkaConnection
from spark_jobs.runtime.waiting import wait_until

log = logging.getLogger("sigflow.kafka")
FLUSH_S = 30  # how long a paced send waits for the records handed over when it ends

def produce_records(
    target: KafkaConnection | str,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes]],
    rate_per_s: float | None = None,
    total: int | None = None,
    progress: bool = False,
) -> int:
    """Send (key, value) pairs; returns how many the broker acknowledged. Records Kafka did
    not take (it stopped answering mid-run) are the run's error, counted."""
    from kafka.errors import KafkaError, KafkaTimeoutError
    from tqdm import tqdm

    conn = KafkaConnection.of(target)
    # Refused credentials, an unknown CA or a missing topic fail here, in one line, rather
    # than after a minute of the producer's retries (one log line each).
    check_reachable(conn)
    topic_partitions(conn, topic)
    try:
        producer = _producer_class()(
            # acks=all with idempotence: a record is acknowledged once the in-sync replicas
            # hold it, and a retry after a lost leader cannot write it twice.
            **conn.kafka_python(), linger_ms=5, acks="all", enable_idempotence=True,
            max_request_size=4 * 1024 * 1024, request_timeout_ms=15000,
            max_block_ms=FLUSH_S * 1000,  # a buffer full while Kafka is away waits no longer
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
        _flush_while_answered(producer, futures)
    except KafkaTimeoutError:
        pass  # the buffer stayed full: Kafka stopped answering; what it did not take is counted below
    except KafkaError as exc:
        raise SigflowError(f"producing to {topic} failed after {len(futures):,} records: {exc}") from None
    except KeyboardInterrupt:
        producer.close(timeout=FLUSH_S)  # delivers what was handed over before the signal, if Kafka answers
        of_total = f" of {total:,}" if total else ""
        raise Interrupted(f"interrupted after {_acknowledged(futures):,}{of_total} records sent to {topic}",
                          "the records sent are in Kafka; a new run sends new ones") from None
    finally:
        producer.close(timeout=FLUSH_S)
        meter.close()
    acknowledged = _acknowledged(futures)
    if acknowledged < len(futures):
        refused = next((f.exception for f in futures if f.is_done and f.failed()), None)
        raise SigflowError(
            f"{len(futures) - acknowledged:,} of {len(futures):,} records were not delivered to {topic} at Kafka "
            f"{conn} ({refused or f'no answer for {FLUSH_S} s'}); {acknowledged:,} delivered",
            "check that Kafka answers (`sigflow broker status`, or the cluster); the records delivered are in "
            "Kafka: send the rest again, and dedup drops what arrives twice")
    return acknowledged


def _acknowledged(futures) -> int:
    return sum(1 for f in futures if f.is_done and f.succeeded())


def _flush_while_answered(producer, futures) -> None:
    """Wait for Kafka's answers while they keep coming: until every record handed over is
    acknowledged or refused, or none has been answered for ``FLUSH_S``. kafka-python 3.0
    never fails a record whose partition's leader it lost with the broker, so an unbounded
    flush waited for ever."""
    from kafka.errors import KafkaTimeoutError

    answered = [-1, time.monotonic()]  # records answered, and when that last grew

    def flushed() -> bool:
        try:
            producer.flush(timeout=1)
            return True
        except KafkaTimeoutError:
            done = sum(1 for f in futures if f.is_done)
            if done > answered[0]:
                answered[:] = [done, time.monotonic()]
            return False

    wait_until(flushed, timeout_s=float("inf"), every_s=0,
               give_up=lambda: time.monotonic() - answered[1] >= FLUSH_S)


@functools.cache
def _producer_class():
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    class Producer(KafkaProducer):
        """kafka-python's producer, whose close gives up on what Kafka has not taken within its
        timeout: 3.0's raises KafkaTimeoutError from its own flush instead, and again when the
        producer is collected ("Exception ignored in __del__")."""

        def close(self, timeout=None, null_logger=False):
            with contextlib.suppress(KafkaTimeoutError):
                super().close(timeout=timeout, null_logger=null_logger)

    return Producer


@dataclass
class Sent:
    """What a paced send handed to Kafka and Kafka acknowledged, per topic."""

    acknowledged: dict[str, int] = field(default_factory=dict)
    failed: int = 0
    seconds: float = 0.0


def send_paced(
    target: KafkaConnection | str,
    records: Iterable[tuple[str, bytes | None, bytes]],
    rate_per_s: float,
    paced_topic: str,
    duration_s: float | None = None,
    progress: bool = False,
) -> Sent:
    """Send (topic, key, value) records as a source that runs for a long time does: the
    records of ``paced_topic`` at ``rate_per_s`` by the wall clock (those of other topics as
    they come between them), each taken from ``records`` only when its time comes, until
    ``duration_s`` has passed or, without one, until interrupted. Acknowledgements are
    counted as they arrive, so memory does not grow with the run. An interruption
    (Ctrl-C, SIGTERM) ends it after delivering what was handed over: the count says so.

    With confluent-kafka (librdkafka), acks=all and idempotence as above: a record costs
    about a seventh of the CPU it costs through kafka-python's pure-Python client
    (docs/streaming-facts.md), which matters beside the jobs on the same cores."""
    from confluent_kafka import KafkaError, KafkaException, Producer
    from tqdm import tqdm

    conn = KafkaConnection.of(target)
    check_reachable(conn)
    sent = Sent()
    unanswered = threading.Event()  # no broker answers: said once, until one does again

    def delivered(error, message) -> None:  # on this thread, from poll() and flush()
        unanswered.clear()
        if error is not None:
            sent.failed += 1
        else:
            sent.acknowledged[message.topic()] = sent.acknowledged.get(message.topic(), 0) + 1

    def client_error(error) -> None:
        if error.code() == KafkaError._ALL_BROKERS_DOWN and not unanswered.is_set():
            unanswered.set()
            log.warning("Kafka at %s does not answer: the records made meanwhile wait in the producer until it "
                        "does (%d s at most after the last one)", conn, FLUSH_S)

    # librdkafka's own lines (a refused connection, several a second) go to the debug log:
    # what they say reaches the console once, above, and in the count at the end
    producer = Producer({**conn.confluent(), "linger.ms": 20, "acks": "all", "enable.idempotence": True,
                         "message.max.bytes": 4 * 1024 * 1024, "on_delivery": delivered,
                         "error_cb": client_error, "logger": _ClientLog()})
    meter = tqdm(desc=f"produce {paced_topic}", unit=" records", disable=None if progress else True)
    started, paced, pending = time.monotonic(), 0, iter(records)
    # Ctrl-C and SIGTERM end the run between two records: as an exception they could land
    # inside a delivery report, which Kafka holds and this count would miss
    with _stop_on_signals() as stopped:
        try:
            while not stopped.is_set() and (duration_s is None or paced / rate_per_s < duration_s):
                # the next paced record's time; delivery reports meanwhile
                producer.poll(max(started + paced / rate_per_s - time.monotonic(), 0))
                record = next(pending, None)  # made now: an event's time is the clock's
                if record is None or stopped.is_set():
                    break
                topic, key, value = record
                paced += topic == paced_topic
                hand_over(producer, topic, key, value)
                meter.update()
            undelivered = producer.flush(FLUSH_S)
        except KafkaException as exc:
            raise SigflowError(f"producing to {paced_topic} failed after {_counts(sent)}: {exc}") from None
        finally:
            meter.close()
    sent.seconds = time.monotonic() - started
    if undelivered:
        raise SigflowError(
            f"{undelivered:,} records were not delivered to Kafka at {conn} within {FLUSH_S} s of the last one; "
            f"{_counts(sent)} delivered in {sent.seconds:.0f} s",
            "check that Kafka answers (`sigflow broker status`, or the cluster); the records delivered are in "
            "Kafka, and a new run sends new ones")
    if stopped.is_set():
        raise Interrupted(f"interrupted after {_counts(sent)} sent in {sent.seconds:.0f} s",
                          "the records sent are in Kafka; a new run sends new ones")
    return sent


class _ClientLog:
    """librdkafka's log lines as sigflow's debug records."""

    def log(self, level: int, message: str, *args) -> None:
        log.debug("librdkafka: " + message, *args)


def hand_over(producer, topic: str, key: bytes | None, value: bytes) -> None:
    """Hand one record to a confluent-kafka producer; while librdkafka's queue is full,
    serve deliveries and try again."""
    while True:
        try:
            producer.produce(topic, value=value, key=key)
            return
        except BufferError:
            producer.poll(0.05)


def _counts(sent: Sent) -> str:
    return ", ".join(f"{n:,} to {topic}" for topic, n in sent.acknowledged.items()) or "no record"


@contextmanager
def _stop_on_signals():
    """An event set by SIGINT or SIGTERM for the block (in the main thread: elsewhere none
    arrives), the handlers before it restored after."""
    stopped = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stopped
        return
    before = {signum: signal.signal(signum, lambda *_: stopped.set()) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stopped
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


@contextmanager
def _signals_deferred():
    """Hold SIGINT and SIGTERM back for the block; one that arrived meanwhile is handled
    (as KeyboardInterrupt, see cli/main.py) right after it."""
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
        for number, line in numbered_lines(self.path):
            if len(line) > MAX_LINE_BYTES:
                self.refused.append(f"line {number}: {len(line):,} bytes is over the {MAX_LINE_BYTES:,}-byte "
                                    "limit of a Kafka record (message.max.bytes); not sent")
                continue
            key = _device_key(line)
            self.unkeyed += key is None
            yield key, line


def _device_key(line: bytes) -> bytes | None:
    try:
        parsed = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than Python parses
        return None
    if isinstance(parsed, dict) and isinstance(parsed.get("device_id"), str):
        return parsed["device_id"].encode("utf-8", "surrogatepass")
    return None
