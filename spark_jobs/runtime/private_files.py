"""Files and folders only their owner reads: secrets are private from their first byte, on a
host other people share."""

from __future__ import annotations

import os
from pathlib import Path


def private_dir(path: Path) -> Path:
    """``path`` as a folder only its owner enters (0700), made if missing."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)  # an existing one too, and whatever the umask took from mkdir's mode
    return path


def write_private(path: Path, data: bytes | str) -> None:
    """Write a file only its owner can read (keys, passwords): created 0600, never readable
    by others even for a moment, and an existing file made 0600 before it is written."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data.encode() if isinstance(data, str) else data)
