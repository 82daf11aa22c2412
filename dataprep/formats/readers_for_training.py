"""Reading one split of a dataprep output the way a training loop needs it: which files, which
format, which per-row columns are stored, and random access to the rows.

:func:`open_split` locates a split's files in one format (``auto``: the present format ranked
highest for training, MindRecord before .bin); the format's registry entry
(:mod:`dataprep.formats.registry`) then reads them: ``get_format(split.format).training_rows(split)``
(:class:`dataprep.formats.bin_shards.BinRows`: memory-mapped .bin rows with their .idx
boundaries; :class:`dataprep.formats.mindrecord_shards.MindRecordRows`: MindDataset). Every format
carries the same rows (see the row contract in :mod:`dataprep.formats`).

Nothing here imports MindSpore.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dataprep.formats.manifest import FileEntry, ShardsManifest, read_manifest

ROW_COLUMNS = ("input_ids", "actual_seq_len", "loss_mask")


class ShardError(ValueError):
    """The output directory's shards are missing, truncated or inconsistent with the manifest."""


@dataclass
class SplitFiles:
    """One split in one format: its files (absolute paths, manifest order) and the shard metadata."""

    out: Path
    split: str
    format: str  # a registered shard format
    files: list[Path]
    entries: list[FileEntry]
    rows: int  # rows listed in the manifest for these files
    shards: ShardsManifest = field(repr=False)  # the manifest's "shards" section

    @property
    def row_length(self) -> int:
        return self.shards.row_length


def open_split(data: str | Path, split: str = "train", fmt: str = "auto") -> SplitFiles:
    """Locate a split's files. ``fmt`` auto: of the formats present, the one ranked highest for
    training (MindRecord before .bin).

    Raises ShardError (missing split/format/files) with what to do next.
    """
    from dataprep.formats.registry import get_format

    out, manifest = read_manifest(data)
    shards = manifest.shards
    if not shards:
        raise ShardError(f"{out}/manifest.json has no 'shards' section (did the recipe end with pack?)")
    entry = shards.splits.get(split)
    formats = entry.formats() if entry is not None else []
    if entry is None or not formats:
        raise ShardError(f"{out}/manifest.json has no split {split!r} (splits: {sorted(shards.splits)})")
    if fmt == "auto":
        fmt = max(formats, key=lambda name: get_format(name).training_preference)
    if fmt not in formats:
        raise ShardError(f"split {split!r} in {out} has no {fmt!r} files (formats present: {formats})")
    entries = entry.files_of(fmt)
    files = [out / e.path for e in entries]
    missing = [str(p) for p in files if not p.is_file()]
    if missing:
        raise ShardError(f"shard files listed in {out}/manifest.json are missing: {missing[:3]}")
    counts = [e.rows for e in entries]
    # without per-file counts (e.g. one entry per MindRecord component): the split's total
    rows = sum(c for c in counts if c is not None) if None not in counts else entry.rows
    return SplitFiles(out, split, fmt, files, entries, rows, shards)
