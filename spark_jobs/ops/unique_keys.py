"""A key column's repeats across the rows a quality run checks chunk by chunk, and against
the rows checked before: GX sees one chunk at a time, so it can only find a repeat inside
one. A run keeps an 8-byte hash of each new key; the older rows are read for that one
column, and the few hashes that match are confirmed on the values themselves."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from spark_jobs.runtime.delta.increments import Increment, chunks, older_files

SAMPLE_ROWS = 5


def _hashes(values) -> np.ndarray:
    return pd.util.hash_array(np.asarray(values, dtype=object))


class SeenKeys:
    """The hashes of one column's values in the new rows, fed chunk by chunk."""

    def __init__(self, column: str):
        self.column = column
        self._hashes: list[np.ndarray] = []

    def add(self, frame: pd.DataFrame) -> None:
        self._hashes.append(_hashes(frame[self.column].dropna()))

    def repeated(self, increment: Increment, chunk_rows: int) -> tuple[int, list[dict]]:
        """How many new rows hold a key another row of the table holds too, and a sample of
        them."""
        import pyarrow.dataset as ds

        new = np.sort(np.concatenate(self._hashes)) if self._hashes else np.empty(0, dtype=np.uint64)
        suspects = set(new[1:][new[1:] == new[:-1]].tolist())
        older = older_files(increment)
        if len(new):
            for table in chunks(increment, chunk_rows, [self.column], files=older):
                hashes = _hashes(table.column(self.column).drop_null().to_pylist())
                at = np.minimum(np.searchsorted(new, hashes), len(new) - 1)
                suspects.update(hashes[new[at] == hashes].tolist())
        if not suspects:
            return 0, []
        counts = {"new": Counter(), "old": Counter()}
        wanted = np.fromiter(suspects, dtype=np.uint64)
        for side, files in (("new", increment.files), ("old", older)):
            for table in chunks(increment, chunk_rows, [self.column], files=files):
                values = np.asarray(table.column(self.column).drop_null().to_pylist(), dtype=object)
                counts[side].update(values[np.isin(_hashes(values), wanted)].tolist())
        both = counts["new"] + counts["old"]
        keys = sorted(key for key, n in counts["new"].items() if both[key] > 1)
        if not keys:
            return 0, []  # hashes alike, values not
        sample = next(chunks(increment, SAMPLE_ROWS, where=ds.field(self.column).isin(keys)),
                      None)
        return sum(counts["new"][key] for key in keys), sample.to_pylist() if sample is not None else []
