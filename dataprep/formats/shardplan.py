"""Cutting a split's row stream into files by a shard plan (rows per file), for shard writers."""

from __future__ import annotations

from typing import Any

import numpy as np

from dataprep.formats.rows import RowBatch


class PlannedFiles:
    """Rotates through a split's files as the plan says: ``room(split)`` rows left in the current
    file, opening the next one (``open_file``) and closing the full one (``close_file``) as needed."""

    def __init__(self, plan: dict[str, list[int]]):
        self.plan = plan
        self.index: dict[str, int] = {}
        self.rows: dict[str, int] = {}
        self.current: dict[str, Any] = {}

    def open_file(self, split: str, k: int) -> Any:
        raise NotImplementedError

    def close_file(self, split: str, handle: Any) -> None:
        raise NotImplementedError

    def write_rows(self, batch: RowBatch, split: str, emit: Any) -> None:
        sizes = self.plan[split]
        start = 0
        while start < len(batch):
            if split not in self.current:
                k = self.index.get(split, 0)
                if k >= len(sizes):
                    raise RuntimeError(f"more {split} rows than the shard plan holds ({sum(sizes)})")
                self.current[split] = self.open_file(split, k)
                self.rows[split] = 0
            room = sizes[self.index.get(split, 0)] - self.rows[split]
            take = min(room, len(batch) - start)
            if take:
                part = (
                    batch
                    if (start == 0 and take == len(batch))
                    else batch.select(np.arange(start, start + take))
                )
                emit(self.current[split], part)
                self.rows[split] += take
                start += take
            if self.rows[split] == sizes[self.index.get(split, 0)]:
                self.close_file(split, self.current.pop(split))
                self.index[split] = self.index.get(split, 0) + 1

    def finish(self) -> None:
        for split in list(self.current):
            self.close_file(split, self.current.pop(split))
            self.index[split] = self.index.get(split, 0) + 1
