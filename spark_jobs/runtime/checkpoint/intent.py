"""A restart being applied: what it changes and the command that finishes it, written beside
the checkpoint (``<checkpoint>.lease/sigflow.applying.json``) before its first change and
deleted after its last.

An apply that dies half way leaves it behind. Until the same restart is applied again, the
job refuses to run and every other restart refuses to plan: a resume or a run on top of a
recover that moved the checkpoint aside would read Kafka from the start into tables that
still hold every row. A file that is there but cannot be read is never taken as "no
restart": it refuses too, naming the file.
"""

from __future__ import annotations

import json

from pyarrow import fs as pafs
from pydantic import BaseModel, ConfigDict, ValidationError

from spark_jobs.errors import NeedsRestart
from spark_jobs.runtime.checkpoint import storage

INTENT_FILE = "sigflow.applying.json"
RUNBOOK = "docs/runbooks/job-crashed.md"


class RestartIntent(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    action: str
    job: str
    steps: list[str]
    # the command that applies the same restart again, finishing it; written by every apply
    # since the field exists, missing from an intent an older sigflow left
    command: str = ""

    def finishing_command(self) -> str:
        return self.command or f"sigflow checkpoint {self.action} {self.job} ... --yes with the same options"


class UnreadableIntent(NeedsRestart):
    """An intent file that is there but is not one: which restart was half applied is unknown."""


def path(folder: str) -> str:
    return f"{folder}/{INTENT_FILE}"


def read(fs: pafs.FileSystem, folder: str) -> RestartIntent | None:
    """The pending restart's intent; None only when no file is there."""
    where = path(folder)
    try:
        raw = storage.read_bytes(fs, where)
    except OSError as exc:
        if fs.get_file_info(where).type == pafs.FileType.NotFound:
            return None
        raise _unreadable(where, f"it cannot be read ({exc})") from None
    if raw is None:
        return None
    try:
        return RestartIntent.model_validate(json.loads(raw.decode()))
    except (UnicodeDecodeError, ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise _unreadable(where, f"it is not a restart's intent ({first})") from None


def record(fs: pafs.FileSystem, folder: str, intent: RestartIntent) -> None:
    """Write ``intent`` whole (storage.write_whole)."""
    storage.write_whole(fs, path(folder), intent.model_dump_json().encode())


def clear(fs: pafs.FileSystem, folder: str) -> None:
    try:
        fs.delete_file(path(folder))
    except (FileNotFoundError, OSError):
        pass


def _unreadable(where: str, why: str) -> UnreadableIntent:
    return UnreadableIntent(
        f"a restart's intent file {where} is there but {why}: a restart may be half applied, "
        "so nothing runs or restarts on this checkpoint",
        f"check the job's checkpoint and tables against {RUNBOOK} (section 'A restart did not finish'), "
        "then delete that file and apply the restart you were applying again",
    )
