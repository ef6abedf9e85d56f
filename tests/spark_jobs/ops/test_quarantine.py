"""`sigflow quarantine`: reasons by count, each sample showing the field its reason names, and
who sent the bad records, from a real ingest run's quarantined_events."""

import json
import re
import time

from spark_jobs.ops import quarantine
from tests.helpers import produce, run_job, sigflow

NOW_MS = int(time.time() * 1000)
PADDING = "x" * 150  # an extra field first, so a sample cut at its start would miss the bad one


def _event(n: int, device: str | None, **fields) -> bytes:
    body = {"event_id": f"e{n}", "notes": PADDING, "event_time": NOW_MS, "signal": 1.0, **fields}
    if device is not None:
        body["device_id"] = device
    return json.dumps(body).encode()


def _counts(line: str, prefix: str) -> dict[str, int]:
    assert line.startswith(prefix), line
    return {name: int(n) for name, n in (part.rsplit("=", 1) for part in line.removeprefix(prefix).split(", "))}


def test_reasons_come_by_count_with_the_offending_field_and_their_senders(spark, settings):
    bad = [
        (b"d1", _event(1, "d1", signal="loud")),  # wrong_type, three times
        (b"d1", _event(2, "d1", signal="louder")),
        (b"d2", _event(3, "d2", signal="loudest")),
        (b"d3", _event(4, None)),  # missing_field, twice
        (None, _event(5, None)),
        (b"d4", b"device says hello"),  # not_json, once
    ]
    produce(settings, bad + [(b"d9", _event(9, "d9"))])  # and one good record
    run_job(spark, settings, "ingest")

    lines = quarantine.summary(settings, "1 hour", samples=1, by=("device", "key"))
    assert lines[0].startswith("quarantined in the last 1 hour: 6 records") and "malformed-surge.md" in lines[0]
    counts = [(i, *m.groups()) for i, line in enumerate(lines) if (m := re.fullmatch(r" +(\d+)  (\w+)", line))]
    assert [(n, code) for _, n, code in counts] == [("3", "wrong_type"), ("2", "missing_field"), ("1", "not_json")]
    wrong_type_sample = lines[counts[0][0] + 2]  # after the reason in words
    assert '"signal": "loud' in wrong_type_sample and wrong_type_sample.strip().startswith("…")
    assert _counts(lines[-2], "by device: ") == {"d1": 2, "(no device_id)": 2, "d2": 1, "(not JSON)": 1}
    assert _counts(lines[-1], "by producer key: ") == {"d1": 2, "d2": 1, "d3": 1, "(no key)": 1, "d4": 1}

    out = sigflow(settings, "quarantine", "--since", "1h", "--by", "device")
    assert out.returncode == 0, out.stderr
    by_device = next(line for line in out.stdout.splitlines() if line.startswith("by device: "))
    assert by_device == "by device: (no device_id)=2, d1=2, (not JSON)=1, d2=1"  # ties in name order


def test_control_characters_in_records_reach_the_terminal_escaped(spark, settings):
    """An ESC sequence in a payload or a device id would run on the on-call terminal (set its
    title, clear the screen); the CLI shows it escaped."""
    produce(settings, [
        (b"d1\x1b[2J", b"\x1b]0;owned\x07 not JSON"),  # not_json: the payload is the sample
        (b"d2", _event(2, "d2\x1b[31m", signal="loud")),  # json.dumps writes \\u001b; the id holds ESC
    ])
    run_job(spark, settings, "ingest")

    out = sigflow(settings, "quarantine", "--since", "1h", "--by", "device", "key")
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout
    assert "\\x1b]0;owned\\x07 not JSON" in out.stdout
    lines = out.stdout.splitlines()
    assert "d2\\x1b[31m=1" in next(line for line in lines if line.startswith("by device: "))
    assert "d1\\x1b[2J=1" in next(line for line in lines if line.startswith("by producer key: "))
