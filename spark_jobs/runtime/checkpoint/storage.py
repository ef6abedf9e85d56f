"""Reads of checkpoint storage that tell "no file there" from "the storage did not answer",
and writes a reader never sees half done.

An object store fails a request now and then (a timeout, a 503). Taken for "no file", such a
failure lets a run miss a rewind left half done, save sigflow.json over an identity it could
not read (losing the id its Delta commits carry), or take a live run's lease. So a read that
fails is asked again for up to ``READ_PATIENCE_S``, and raises OSError if it keeps failing;
only a file that is not there reads as None.
"""

from __future__ import annotations

import os
import uuid

import tenacity
from pyarrow import fs as pafs

READ_PATIENCE_S = 10.0


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem of a path or URI (``s3a://`` read as ``s3://``), and the path on it."""
    if "://" not in uri:
        from pathlib import Path

        return pafs.LocalFileSystem(), str(Path(uri).absolute())
    return pafs.FileSystem.from_uri(uri.replace("s3a://", "s3://", 1))


def _did_not_answer(exc: BaseException) -> bool:
    # pyarrow raises a plain OSError for most failures, a folder where a file should be
    # included (measured): only a missing file is told apart
    return isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError)


def patiently() -> tenacity.Retrying:
    """Retries for a storage read: again while it fails, for up to READ_PATIENCE_S."""
    return tenacity.Retrying(retry=tenacity.retry_if_exception(_did_not_answer),
                             wait=tenacity.wait_exponential(multiplier=0.1, max=2),
                             stop=tenacity.stop_after_delay(READ_PATIENCE_S), reraise=True)


def read_bytes(fs: pafs.FileSystem, path: str) -> bytes | None:
    """The file's bytes, or None when there is no file; OSError when the storage keeps failing."""
    def once() -> bytes | None:
        try:
            with fs.open_input_stream(path) as stream:
                return stream.read()
        except FileNotFoundError:
            return None

    return patiently()(once)


def write_whole(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Write the file whole: a crash mid-write leaves the earlier file or none, never half of
    this one (written aside and renamed on a local disk; a put on object storage is whole by
    itself)."""
    if isinstance(fs, pafs.LocalFileSystem):
        aside = f"{path}.{os.getpid()}.{uuid.uuid4().hex[:6]}.tmp"
        with open(aside, "wb") as out:
            out.write(data)
        os.replace(aside, path)
        return
    with fs.open_output_stream(path) as out:
        out.write(data)


def move_aside(fs: pafs.FileSystem, path: str, suffix: str) -> str:
    """Move the folder to ``<path>.<suffix>``, kept for later study, out of the way. On object
    storage, where a folder is only a prefix and a move copies one object, every object is
    copied first and the originals deleted after, so an interrupted move leaves the folder
    whole (and a second try copies again)."""
    target = f"{path}.{suffix}"
    if isinstance(fs, pafs.LocalFileSystem):
        fs.move(path, target)
        return target
    files = [info for info in fs.get_file_info(pafs.FileSelector(path, recursive=True))
             if info.type == pafs.FileType.File]
    for info in files:
        fs.copy_file(info.path, target + info.path[len(path):])
    fs.delete_dir_contents(path, missing_dir_ok=True)
    try:
        fs.delete_dir(path)
    except (FileNotFoundError, OSError):
        pass  # an object store may keep no folder marker
    return target
