"""Shard writer for raw row files (.bin): see dataprep.formats.binrows for the layout."""

from __future__ import annotations

from typing import Any

import numpy as np

from dataprep.formats.binrows import BinRowsWriter
from dataprep.stage import ShardWriter, register


@register
class BinShardWriter(ShardWriter):
    """Rows as raw little-endian int32/uint16, files of rows_per_file rows: shards/<split>-NNNNN.bin."""

    name = "bin"

    def __init__(self, params: Any, out_dir: Any, meta: dict[str, Any]):
        super().__init__(params, out_dir, meta)
        self._open: dict[str, BinRowsWriter] = {}
        self._index: dict[str, int] = {}
        self._entries: list[dict[str, Any]] = []

    def _rotate(self, split: str) -> BinRowsWriter:
        current = self._open.get(split)
        if current is not None and current.rows < self.meta["rows_per_file"]:
            return current
        if current is not None:
            self._finish(split)
        k = self._index.get(split, 0)
        self._index[split] = k + 1
        w = self._open[split] = BinRowsWriter(
            self.out_dir / f"{split}-{k:05d}.bin", self.meta["dtype"], self.meta["row_length"]
        )
        return w

    def _finish(self, split: str) -> None:
        w = self._open.pop(split)
        self._entries.append({"path": f"shards/{w.path.name}", "format": "bin", "split": split, **w.close()})

    def write(self, rows: np.ndarray, split: str) -> None:
        while len(rows):
            w = self._rotate(split)
            room = self.meta["rows_per_file"] - w.rows
            w.write(rows[:room])
            rows = rows[room:]

    def close(self) -> list[dict[str, Any]]:
        for split in list(self._open):
            self._finish(split)
        return self._entries
