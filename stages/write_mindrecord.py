"""Shard writer for MindRecord: shards/mindrecord/<split>-NNNNN.mindrecord (+ .db; and
<split>-remainder.mindrecord, see :mod:`dataprep.formats.shardplan`), one standalone file per
shard, following the shard plan so files line up with the .bin files row for row.

Files are written wherever the shard-file jobs run (MindSpore's import, ~1-3 s, is run ahead
with ``warm_up`` in the driver or the pool's workers while the tokenizer trains), into
shards/.mindrecord.staging; the directory is moved into place whole by ``commit`` once every file
is committed (MindRecord headers store bare file names: files must never be renamed). A
MindRecord file's bytes depend on how its rows were cut into writes: the same rows in the same
batches give the same file. Schema and reading: :mod:`dataprep.formats.mindrecord`.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from dataprep.formats.mindrecord import MindRecordFile, move_into_place, staging_dir
from dataprep.formats.rows import RowBatch
from dataprep.formats.shardplan import file_stem
from dataprep.io import file_sha256
from dataprep.stage import ShardWriter, register

_FAST_EXIT = False


def _exit_now() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def import_mindrecord(_: Any = None) -> None:
    """Import MindSpore's MindRecord writer (~3 s), ahead of the files.

    In a worker process (a multiprocessing child) the process then leaves without MindSpore's
    interpreter teardown (~0.4 s at every pool shutdown): by then every file it wrote is
    committed and closed, and results travel synchronously, so only stdio needs flushing."""
    global _FAST_EXIT
    import mindspore.mindrecord  # noqa: F401

    if not _FAST_EXIT and multiprocessing.parent_process() is not None:
        atexit.register(_exit_now)  # runs first (last registered), before MindSpore's handlers
        _FAST_EXIT = True


@register
class MindRecordShardWriter(ShardWriter):
    """Rows as MindRecord (input_ids, actual_seq_len, loss_mask when padding): shards/mindrecord/."""

    name = "mindrecord"
    warm_up = staticmethod(import_mindrecord)

    def __init__(self, params: Any, out_dir: Path, meta: dict[str, Any]):
        super().__init__(params, out_dir, meta)
        self.final = Path(out_dir) / "mindrecord"
        self.staging = staging_dir(self.final)

    def prepare(self) -> None:
        if self.staging.exists():
            shutil.rmtree(self.staging)
        self.staging.mkdir(parents=True)

    def open_file(self, split: str, k: int) -> Any:
        import_mindrecord()
        path = self.staging / f"{file_stem(self.meta, split, k)}.mindrecord"
        return {"split": split, "file": MindRecordFile(path, self.meta["with_loss_mask"]), "tokens": 0}

    def write(self, handle: Any, rows: RowBatch) -> None:
        handle["file"].write(rows)
        handle["tokens"] += int(rows.real_tokens.sum())

    def close_file(self, handle: Any) -> dict[str, Any]:
        mr: MindRecordFile = handle["file"]
        mr.commit()
        path = mr.path
        db = path.with_name(path.name + ".db")
        return {
            "path": f"shards/mindrecord/{path.name}",
            "format": "mindrecord",
            "split": handle["split"],
            "rows": mr.rows,
            "tokens": handle["tokens"],
            "bytes": path.stat().st_size,
            "sha256": file_sha256(path),
            "index": {
                "path": f"shards/mindrecord/{db.name}",
                "bytes": db.stat().st_size,
                "sha256": file_sha256(db),
            },
        }

    def commit(self) -> None:
        move_into_place(self.staging, self.final)
