"""Shard writer for .bin row files with Megatron-compatible .idx files: shards/bin/<split>-NNNNN
(and <split>-remainder, see :mod:`dataprep.formats.shardplan`).

Layouts: :mod:`dataprep.formats.binrows` (rows) and :mod:`dataprep.formats.idx` (index carrying
each row's ``actual_seq_len``). Files follow the shard plan in ``meta["plan"]`` (rows per file,
per split), so the .bin files line up with the MindRecord files row for row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dataprep.formats.binrows import BinRowsWriter
from dataprep.formats.idx import IdxWriter
from dataprep.formats.rows import RowBatch
from dataprep.formats.shardplan import file_stem
from dataprep.io import file_sha256
from dataprep.stage import ShardWriter, register


@register
class BinShardWriter(ShardWriter):
    """Rows as raw little-endian int32/uint16 plus a Megatron .idx: shards/bin/<split>-NNNNN.bin/.idx."""

    name = "bin"

    def __init__(self, params: Any, out_dir: Path, meta: dict[str, Any]):
        super().__init__(params, out_dir, meta)
        self.dir = Path(out_dir) / "bin"

    def prepare(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)

    def open_file(self, split: str, k: int) -> Any:
        stem = self.dir / file_stem(self.meta, split, k)
        rows = BinRowsWriter(stem.with_suffix(".bin"), self.meta["dtype"], self.meta["row_length"])
        idx = IdxWriter(stem.with_suffix(".idx"), self.meta["dtype"], self.meta["row_length"])
        return {"split": split, "rows": rows, "idx": idx, "tokens": 0}

    def write(self, handle: Any, rows: RowBatch) -> None:
        handle["rows"].write(rows.tokens)
        handle["idx"].add(rows)
        handle["tokens"] += int(rows.real_tokens.sum())

    def close_file(self, handle: Any) -> dict[str, Any]:
        info = handle["rows"].close()
        handle["idx"].close()
        idx_path = handle["idx"].path
        return {
            "path": f"shards/bin/{handle['rows'].path.name}",
            "format": "bin",
            "split": handle["split"],
            "rows": info["rows"],
            "tokens": handle["tokens"],
            "bytes": info["bytes"],
            "sha256": info["sha256"],
            "index": {
                "path": f"shards/bin/{idx_path.name}",
                "bytes": idx_path.stat().st_size,
                "sha256": file_sha256(idx_path),
            },
        }
