"""Shard writer for MindRecord: shards/mindrecord/<split>-NNNNN.mindrecord (+ .db), one standalone
file per shard, cut by the shard plan so files line up with the .bin files row for row.

Everything is written into shards/.mindrecord.staging and the directory is moved into place whole
once every file is committed (MindRecord headers store bare file names: files must never be
renamed). MindSpore is imported only when this writer is used. Schema and reading:
:mod:`dataprep.formats.mindrecord`.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from dataprep.formats.mindrecord import MindRecordFile, move_into_place, staging_dir
from dataprep.formats.rows import RowBatch
from dataprep.formats.shardplan import PlannedFiles
from dataprep.io import file_sha256
from dataprep.stage import ShardWriter, register


@register
class MindRecordShardWriter(ShardWriter, PlannedFiles):
    """Rows as MindRecord (input_ids, actual_seq_len, loss_mask when padding): shards/mindrecord/."""

    name = "mindrecord"

    def __init__(self, params: Any, out_dir: Path, meta: dict[str, Any]):
        ShardWriter.__init__(self, params, out_dir, meta)
        PlannedFiles.__init__(self, meta["plan"])
        self.final = Path(out_dir) / "mindrecord"
        self.staging = staging_dir(self.final)
        if self.staging.exists():
            shutil.rmtree(self.staging)
        self.staging.mkdir(parents=True)
        self._done: list[tuple[str, MindRecordFile]] = []

    def open_file(self, split: str, k: int) -> Any:
        path = self.staging / f"{split}-{k:05d}.mindrecord"
        return {"file": MindRecordFile(path, self.meta["with_loss_mask"]), "tokens": 0}

    def close_file(self, split: str, handle: Any) -> None:
        handle["file"].commit()
        self._done.append((split, handle))

    @staticmethod
    def _emit(handle: Any, batch: RowBatch) -> None:
        handle["file"].write(batch)
        handle["tokens"] += int(batch.real_tokens.sum())

    def write(self, rows: RowBatch, split: str) -> None:
        self.write_rows(rows, split, self._emit)

    def close(self) -> list[dict[str, Any]]:
        self.finish()
        entries = []
        for split, handle in self._done:
            path = handle["file"].path
            db = path.with_name(path.name + ".db")
            entries.append(
                {
                    "path": f"shards/mindrecord/{path.name}",
                    "format": "mindrecord",
                    "split": split,
                    "rows": handle["file"].rows,
                    "tokens": handle["tokens"],
                    "bytes": path.stat().st_size,
                    "sha256": file_sha256(path),
                    "index": {
                        "path": f"shards/mindrecord/{db.name}",
                        "bytes": db.stat().st_size,
                        "sha256": file_sha256(db),
                    },
                }
            )
        move_into_place(self.staging, self.final)
        return entries
