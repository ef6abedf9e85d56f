"""A Delta table that cannot be read, said in one line: which table, which entry of its log
is damaged when one is, and the runbook. delta-rs says only "Kernel error: Json error:
Truncated record whilst reading object", naming neither, and every command that opened the
table (a run, `sigflow tables`, the report) ended in it."""

from __future__ import annotations

import json
import re

from pyarrow import fs as pafs

from spark_jobs.errors import NeedsRestart, SigflowError, first_line
from spark_jobs.runtime.checkpoint import storage

RUNBOOK = "docs/runbooks/table-damaged.md"
# at most this many log entries read for damage, newest first, where no checkpoint bounds them
NEWEST_ENTRIES = 100
LOG_FOLDER = "_delta_log"  # a table's log, under its location (Delta's protocol)
COMMIT_ENTRY = re.compile(r"\d{20}\.json")


class TableUnreadable(SigflowError):
    """The current version of a table cannot be read."""

    def __init__(self, message: str, hint: str, finding: str):
        super().__init__(message, hint)
        self.finding = finding  # the damage alone, as `sigflow tables` lists it


class TableLogDamaged(TableUnreadable, NeedsRestart):
    """A table whose log holds an entry Delta did not write: reading it again fails alike."""


def unreadable(uri: str, error: Exception) -> TableUnreadable:
    """What delta-rs' ``error`` opening the table at ``uri`` means, for people."""
    table = uri.rstrip("/").rsplit("/", 1)[-1]
    said = first_line(error)
    entry = damaged_entry(uri)
    if entry is not None:
        finding = f"its log entry {entry} is not what Delta wrote ({said})"
        return TableLogDamaged(f"table {table} cannot be read: {finding}", f"see {RUNBOOK}", finding)
    return TableUnreadable(f"table {table} cannot be read at {uri}: {said}",
                           f"check the storage it is on; a damaged log: {RUNBOOK}", said)


def damaged_entry(uri: str) -> str | None:
    """The newest commit entry of the table's log that is not JSON lines, if any, among those
    a reader reads: after the newest checkpoint (an entry before it is read by no one, and
    cannot be why the table fails)."""
    try:
        fs, root = storage.filesystem(uri)
        entries = fs.get_file_info(pafs.FileSelector(f"{root}/{LOG_FOLDER}"))
        checkpointed = _last_checkpoint(fs, f"{root}/{LOG_FOLDER}/_last_checkpoint")
    except OSError:  # the storage does not answer: nothing to say of the log
        return None
    commits = sorted((entry for entry in entries if COMMIT_ENTRY.fullmatch(entry.base_name)
                      and int(entry.base_name[:20]) > checkpointed),
                     key=lambda entry: entry.base_name, reverse=True)
    for entry in commits[:NEWEST_ENTRIES]:
        try:
            text = (storage.read_bytes(fs, entry.path) or b"").decode()
            actions = [json.loads(line) for line in text.splitlines() if line.strip()]
        except (UnicodeDecodeError, ValueError):
            return entry.base_name
        except OSError:
            return None
        if not actions or not all(isinstance(action, dict) for action in actions):
            return entry.base_name
    return None


def _last_checkpoint(fs: pafs.FileSystem, path: str) -> int:
    """The version of the table's newest checkpoint; -1 for none, or none said legibly."""
    try:
        return int(json.loads(storage.read_bytes(fs, path) or b"{}")["version"])
    except (KeyError, TypeError, ValueError):
        return -1


def set_aside(uri: str, suffix: str) -> str:
    """Move an unreadable table out of its job's way, kept for study: the job rebuilds it."""
    fs, path = storage.filesystem(uri)
    return storage.move_aside(fs, path, suffix)
