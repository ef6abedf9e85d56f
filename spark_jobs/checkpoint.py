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
from dataclasses import dataclass
from typing import Any

from pyarrow import fs as pafs


def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    if "://" not in uri:
        from pathlib import Path

        return pafs.LocalFileSystem(), str(Path(uri).absolute())
    return pafs.FileSystem.from_uri(uri.replace("s3a://", "s3://", 1))


@dataclass(frozen=True)
class BatchOffsets:
    batch_id: int
    watermark_ms: int
    batch_timestamp_ms: int
    sources: list[Any]  # one parsed JSON offset per source, in the query's source order


class Checkpoint:
    def __init__(self, uri: str):
        self.uri = uri
        self.fs, self.path = _filesystem(uri)

    def _read(self, relative: str) -> str | None:
        try:
            with self.fs.open_input_stream(f"{self.path}/{relative}") as stream:
                return stream.read().decode()
        except (FileNotFoundError, OSError):
            return None

    def _batches(self, folder: str) -> list[int]:
        selector = pafs.FileSelector(f"{self.path}/{folder}", allow_not_found=True)
        ids = []
        for info in self.fs.get_file_info(selector):
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
        lines = text.splitlines()
        meta = json.loads(lines[1])
        sources = [json.loads(line) if line != "-" else None for line in lines[2:]]
        return BatchOffsets(
            batch_id=batch_id,
            watermark_ms=int(meta.get("batchWatermarkMs", 0)),
            batch_timestamp_ms=int(meta.get("batchTimestampMs", 0)),
            sources=sources,
        )

    def app_id(self, job: str) -> str:
        """The id this checkpoint's Delta commits are tagged with, created on first use.

        Tied to the checkpoint, not the job name: a fresh checkpoint restarts batch ids at 0,
        and must not be mistaken for batches an earlier checkpoint already wrote.
        """
        text = self._read("sigflow.json")
        if text:
            return json.loads(text)["app_id"]
        app_id = f"sigflow-{job}-{uuid.uuid4().hex[:12]}"
        self.fs.create_dir(self.path, recursive=True)
        with self.fs.open_output_stream(f"{self.path}/sigflow.json") as out:
            out.write(json.dumps({"app_id": app_id, "job": job}).encode())
        return app_id
