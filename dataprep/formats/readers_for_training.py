"""Reading one split of a dataprep output the way a training loop needs it: which files, which
format, which per-row columns are stored, and random access to .bin rows.

Two sources carry the same rows (see the row contract in :mod:`dataprep.formats`):

* ``mindrecord``: MindRecord files with fields ``input_ids`` (and optionally ``actual_seq_len``,
  ``loss_mask``); the stored columns are read from the file's schema. Training streams them with
  ``mindspore.dataset.MindDataset``; this module only locates the files and reads the schema.
* ``bin``: raw row files (:mod:`dataprep.formats.binrows`) holding ``input_ids``, each with the
  Megatron-compatible ``.idx`` named in its manifest entry (``"index": {"path": ...}``) that
  carries ``actual_seq_len`` (:mod:`dataprep.formats.idx`); ``loss_mask`` is then
  ``i < actual_seq_len[-1]`` (:func:`dataprep.formats.rows.loss_mask_from_boundaries`), as in the
  row contract. A .bin without an index yields ``input_ids`` only; the trainer then derives the
  boundaries from EOS positions and the mask from pad positions.

Nothing here imports MindSpore except :func:`mindrecord_columns`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats.binrows import DTYPES, open_rows
from dataprep.formats.idx import Index, read_idx
from dataprep.formats.manifest import load_manifest
from dataprep.formats.rows import loss_mask_from_boundaries

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
        self.indexes: list[Index | None] = []
        for path, entry in zip(split.files, split.entries, strict=True):
            rows = open_rows(path, dtype, row_length)
            if "rows" in entry and len(rows) != int(entry["rows"]):
                raise ShardError(
                    f"{path}: holds {len(rows)} rows but the manifest lists {entry['rows']} "
                    "(truncated or replaced file; rerun prepare or `dataprep verify`)"
                )
            index = read_idx(split.out / entry["index"]["path"]) if entry.get("index") else None
            if index is not None and index.rows != len(rows):
                raise ShardError(f"{path}: {len(rows)} rows but its index describes {index.rows}")
            self.maps.append(rows)
            self.indexes.append(index)
        self.starts = np.cumsum([0] + [len(m) for m in self.maps])
        self.row_length = row_length
        self.columns: tuple[str, ...] = ("input_ids",)
        if self.maps and all(x is not None for x in self.indexes):
            self.columns += ("actual_seq_len", "loss_mask")

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
        if "actual_seq_len" not in self.columns:
            return {"input_ids": out_ids, "actual_seq_len": None, "loss_mask": None}
        asl = [self.indexes[f].actual_seq_len(int(i)) for f, i in zip(file_of, local, strict=True)]  # type: ignore[union-attr]
        mask = np.stack([loss_mask_from_boundaries(a, self.row_length) for a in asl])
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
