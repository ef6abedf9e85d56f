"""A key's repeats (one column or several) across the rows a quality run checks chunk by
chunk, and against the rows checked before: GX sees one chunk at a time, so it can only find
a repeat inside one. A run keeps an 8-byte hash of each new key; the older rows are read for
the key's columns, and the few hashes that match are confirmed on the values themselves."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from spark_jobs.runtime.delta.increments import Increment, chunks, older_files

SAMPLE_ROWS = 5


def _keys(frame: pd.DataFrame, columns: list[str]) -> list:
    """The frame's keys (a value, or a tuple of values), rows with a null in the key left out."""
    whole = frame[columns].dropna()
    return whole[columns[0]].tolist() if len(columns) == 1 else list(whole.itertuples(index=False, name=None))


def _hashes(keys: list) -> np.ndarray:
    return pd.util.hash_array(np.asarray([repr(key) for key in keys], dtype=object))


class SeenKeys:
    """The hashes of a key's values in the new rows, fed chunk by chunk."""

    def __init__(self, columns: list[str]):
        self.columns = list(columns)
        self._hashes: list[np.ndarray] = []

    def add(self, frame: pd.DataFrame) -> None:
        self._hashes.append(_hashes(_keys(frame, self.columns)))

    def repeated(self, increment: Increment, chunk_rows: int) -> tuple[int, list[dict]]:
        """How many new rows hold a key another row of the table holds too, and a sample of
        them."""

        new = np.sort(np.concatenate(self._hashes)) if self._hashes else np.empty(0, dtype=np.uint64)
        suspects = set(new[1:][new[1:] == new[:-1]].tolist())
        older = older_files(increment)
        if len(new):
            for table in chunks(increment, chunk_rows, self.columns, files=older):
                hashes = _hashes(_keys(table.to_pandas(), self.columns))
                at = np.minimum(np.searchsorted(new, hashes), len(new) - 1)
                suspects.update(hashes[new[at] == hashes].tolist())
        if not suspects:
            return 0, []
        counts = {"new": Counter(), "old": Counter()}
        wanted = np.fromiter(suspects, dtype=np.uint64)
        for side, files in (("new", increment.files), ("old", older)):
            for table in chunks(increment, chunk_rows, self.columns, files=files):
                keys = _keys(table.to_pandas(), self.columns)
                counts[side].update(key for key, hit in zip(keys, np.isin(_hashes(keys), wanted)) if hit)
        both = counts["new"] + counts["old"]
        keys = sorted(key for key, n in counts["new"].items() if both[key] > 1)
        if not keys:
            return 0, []  # hashes alike, values not
        sample = next(chunks(increment, SAMPLE_ROWS, where=self._matching(keys)), None)
        return sum(counts["new"][key] for key in keys), sample.to_pylist() if sample is not None else []

    def _matching(self, keys: list):
        """A filter of the rows holding one of ``keys``."""
        import pyarrow.dataset as ds

        if len(self.columns) == 1:
            return ds.field(self.columns[0]).isin(keys)
        condition = None
        for key in keys[:SAMPLE_ROWS]:
            match = None
            for column, value in zip(self.columns, key):
                match = ds.field(column) == value if match is None else match & (ds.field(column) == value)
            condition = match if condition is None else condition | match
        return condition
