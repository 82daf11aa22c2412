"""Raw row files: packed rows of ``row_length`` tokens, little-endian, C order, no header.

A file holding R rows of int32 is exactly R * row_length * 4 bytes; row r starts at byte
r * row_length * itemsize. The dtype (int32, or uint16 when the vocabulary fits) and row_length
are recorded in the manifest.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats.rows import raw

DTYPES = {"int32": np.dtype("<i4"), "uint16": np.dtype("<u2")}


class BinRowsWriter:
    """Appends rows to ``path`` (through a temporary name, renamed on close) and hashes them."""

    def __init__(self, path: Path, dtype: str, row_length: int):
        self.path = Path(path)
        self.dtype = DTYPES[dtype]
        self.row_length = row_length
        self.rows = 0
        self._sha = hashlib.sha256()
        self._tmp = self.path.with_name(f".{self.path.name}.tmp{os.getpid()}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self._tmp, "wb")  # noqa: SIM115 (closed in close())

    def write(self, rows: np.ndarray) -> None:
        if rows.ndim != 2 or rows.shape[1] != self.row_length:
            raise ValueError(f"rows must have shape (n, {self.row_length}), got {rows.shape}")
        data = raw(rows, self.dtype.str)
        self._f.write(data)
        self._sha.update(data)
        self.rows += rows.shape[0]

    def close(self) -> dict[str, Any]:
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        os.replace(self._tmp, self.path)
        return {
            "rows": self.rows,
            "bytes": self.rows * self.row_length * self.dtype.itemsize,
            "sha256": self._sha.hexdigest(),
        }


def open_rows(path: str | Path, dtype: str, row_length: int) -> np.ndarray:
    """Memory-map a row file as an array of shape (rows, row_length); nothing is read eagerly."""
    dt = DTYPES[dtype]
    size = os.path.getsize(path)
    if size % (row_length * dt.itemsize):
        raise ValueError(f"{path}: {size} bytes is not a whole number of {row_length}-token {dtype} rows")
    rows = size // (row_length * dt.itemsize)
    if rows == 0:
        return np.zeros((0, row_length), dtype=dt)
    return np.memmap(path, dtype=dt, mode="r", shape=(rows, row_length))
