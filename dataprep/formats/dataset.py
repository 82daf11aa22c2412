"""Reading a run's shards for training: file lists and memory-mapped rows with boundaries."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats.binrows import open_rows
from dataprep.formats.idx import Index, read_idx
from dataprep.formats.manifest import load_manifest, shard_files
from dataprep.formats.rows import RowBatch, loss_mask_from_boundaries


def mindrecord_files(out: str | Path, split: str = "train") -> list[str]:
    """Absolute paths of a split's MindRecord files, in order (for MindDataset)."""
    root, manifest = load_manifest(out)
    files = [str(p) for p, _ in shard_files(root, manifest, split, "mindrecord")]
    if not files:
        raise ValueError(f"{root}/manifest.json lists no MindRecord files for split {split!r}")
    return files


class BinSplit:
    """The rows of one split in .bin/.idx form, memory-mapped; nothing is read eagerly.

    ``split[i]`` -> {"input_ids": int32[row_length], "actual_seq_len": int32[k],
    "loss_mask": int32[row_length]} for global row i (files in manifest order).
    """

    def __init__(self, out: str | Path, split: str = "train"):
        root, manifest = load_manifest(out)
        self.root = root
        self.manifest = manifest
        shards: dict[str, Any] = manifest["shards"]
        self.row_length: int = shards["row_length"]
        self.dtype: str = shards["dtype"]
        self.files: list[tuple[np.ndarray, Index]] = []
        for path, entry in shard_files(root, manifest, split, "bin"):
            rows = open_rows(path, self.dtype, self.row_length)
            index = read_idx(root / entry["index"]["path"])
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


def iter_mindrecord_file(
    path: str | Path, row_length: int, block_rows: int = 4096
) -> Iterator[tuple[RowBatch, np.ndarray | None]]:
    """(rows, loss masks or None) of one MindRecord file, in stored order."""
    from dataprep.formats.mindrecord import read_rows

    tokens: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    masks: list[np.ndarray] = []

    def flush() -> tuple[RowBatch, np.ndarray | None]:
        batch = RowBatch(
            np.stack(tokens) if tokens else np.zeros((0, row_length), np.int32),
            np.concatenate(ends) if ends else np.zeros(0, np.int32),
            np.asarray([len(e) for e in ends], dtype=np.int32),
        )
        mask = np.stack(masks) if masks else None
        tokens.clear()
        ends.clear()
        masks.clear()
        return batch, mask

    bounds = "actual_seq_len"
    for rec in read_rows(path):
        if "seg_ends" in rec:  # files of dataprep's writer; see dataprep.formats.mindrecord
            bounds = "seg_ends"
        ids = np.asarray(rec["input_ids"], dtype=np.int32)
        if len(ids) != row_length:
            raise ValueError(f"{path}: a row holds {len(ids)} tokens, expected {row_length}")
        tokens.append(ids)
        ends.append(np.asarray(rec[bounds], dtype=np.int32))
        if "loss_mask" in rec:
            masks.append(np.asarray(rec["loss_mask"], dtype=np.int32))
        if len(tokens) >= block_rows:
            yield flush()
    if tokens:
        yield flush()
