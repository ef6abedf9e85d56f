"""``sigflow produce --validate``: a file's lines checked against a topic's contract, as the
jobs would take each one, before any is sent (the producing teams' tool)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator


def numbered_lines(path: str) -> Iterator[tuple[int, bytes]]:
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
    for number, line in numbered_lines(path):
        lines += 1
        found = problem(contract, line, now_ms, max_ahead_ms)
        if found is not None:
            failed += 1
            if len(failures) < shown:
                failures.append((number, found.code, found.detail))
    return FileCheck(contract.name, lines, failures, failed)
