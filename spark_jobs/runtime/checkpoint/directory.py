"""Read (and, for on-call tools, edit) a Structured Streaming checkpoint directory.

Layout written by Spark: ``offsets/<batch>`` (written before a batch runs: a version line,
the batch metadata with ``batchWatermarkMs``, then one JSON offset line per source),
``commits/<batch>`` (written after the batch succeeded), ``metadata`` (the query id) and
``state/``. sigflow adds ``sigflow.json`` holding the app id its Delta commits carry.
Files are reached through pyarrow.fs so local paths and object-store URIs both work.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from pyarrow import fs as pafs

from spark_jobs.errors import CheckpointDamaged, CheckpointIdentityLost, SigflowError
from spark_jobs.runtime.checkpoint import intent as intents
from spark_jobs.runtime.checkpoint import storage
from spark_jobs.runtime.checkpoint.intent import RestartIntent
from spark_jobs.runtime.identifiers import checked

# sigflow.json's record of the Delta tables the job wrote, by their ids
TABLE_IDS_KEY = "table_ids"


@dataclass(frozen=True)
class BatchOffsets:
    batch_id: int
    watermark_ms: int
    batch_timestamp_ms: int
    sources: list[Any]  # one parsed JSON offset per source, in the query's source order
    conf: dict[str, str] = field(default_factory=dict)  # the Spark confs the query keeps for good


class Checkpoint:
    def __init__(self, uri: str):
        self.uri = uri
        self.fs, self.path = storage.filesystem(uri)

    def _read(self, relative: str) -> str | None:
        """The file's text; None only when it is not there (storage.py); CheckpointDamaged
        when it is not UTF-8, as no file Spark or sigflow writes is."""
        raw = storage.read_bytes(self.fs, f"{self.path}/{relative}")
        try:
            return None if raw is None else raw.decode()
        except UnicodeDecodeError:
            raise _damaged(self.uri, relative, "is not text (UTF-8)") from None

    def _batches(self, folder: str) -> list[int]:
        selector = pafs.FileSelector(f"{self.path}/{folder}", allow_not_found=True)
        ids = []
        for info in storage.patiently()(self.fs.get_file_info, selector):
            if info.type == pafs.FileType.File and info.base_name.isdigit():
                ids.append(int(info.base_name))
        return sorted(ids)

    def exists(self) -> bool:
        return bool(self._batches("offsets")) or self._read("metadata") is not None

    def offset_batches(self) -> list[int]:
        return self._batches("offsets")

    def committed_batches(self) -> list[int]:
        return self._batches("commits")

    def last_committed(self) -> int | None:
        committed = self.committed_batches()
        return committed[-1] if committed else None

    def offsets(self, batch_id: int) -> BatchOffsets | None:
        text = self._read(f"offsets/{batch_id}")
        if text is None:
            return None
        try:
            return _parsed_offsets(batch_id, text)
        except (ValueError, IndexError, TypeError, AttributeError):
            raise _damaged(self.uri, f"offsets/{batch_id}", "is truncated or not the offsets Spark writes") from None

    def committed_offsets(self) -> dict[str, dict[str, int]]:
        """{topic: {partition: offset}} the last committed batch read up to ({} before one)."""
        last = self.last_committed()
        batch = self.offsets(last) if last is not None else None
        return {topic: parts for source in (batch.sources if batch else []) if source
                for topic, parts in source.items()}

    def committed_through(self, ends: dict[str, dict[int, int]]) -> bool:
        """Whether committed batches have read every partition up to ``ends``."""
        committed = self.committed_offsets()
        return all(int(committed.get(topic, {}).get(str(p), 0)) >= end
                   for topic, parts in ends.items() for p, end in parts.items())

    def latest_offsets(self) -> BatchOffsets | None:
        batches = self.offset_batches()
        return self.offsets(batches[-1]) if batches else None

    # ---- sigflow's own record in the checkpoint (sigflow.json) --------------------------
    def identity(self) -> dict[str, Any]:
        """sigflow.json: the ids its Delta commits carry and what restarts recorded; raises
        CheckpointDamaged for a file that is not a JSON object."""
        text = self._read("sigflow.json")
        try:
            identity = json.loads(text) if text else {}
        except ValueError:
            identity = None
        if not isinstance(identity, dict):
            raise _damaged(self.uri, "sigflow.json", "is damaged (not a JSON object)", "sigflow.json is not a JSON object")
        for key in ("app_id", "checkpoint_id"):  # they go into Delta predicates and commit tags
            if key in identity:
                try:
                    checked(identity[key], key, f"{self.uri}/sigflow.json")
                except SigflowError as refused:
                    raise CheckpointDamaged(refused.message, RECOVER_HINT,
                                            f"sigflow.json's {key} is not an identifier sigflow writes") from None
        return identity

    def save_identity(self, identity: dict[str, Any]) -> None:
        """Replace sigflow.json whole: a crash mid-write must not leave half a file, or none.
        Written aside and renamed (atomic on local and HDFS-like storage; an object store's
        put is whole by itself)."""
        self.fs.create_dir(self.path, recursive=True)
        final = f"{self.path}/sigflow.json"
        aside = f"{self.path}/.sigflow.json.{uuid.uuid4().hex[:8]}.tmp"
        with self.fs.open_output_stream(aside) as out:
            out.write(json.dumps(identity, indent=1).encode())
        self.fs.move(aside, final)

    def table_ids(self) -> dict[str, str]:
        """Each table this checkpoint's job has written, by the id Delta gave it when it was
        created (``record_table_ids``); raises CheckpointDamaged when sigflow.json's entry is
        not what sigflow writes."""
        ids = self.identity().get(TABLE_IDS_KEY, {})
        if not (isinstance(ids, dict) and all(isinstance(v, str) for v in ids.values())):
            raise _damaged(self.uri, "sigflow.json", f"is damaged (its {TABLE_IDS_KEY} is not a map of ids)",
                           f"sigflow.json's {TABLE_IDS_KEY} is not a map of table ids")
        return ids

    def record_table_ids(self, ids: dict[str, str]) -> None:
        """Keep the tables' ids beside the ones recorded (a table named again: its new id)."""
        identity = self.identity()
        merged = {**self.table_ids(), **ids}
        if identity.get(TABLE_IDS_KEY) != merged:
            self.save_identity({**identity, TABLE_IDS_KEY: merged})

    def app_id(self, job: str) -> str:
        """The id this checkpoint's Delta commits are tagged with, created on first use.

        Tied to the checkpoint, not the job name: a fresh checkpoint restarts batch ids at 0,
        and must not be mistaken for batches an earlier checkpoint already wrote.
        """
        identity = self.check_identity_kept(job)
        if "app_id" not in identity:
            identity = {"app_id": _new_app_id(job), "job": job, **identity}
            self.save_identity(identity)
        return identity["app_id"]

    def check_identity_kept(self, job: str) -> dict:
        """sigflow.json, refused when it is gone from a checkpoint with batches: a new id would
        let the batch in flight be appended a second time under it."""
        identity = self.identity()
        if "app_id" not in identity and self.offset_batches():
            raise CheckpointIdentityLost(
                f"the checkpoint at {self.uri} has batches (offsets/) but no sigflow.json, the id "
                "its Delta commits carry: a new one would write its last batch twice",
                f"rebuild it: `sigflow checkpoint recover {job}` (docs/runbooks/checkpoint-lost-or-corrupt.md)",
            )
        return identity

    def checkpoint_id(self, job: str) -> str:
        """Stable for the life of the checkpoint (the app id changes on every rewind)."""
        identity = self.identity()
        return identity.get("checkpoint_id") or self.app_id(job)

    def start_fresh(self, job: str, starting_offsets: str, recovered_from: dict[str, Any]) -> str:
        """Make this (empty) directory a new checkpoint whose first batch starts at the offsets."""
        app_id = _new_app_id(job)
        self.save_identity({
            "app_id": app_id, "checkpoint_id": app_id, "job": job,
            "starting_offsets": starting_offsets, "recovered_from": recovered_from,
        })
        return app_id

    def record_replay(self, first: dict, until: dict, version: int | None) -> None:
        """Say that this checkpoint's next batches read device_events_raw (at ``version``) from
        ``first`` (a new checkpoint's start; a checkpoint's own offsets otherwise) to ``until``,
        then Kafka."""
        identity = self.identity()
        identity[REPLAY_KEY] = {"first": first, "until": until, "version": version}
        self.save_identity(identity)

    def replay_from_raw(self) -> tuple[dict, dict, int | None] | None:
        """(first, until, raw's version) of the replay from device_events_raw this checkpoint
        has yet to finish; None when there is none or its batches have read up to ``until``."""
        replay = self.identity().get(REPLAY_KEY)
        if replay is None:
            return None
        try:
            first, until = _offsets_map(replay["first"]), _offsets_map(replay["until"])
            version = None if replay.get("version") is None else _whole(replay["version"])
        except (KeyError, TypeError, ValueError, AttributeError, SigflowError):
            raise _damaged(self.uri, "sigflow.json",
                           "is damaged (its replay_from_raw is not two offset maps and a version)",
                           "sigflow.json's replay_from_raw is not two offset maps and a version") from None
        if self.committed_through({topic: {int(p): o for p, o in parts.items()} for topic, parts in until.items()}):
            return None
        return first, until, version

    def starting_offsets(self) -> str | None:
        """Offsets a recovered checkpoint's first batch must start from (None: the setting's)."""
        return self.identity().get("starting_offsets") if not self.offset_batches() else None

    def rotate_app_id(self, job: str, rewound_to: int) -> str:
        """A new app id for the batches re-run after a rewind.

        Delta keeps each app id's highest committed batch even across RESTORE (measured with
        delta-rs), so re-running batch N+1 under the old id would be skipped as already written.
        """
        identity = self.identity()
        checkpoint_id = identity.get("checkpoint_id") or identity.get("app_id") or _new_app_id(job)
        history = identity.get("rewinds", []) + [{"to_batch": rewound_to, "previous_app_id": identity.get("app_id")}]
        identity.update({"app_id": _new_app_id(job), "checkpoint_id": checkpoint_id, "job": job, "rewinds": history})
        identity.pop("pending_rewind", None)  # an older sigflow's mark of the rewind this finishes
        identity.pop(REPLAY_KEY, None)  # a re-run reads where its plan says (``record_replay``)
        self.save_identity(identity)
        return identity["app_id"]

    def legacy_pending_rewind(self) -> int | None:
        """The rewind an older sigflow marked as under way in sigflow.json (it marks a restart
        under way with its intent now): refused until run again. None also when sigflow.json
        is damaged (one of ``problems``)."""
        try:
            return self.identity().get("pending_rewind")
        except CheckpointDamaged:
            return None

    # ---- a restart being applied (its intent, beside the checkpoint) ----------------------
    @property
    def beside(self) -> str:
        """The folder beside the checkpoint (``<checkpoint>.lease/``) that holds its lease and a
        restart's intent: a recover moves the checkpoint aside while both must stay."""
        return f"{self.path}.lease"

    def restart_intent(self) -> RestartIntent | None:
        """The restart left half applied on this checkpoint, or None; raises UnreadableIntent
        for a file that is there but is not one."""
        return intents.read(self.fs, self.beside)

    def record_intent(self, intent: RestartIntent) -> None:
        """Say, before a restart's first change, what it is about to change: a run or a
        restart finding it later (the apply died half way) refuses until it is finished."""
        self.fs.create_dir(self.beside, recursive=True)
        intents.record(self.fs, self.beside, intent)

    def clear_intent(self) -> None:
        intents.clear(self.fs, self.beside)

    # ---- health and surgery ----------------------------------------------------------------
    def problems(self) -> list[str]:
        """Why Spark could not resume from this checkpoint ([] when it looks sound)."""
        found = []
        offsets = self.offset_batches()
        for batch_id in offsets:
            try:
                if self.offsets(batch_id) is None:
                    found.append(f"offsets/{batch_id} is unreadable")
            except CheckpointDamaged as damaged:
                found.append(damaged.finding)
        for batch_id in self.committed_batches():
            try:
                text = self._read(f"commits/{batch_id}")
                if not text or not text.startswith("v"):
                    found.append(f"commits/{batch_id} is empty or corrupt")
            except CheckpointDamaged as damaged:
                found.append(damaged.finding)
            if batch_id not in offsets:
                found.append(f"commits/{batch_id} has no offsets/{batch_id}")
        try:
            if offsets and self._read("metadata") is None:
                found.append("metadata (the query id) is missing")
        except CheckpointDamaged as damaged:
            found.append(damaged.finding)
        try:
            if offsets and "app_id" not in self.identity():
                found.append("sigflow.json (the id its Delta commits carry) is missing")
        except CheckpointDamaged as damaged:
            found.append(damaged.finding)
        return found

    def truncate_after(self, batch_id: int) -> list[str]:
        """Delete every trace of batches after ``batch_id``; returns the paths removed.

        offsets/ and commits/ are per batch id; state store files are per state version, and
        batch N leaves version N+1 (``<v>.delta``/``.snapshot``, RocksDB ``.zip``/``.changelog``).
        """
        removed = []
        for folder, keep_upto in (("offsets", batch_id), ("commits", batch_id), ("state", batch_id + 1)):
            selector = pafs.FileSelector(f"{self.path}/{folder}", allow_not_found=True, recursive=True)
            for info in self.fs.get_file_info(selector):
                version = _file_version(info.base_name) if info.type == pafs.FileType.File else None
                if version is not None and version > keep_upto and "_metadata" not in info.path:
                    self.fs.delete_file(info.path)
                    removed.append(info.path[len(self.path) + 1:])
        return sorted(removed)

    def prune_before(self, batch_id: int) -> int:
        """Delete offset and commit log entries of batches before ``batch_id``; returns how many.

        Spark needs only the latest entries to resume (sigflow's late-event accounting needs
        the one before the latest): older ones serve rewinds only.
        """
        removed = 0
        for folder in ("offsets", "commits"):
            selector = pafs.FileSelector(f"{self.path}/{folder}", allow_not_found=True)
            for info in self.fs.get_file_info(selector):
                version = _file_version(info.base_name) if info.type == pafs.FileType.File else None
                if version is not None and version < batch_id:
                    self.fs.delete_file(info.path)
                    removed += not info.base_name.endswith(".crc")
        return removed

    def move_aside(self, suffix: str) -> str:
        """Keep a broken checkpoint for later study, out of the job's way (``storage.move_aside``)."""
        return storage.move_aside(self.fs, self.path, suffix)


def _parsed_offsets(batch_id: int, text: str) -> BatchOffsets:
    """An offset log entry as Spark writes it; TypeError, ValueError or IndexError otherwise."""
    lines = text.splitlines()
    meta = json.loads(lines[1])
    sources = [json.loads(line) if line != "-" else None for line in lines[2:]]
    for source in sources:  # {topic: {partition: offset}}
        if source is not None and not all(isinstance(parts, dict) and all(
                isinstance(offset, int) for offset in parts.values()) for parts in source.values()):
            raise TypeError("not {topic: {partition: offset}}")
    conf = meta.get("conf", {})
    if not isinstance(conf, dict):
        raise TypeError("conf is not an object")
    return BatchOffsets(
        batch_id=batch_id,
        watermark_ms=_whole(meta.get("batchWatermarkMs", 0)),
        batch_timestamp_ms=_whole(meta.get("batchTimestampMs", 0)),
        sources=sources,
        conf=conf,
    )


def _offsets_map(value: object) -> dict[str, dict[str, int]]:
    """{topic: {partition: offset}} as sigflow.json holds it; TypeError or ValueError otherwise."""
    if not isinstance(value, dict):
        raise TypeError("not an object")
    return {checked(topic, "topic", "sigflow.json"): {str(int(part)): _whole(offset) for part, offset in parts.items()}
            for topic, parts in value.items()}


def _whole(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{value!r} is not a whole number")
    return value


REPLAY_KEY = "replay_from_raw"
def recover_hint(job: str = "JOB") -> str:
    return (f"rebuild the checkpoint: `sigflow checkpoint recover {job} --force` plans it "
            "(docs/runbooks/checkpoint-lost-or-corrupt.md)")


RECOVER_HINT = recover_hint()


def _damaged(uri: str, relative: str, what: str, finding: str = "") -> CheckpointDamaged:
    return CheckpointDamaged(f"{uri}/{relative} {what}", RECOVER_HINT, finding or f"{relative} {what}")


def _new_app_id(job: str) -> str:
    return f"sigflow-{job}-{uuid.uuid4().hex[:12]}"


def _file_version(name: str) -> int | None:
    """5 for ``5``, ``5.delta``, ``5.snapshot``, ``.5.crc``, ``5.zip``, ``5_<uuid>.zip`` (RocksDB
    state format 2); None otherwise."""
    core = name.removeprefix(".").removesuffix(".crc")
    head, _, ext = core.partition(".")
    head = head.split("_", 1)[0] if ext == "zip" else head
    if head.isdigit() and ext in ("", "delta", "snapshot", "zip", "changelog"):
        return int(head)
    return None
