"""Reading one split of a dataprep output the way a training loop needs it: which files, which
format, which per-row columns are stored, and random access to .bin rows.

Two sources carry the same rows (see the row contract in :mod:`dataprep.formats`):

* ``mindrecord``: MindRecord files with fields ``input_ids`` (and optionally ``actual_seq_len``,
  ``loss_mask``); the stored columns are read from the file's schema. Training streams them with
  ``mindspore.dataset.MindDataset``; this module only locates the files and reads the schema.
* ``bin``: raw row files (:mod:`dataprep.formats.binrows`) holding ``input_ids``. Optional side
  files, named in the manifest's file entry (paths relative to the output directory):

      "actual_seq_len": {"values": "shards/train-00000.asl.bin",     # int32, all rows' offsets
                         "offsets": "shards/train-00000.asl.idx"}    # int64 [rows + 1] into values
      "loss_mask":      {"path": "shards/train-00000.mask.bin",       # uint8 [rows, row_length]
                         "dtype": "uint8"}

  Columns without side files are simply absent; the trainer then derives them from the tokens.

Nothing here imports MindSpore except :func:`mindrecord_columns`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats.binrows import DTYPES, open_rows
from dataprep.formats.manifest import load_manifest

ROW_COLUMNS = ("input_ids", "actual_seq_len", "loss_mask")


class ShardError(ValueError):
    """The output directory's shards are missing, truncated or inconsistent with the manifest."""


@dataclass
class SplitFiles:
    """One split in one format: its files (absolute paths, manifest order) and the shard metadata."""

    out: Path
    split: str
    format: str  # "bin" | "mindrecord"
    files: list[Path]
    entries: list[dict[str, Any]]
    rows: int  # rows listed in the manifest for these files
    shards: dict[str, Any] = field(repr=False)  # the manifest's "shards" section

    @property
    def row_length(self) -> int:
        return int(self.shards["row_length"])


def available_formats(manifest: dict[str, Any], split: str) -> list[str]:
    """Formats present for a split, in the order found in the manifest ([] if the split is absent)."""
    try:
        files = manifest["shards"]["splits"][split]["files"]
    except (KeyError, TypeError):
        return []
    seen: list[str] = []
    for f in files:
        if f.get("format") not in seen:
            seen.append(f.get("format"))
    return seen


def open_split(data: str | Path, split: str = "train", fmt: str = "auto") -> SplitFiles:
    """Locate a split's files. ``fmt`` auto prefers MindRecord when present, else .bin.

    Raises ShardError (missing split/format/files) with what to do next.
    """
    out, manifest = load_manifest(data)
    shards = manifest.get("shards")
    if not shards:
        raise ShardError(f"{out}/manifest.json has no 'shards' section (did the recipe end with pack?)")
    formats = available_formats(manifest, split)
    if not formats:
        known = sorted((shards.get("splits") or {}).keys())
        raise ShardError(f"{out}/manifest.json has no split {split!r} (splits: {known})")
    if fmt == "auto":
        fmt = "mindrecord" if "mindrecord" in formats else "bin"
    if fmt not in formats:
        raise ShardError(f"split {split!r} in {out} has no {fmt!r} files (formats present: {formats})")
    entries = [f for f in shards["splits"][split]["files"] if f.get("format") == fmt]
    files = [out / e["path"] for e in entries]
    missing = [str(p) for p in files if not p.is_file()]
    if missing:
        raise ShardError(f"shard files listed in {out}/manifest.json are missing: {missing[:3]}")
    if all("rows" in e for e in entries):
        rows = sum(int(e["rows"]) for e in entries)
    else:  # e.g. one entry per MindRecord component without per-file counts: the split total
        rows = int(shards["splits"][split].get("rows", 0))
    return SplitFiles(out, split, fmt, files, entries, rows, shards)


class BinRows:
    """Random access to the rows of a split's .bin files (memory-mapped; nothing read eagerly).

    ``read(indices)`` returns ``{"input_ids": int32 [n, row_length], "actual_seq_len": list of int32
    arrays or None, "loss_mask": int32 [n, row_length] or None}`` for global row indices.
    """

    def __init__(self, split: SplitFiles):
        if split.format != "bin":
            raise ValueError(f"BinRows needs a bin split, got {split.format}")
        dtype, row_length = split.shards["dtype"], split.row_length
        if dtype not in DTYPES:
            raise ShardError(f"unknown shard dtype {dtype!r} in the manifest (known: {sorted(DTYPES)})")
        self.maps = []
        self.asl: list[tuple[np.ndarray, np.ndarray] | None] = []
        self.masks: list[np.ndarray | None] = []
        for path, entry in zip(split.files, split.entries, strict=True):
            rows = open_rows(path, dtype, row_length)
            if "rows" in entry and len(rows) != int(entry["rows"]):
                raise ShardError(
                    f"{path}: holds {len(rows)} rows but the manifest lists {entry['rows']} "
                    "(truncated or replaced file; rerun prepare or `dataprep verify`)"
                )
            self.maps.append(rows)
            self.asl.append(self._open_asl(split.out, entry, len(rows)))
            self.masks.append(self._open_mask(split.out, entry, len(rows), row_length))
        self.starts = np.cumsum([0] + [len(m) for m in self.maps])
        self.row_length = row_length
        self.columns = ("input_ids",)
        if self.maps and all(a is not None for a in self.asl):
            self.columns += ("actual_seq_len",)
        if self.maps and all(m is not None for m in self.masks):
            self.columns += ("loss_mask",)

    @staticmethod
    def _open_asl(out: Path, entry: dict[str, Any], rows: int) -> tuple[np.ndarray, np.ndarray] | None:
        side = entry.get("actual_seq_len")
        if not side:
            return None
        values = np.fromfile(out / side["values"], dtype="<i4")
        offsets = np.fromfile(out / side["offsets"], dtype="<i8")
        if len(offsets) != rows + 1 or offsets[-1] != len(values):
            raise ShardError(f"{out / side['offsets']}: does not index {rows} rows of {side['values']}")
        return values, offsets

    @staticmethod
    def _open_mask(out: Path, entry: dict[str, Any], rows: int, row_length: int) -> np.ndarray | None:
        side = entry.get("loss_mask")
        if not side:
            return None
        path = out / side["path"]
        dt = np.dtype(side.get("dtype", "uint8"))
        if os.path.getsize(path) != rows * row_length * dt.itemsize:
            raise ShardError(f"{path}: size does not match {rows} rows of {row_length} {dt}")
        return np.memmap(path, dtype=dt, mode="r", shape=(rows, row_length))

    def __len__(self) -> int:
        return int(self.starts[-1])

    def read(self, indices: np.ndarray) -> dict[str, Any]:
        indices = np.asarray(indices, dtype=np.int64)
        out_ids = np.empty((len(indices), self.row_length), dtype=np.int32)
        asl: list[np.ndarray] | None = [] if "actual_seq_len" in self.columns else None
        mask = np.empty_like(out_ids) if "loss_mask" in self.columns else None
        file_of = np.searchsorted(self.starts, indices, side="right") - 1
        local = indices - self.starts[file_of]
        for f in np.unique(file_of):
            sel = file_of == f
            out_ids[sel] = self.maps[f][local[sel]]
            if mask is not None:
                mask[sel] = self.masks[f][local[sel]]  # type: ignore[index]
        if asl is not None:
            for f, i in zip(file_of, local, strict=True):
                values, offsets = self.asl[f]  # type: ignore[misc]
                asl.append(values[offsets[i] : offsets[i + 1]].astype(np.int32))
        return {"input_ids": out_ids, "actual_seq_len": asl, "loss_mask": mask}


def mindrecord_columns(split: SplitFiles) -> tuple[str, ...]:
    """Row columns stored in the split's MindRecord files (from the first file's schema)."""
    from mindspore.mindrecord import FileReader

    reader = FileReader(str(split.files[0]))
    try:
        schema = reader.schema()
    finally:
        reader.close()
    if "input_ids" not in schema:
        raise ShardError(f"{split.files[0]}: MindRecord schema has no 'input_ids' field: {sorted(schema)}")
    return tuple(c for c in ROW_COLUMNS if c in schema)
