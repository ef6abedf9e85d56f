"""Identifiers read from storage (a checkpoint's ids) checked before they are used in a
path or a Delta predicate: a file someone edited cannot widen a delete."""

from __future__ import annotations

import re

from spark_jobs.errors import SigflowError

# what sigflow writes (sigflow-<job>-<12 hex>) and what an older or hand-made id may be,
# without quotes, spaces or operators
_IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def checked(value: object, what: str, where: str) -> str:
    """``value`` when it is a plain identifier; else a SigflowError naming ``where``."""
    if isinstance(value, str) and _IDENTIFIER.fullmatch(value):
        return value
    raise SigflowError(
        f"{what} in {where} is not an identifier sigflow writes ({str(value)[:40]!r}): refusing to use it",
        "the file was edited or damaged: rebuild the checkpoint with `sigflow checkpoint recover JOB` "
        "(docs/runbooks/checkpoint-lost-or-corrupt.md)",
    )
