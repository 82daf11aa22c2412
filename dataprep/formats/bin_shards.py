"""The ``bin`` shard format: .bin row files with Megatron-compatible .idx files,
shards/bin/<split>-NNNNN.bin/.idx (and <split>-remainder, see :mod:`dataprep.shards.plan`).

Layouts: :mod:`dataprep.formats.binrows` (rows: int32, or uint16 when the vocabulary fits) and
:mod:`dataprep.formats.idx` (index carrying each row's ``actual_seq_len``); with sources
(``meta.sources``), a parallel ``.src`` file of little-endian int32, one source id per row.
Files follow the shard plan in ``meta.plan`` (rows per file, per split), so the .bin files
line up with every other format's files row for row. Everything the ``bin`` format does is here:
its writer, how a file is read back (verify, inspect), how a split is read for training, and its
registry entry. These files are the input of ``pretrain/``, not of Megatron-LM's ``GPTDataset``
(see :mod:`dataprep.formats.idx`; Megatron-LM reads :mod:`dataprep.formats.megatron_shards`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats.binrows import DTYPES, BinRowsWriter, open_rows
from dataprep.formats.idx import IdxWriter, Index, read_idx
from dataprep.formats.manifest import read_manifest
from dataprep.formats.readers_for_training import ShardError, SplitFiles
from dataprep.formats.registry import FileMeta, ShardFormat, ShardMeta, ShardWriter, register_format
from dataprep.formats.rows import RowBatch, loss_mask_from_boundaries, raw
from dataprep.io import file_sha256

SOURCE_SUFFIX = ".src"


class BinSplit:
    """The rows of one split in .bin/.idx form, memory-mapped; nothing is read eagerly.

    ``split[i]`` -> {"input_ids": int32[row_length], "actual_seq_len": int32[k],
    "loss_mask": int32[row_length]} for global row i (files in manifest order).
    """

    def __init__(self, out: str | Path, split: str = "train"):
        root, manifest = read_manifest(out)
        self.root = root
        self.manifest = manifest
        files = manifest.split_files(root, split, "bin")
        shards = manifest.shards
        assert shards is not None  # split_files raised otherwise
        self.row_length: int = shards.row_length
        self.dtype: str = shards.dtype
        self.files: list[tuple[np.ndarray, Index]] = []
        for entry in files:
            path = root / entry.path
            rows = open_rows(path, self.dtype, self.row_length)
            if entry.index is None:
                raise ValueError(f"{path}: the manifest lists no .idx beside it")
            index = read_idx(root / entry.index.path)
            if index.rows != len(rows):
                raise ValueError(f"{path}: {len(rows)} rows but its index describes {index.rows}")
            self.files.append((rows, index))
        counts = [len(r) for r, _ in self.files]
        self.starts = (
            np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]) if counts else np.zeros(1, np.int64)
        )

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _locate(self, i: int) -> tuple[np.ndarray, Index, int]:
        if not 0 <= i < len(self):
            raise IndexError(f"row {i} out of range (0..{len(self) - 1})")
        k = int(np.searchsorted(self.starts, i, side="right")) - 1
        rows, index = self.files[k]
        return rows, index, i - int(self.starts[k])

    def input_ids(self, i: int) -> np.ndarray:
        rows, _, local = self._locate(i)
        return np.asarray(rows[local], dtype=np.int32)

    def actual_seq_len(self, i: int) -> np.ndarray:
        _, index, local = self._locate(i)
        return index.actual_seq_len(local)

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        rows, index, local = self._locate(i)
        bounds = index.actual_seq_len(local)
        return {
            "input_ids": np.asarray(rows[local], dtype=np.int32),
            "actual_seq_len": bounds,
            "loss_mask": loss_mask_from_boundaries(bounds, self.row_length),
        }

    def token_rows(self) -> list[np.ndarray]:
        """The memory-mapped [rows, row_length] array of every file (stored dtype)."""
        return [rows for rows, _ in self.files]


def open_bin(out: str | Path, split: str = "train") -> BinSplit:
    """The .bin rows of ``split`` of the run in ``out`` (or of the run a shard file belongs to)."""
    return BinSplit(out, split)


def iter_bin_file(
    bin_path: str | Path, idx_path: str | Path, dtype: str, row_length: int, block_rows: int = 4096
) -> Iterator[RowBatch]:
    """The rows of one .bin/.idx pair as RowBatches (int32), in stored order."""
    rows = open_rows(bin_path, dtype, row_length)
    index = read_idx(idx_path)
    if index.rows != len(rows):
        raise ValueError(f"{idx_path}: describes {index.rows} rows but {bin_path} holds {len(rows)}")
    doc_idx = np.asarray(index.document_indices, dtype=np.int64)
    for lo in range(0, len(rows), block_rows):
        hi = min(len(rows), lo + block_rows)
        first, last = int(doc_idx[lo]), int(doc_idx[hi])
        sizes = np.asarray(index.sizes[first:last], dtype=np.int64)
        counts = np.diff(doc_idx[lo : hi + 1])
        total = np.cumsum(sizes)
        row_base = np.repeat(total[doc_idx[lo:hi] - first] - sizes[doc_idx[lo:hi] - first], counts)
        yield RowBatch(np.asarray(rows[lo:hi], dtype=np.int32), total - row_base, counts)


class BinShardWriter(ShardWriter):
    """Rows as raw little-endian int32/uint16 plus a Megatron .idx: shards/bin/<split>-NNNNN.bin/.idx."""

    name = "bin"

    def __init__(self, out_dir: Path, meta: ShardMeta):
        super().__init__(out_dir, meta)
        self.dir = Path(out_dir) / "bin"

    def prepare(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)

    def open_file(self, split: str, k: int) -> Any:
        stem = self.dir / self.meta.stem(split, k)
        rows = BinRowsWriter(stem.with_suffix(".bin"), self.meta.dtype, self.meta.row_length)
        idx = IdxWriter(stem.with_suffix(".idx"), self.meta.dtype, self.meta.row_length)
        src = open(stem.with_suffix(SOURCE_SUFFIX), "wb") if self.meta.sources else None  # noqa: SIM115
        return {"split": split, "rows": rows, "idx": idx, "tokens": 0, "src": src}

    def write(self, handle: Any, rows: RowBatch) -> None:
        handle["rows"].write(rows.tokens)
        handle["idx"].add(rows)
        handle["tokens"] += int(rows.real_tokens.sum())
        if handle["src"] is not None:
            if rows.source_id is None:
                raise RuntimeError("bin: rows without source ids in a run with sources (a bug)")
            handle["src"].write(raw(rows.source_id, "<i4"))

    def close_file(self, handle: Any) -> dict[str, Any]:
        info = handle["rows"].close()
        handle["idx"].close()
        idx_path = handle["idx"].path
        extra: dict[str, Any] = {}
        if handle["src"] is not None:
            handle["src"].close()
            src = Path(handle["src"].name)
            extra["source_ids"] = {
                "path": f"shards/bin/{src.name}",
                "bytes": src.stat().st_size,
                "sha256": file_sha256(src),
            }
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
            **extra,
        }


def read_file(data: Path, index: Path | None, meta: FileMeta) -> Iterator[tuple[RowBatch, np.ndarray | None]]:
    """The rows of one .bin file (its .idx: ``index``, else the one beside it); no stored masks."""
    for batch in iter_bin_file(data, index or data.with_suffix(".idx"), meta.dtype, meta.row_length):
        yield batch, None


def standalone_meta(data: Path) -> FileMeta:
    """Row length and dtype of a .bin file from its .idx alone (no manifest)."""
    index = read_idx(data.with_suffix(".idx"))
    row_length = index.row_length()
    if row_length is None:
        raise ValueError(f"{data}: cannot tell the row length from a one-row index without a manifest")
    return FileMeta(row_length, "uint16" if index.dtype == np.dtype(np.uint16) else "int32")


class BinRows:
    """Random access to the rows of a split's .bin files (memory-mapped; nothing read eagerly).

    ``read(indices)`` returns ``{"input_ids": int32 [n, row_length], "actual_seq_len": list of int32
    arrays or None, "loss_mask": int32 [n, row_length] or None}`` for global row indices. A .bin
    without an index yields ``input_ids`` only; the trainer then derives the boundaries from EOS
    positions and the mask from pad positions. ``batches`` reads a batch's rows only when the batch
    is taken (``reads_on_demand``: a checker may verify each file just before its first row).
    """

    reads_on_demand = True

    def __init__(self, split: SplitFiles):
        if split.format != "bin":
            raise ValueError(f"BinRows needs a bin split, got {split.format}")
        dtype, row_length = split.shards.dtype, split.row_length
        if dtype not in DTYPES:
            raise ShardError(f"unknown shard dtype {dtype!r} in the manifest (known: {sorted(DTYPES)})")
        self.maps = []
        self.indexes: list[Index | None] = []
        self.sources: list[np.ndarray] = []
        for path, entry in zip(split.files, split.entries, strict=True):
            rows = open_rows(path, dtype, row_length)
            if entry.rows is not None and len(rows) != entry.rows:
                raise ShardError(
                    f"{path}: holds {len(rows)} rows but the manifest lists {entry.rows} "
                    "(truncated or replaced file; rerun prepare or `dataprep verify`)"
                )
            index = read_idx(split.out / entry.index.path) if entry.index else None
            if index is not None and index.rows != len(rows):
                raise ShardError(f"{path}: {len(rows)} rows but its index describes {index.rows}")
            self.maps.append(rows)
            self.indexes.append(index)
            if entry.source_ids is not None:
                src = np.memmap(split.out / entry.source_ids.path, dtype="<i4", mode="r")
                if len(src) != len(rows):
                    raise ShardError(f"{path}: {len(rows)} rows but {len(src)} source ids")
                self.sources.append(src)
        self.starts = np.cumsum([0] + [len(m) for m in self.maps])
        self.row_length = row_length
        self.columns: tuple[str, ...] = ("input_ids",)
        if self.maps and all(x is not None for x in self.indexes):
            self.columns += ("actual_seq_len", "loss_mask")
        if self.maps and len(self.sources) == len(self.maps):
            self.columns += ("source_id",)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def read(self, indices: np.ndarray) -> dict[str, Any]:
        indices = np.asarray(indices, dtype=np.int64)
        out_ids = np.empty((len(indices), self.row_length), dtype=np.int32)
        file_of = np.searchsorted(self.starts, indices, side="right") - 1
        local = indices - self.starts[file_of]
        for f in np.unique(file_of):
            sel = file_of == f
            out_ids[sel] = self.maps[f][local[sel]]
        out: dict[str, Any] = {"input_ids": out_ids, "actual_seq_len": None, "loss_mask": None}
        if "source_id" in self.columns:
            out["source_id"] = np.asarray(
                [self.sources[f][i] for f, i in zip(file_of, local, strict=True)], dtype=np.int32
            )
        if "actual_seq_len" not in self.columns:
            return out
        asl = [self.indexes[f].actual_seq_len(int(i)) for f, i in zip(file_of, local, strict=True)]  # type: ignore[union-attr]
        out["actual_seq_len"] = asl
        out["loss_mask"] = np.stack([loss_mask_from_boundaries(a, self.row_length) for a in asl])
        return out

    def batches(self, indices: np.ndarray, batch_size: int) -> Iterator[dict[str, Any]]:
        """Rows ``indices`` (in that order) in whole batches of ``batch_size`` rows."""
        for k in range(0, len(indices) - batch_size + 1, batch_size):
            batch = self.read(indices[k : k + batch_size])
            batch["row_ids"] = indices[k : k + batch_size]
            yield batch


FORMAT = register_format(
    ShardFormat(
        name="bin",
        writer=BinShardWriter,
        suffix=".bin",
        companions=(".idx", SOURCE_SUFFIX),
        read_file=read_file,
        training_rows=BinRows,
        title=".bin",
        light=True,
        training_preference=0,
        standalone_meta=standalone_meta,
    )
)
