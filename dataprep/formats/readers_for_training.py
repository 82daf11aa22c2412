"""Reading one split of a dataprep output the way a training loop needs it: which files, which
format, which per-row columns are stored, and random access to the rows.

:func:`open_split` locates a split's files in one format (``auto``: the present format ranked
highest for training, MindRecord before .bin); the format's registry entry
(:mod:`dataprep.formats.registry`) then reads them: ``get_format(split.format).training_rows(split)``
(:class:`dataprep.formats.bin_shards.BinRows`: memory-mapped .bin rows with their .idx
boundaries; :class:`dataprep.formats.mindrecord_shards.MindRecordRows`: MindDataset). Every format
carries the same rows (see the row contract in :mod:`dataprep.formats`).

Training reads through :class:`CheckedRows`: every file's size and sha256 are checked against
the manifest before its rows are first read (:class:`ShardCheck`, in the background), and every
batch's token ids against the vocabulary.

Nothing here imports MindSpore.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats.manifest import FileEntry, IndexEntry, read_manifest
from dataprep.formats.registry import SplitFiles, get_format
from dataprep.io import file_sha256

ROW_COLUMNS = ("input_ids", "actual_seq_len", "loss_mask")


class ShardError(ValueError):
    """The output directory's shards are missing, truncated or inconsistent with the manifest."""


def open_split(data: str | Path, split: str = "train", fmt: str = "auto") -> SplitFiles:
    """Locate a split's files. ``fmt`` auto: of the formats present, the one ranked highest for
    training (MindRecord before .bin).

    Raises ShardError (missing split/format/files) with what to do next.
    """
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


def _verify_hint(out: Path) -> str:
    return f"run `dataprep verify {out}` for every problem, then prepare again or restore the file"


class ShardCheck:
    """Each file of a split (data files and their companions: index, source ids) against the
    manifest's size and sha256, each file once.

    :meth:`check_sizes` stats every file at once (cheap; a truncated file fails before anything
    opens it). With ``hashes``, :meth:`start` hashes the files in a background thread at the lowest
    CPU priority, in manifest order, and :meth:`require` makes sure data file ``k`` (with its
    companions) is hashed before its rows are read, hashing it in the calling thread when the
    background has not got there yet. Without ``hashes`` only the sizes are checked. Failures are
    ShardError naming the file and saying to run ``dataprep verify``."""

    def __init__(self, split: SplitFiles, hashes: bool = True):
        self.split, self.hashes = split, hashes
        self._groups: list[list[tuple[Path, FileEntry | IndexEntry]]] = []
        for path, entry in zip(split.files, split.entries, strict=True):
            group: list[tuple[Path, FileEntry | IndexEntry]] = [(path, entry)]
            group += [(split.out / c.path, c) for c in (entry.index, entry.source_ids) if c is not None]
            self._groups.append(group)
        self._locks = [threading.Lock() for _ in self._groups]
        self._done: list[str | None] = [None] * len(self._groups)  # "" ok, else the problem
        self._thread: threading.Thread | None = None

    def check_sizes(self) -> None:
        for group in self._groups:
            for path, entry in group:
                size = path.stat().st_size if path.is_file() else None
                if size is None:
                    raise ShardError(f"{path}: missing; {_verify_hint(self.split.out)}")
                if entry.bytes is not None and size != entry.bytes:
                    raise ShardError(
                        f"{path}: {size} bytes, {self.split.out}/manifest.json says {entry.bytes} (truncated "
                        f"or replaced); {_verify_hint(self.split.out)}"
                    )

    def start(self) -> None:
        """Hash every file in a background thread (no-op without ``hashes``)."""
        if self.hashes and self._thread is None:
            self._thread = threading.Thread(target=self._hash_all, name="shard-check", daemon=True)
            self._thread.start()

    def wait(self) -> None:
        """Block until the background thread has hashed every file (returns at once without one)."""
        if self._thread is not None:
            self._thread.join()

    def _hash_all(self) -> None:
        with contextlib.suppress(OSError, AttributeError):  # AttributeError: no setpriority
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)  # Linux: this thread only
        for k in range(len(self._groups)):
            self._hash(k)

    def _hash(self, k: int) -> str:
        with self._locks[k]:
            if self._done[k] is None:
                problem = ""
                for path, entry in self._groups[k]:
                    if entry.sha256 is not None and file_sha256(path) != entry.sha256:
                        problem = (
                            f"{path}: sha256 differs from {self.split.out}/manifest.json (the file was "
                            "changed or damaged)"
                        )
                        break
                self._done[k] = problem
            return self._done[k]  # type: ignore[return-value]

    def require(self, k: int, before: str = "") -> None:
        """Data file ``k`` and its companions are intact (hashed now if need be); ``before``: what
        was about to be read (for the message)."""
        if not self.hashes:
            return
        problem = self._hash(k)
        if problem:
            where = f", found before reading {before}" if before else ""
            raise ShardError(f"{problem}{where}; {_verify_hint(self.split.out)}")

    def failed(self) -> int | None:
        """The first file found damaged so far (by the background or a require), if any."""
        return next((k for k, p in enumerate(self._done) if p), None)


class CheckedRows:
    """A split's training rows (:class:`dataprep.formats.registry.TrainingRows`) read only once
    checked: a file's size and sha256 before its first row is read (:class:`ShardCheck`; per file
    when the rows read each batch's rows only as it is taken, ``reads_on_demand``, else every file
    before the first batch), and every batch's token ids against the manifest's vocab_size (one
    min and max per batch). A damaged file found in the background stops the next batch. Failures
    are ShardError naming the file and row and saying to run ``dataprep verify``."""

    def __init__(self, rows: Any, split: SplitFiles, check: ShardCheck):
        self.rows, self.split, self.check = rows, split, check
        self.columns: tuple[str, ...] = rows.columns
        self.vocab_size = split.shards.vocab_size
        counts = [e.rows for e in split.entries]
        # global row -> file, when every file's rows are listed (else messages name the split)
        self._starts = None if None in counts else np.cumsum([0, *counts], dtype=np.int64)
        self._per_file = bool(getattr(rows, "reads_on_demand", False)) and self._starts is not None

    def __len__(self) -> int:
        return len(self.rows)

    def _where(self, row: int) -> tuple[int | None, str]:
        """(file index or None, "row R of FILE (row G of split S)") of a split row."""
        of_split = f"row {row} of split {self.split.split!r}"
        if self._starts is None:
            return None, f"{of_split}, in one of {[str(p) for p in self.split.files]}"
        k = int(np.searchsorted(self._starts, row, side="right")) - 1
        return k, f"row {row - int(self._starts[k])} of {self.split.files[k]} ({of_split})"

    def batches(self, indices: np.ndarray, batch_size: int) -> Iterator[dict[str, Any]]:
        indices = np.asarray(indices, dtype=np.int64)
        if not self._per_file and len(indices) >= batch_size:
            for k in range(len(self.split.files)):
                self.check.require(k, f"{self._where(int(indices[0]))[1]}")
        it = self.rows.batches(indices, batch_size)
        for lo in range(0, len(indices) - batch_size + 1, batch_size):
            rows = indices[lo : lo + batch_size]
            if self._per_file:
                files = np.searchsorted(self._starts, rows, side="right") - 1  # type: ignore[arg-type]
                for k in np.unique(files).tolist():
                    self.check.require(k, self._where(int(rows[np.argmax(files == k)]))[1])
            damaged = self.check.failed()
            if damaged is not None:
                self.check.require(damaged, "any of its rows (checked in the background)")
            batch = next(it)
            self._check_ids(batch["input_ids"], rows)
            yield batch

    def _check_ids(self, ids: np.ndarray, rows: np.ndarray) -> None:
        if self.vocab_size is None or not ids.size:
            return
        low, high = int(ids.min()), int(ids.max())
        if low >= 0 and high < self.vocab_size:
            return
        bad = (ids < 0) | (ids >= self.vocab_size)
        r, c = np.argwhere(bad)[0]
        _, where = self._where(int(rows[r]))
        raise ShardError(
            f"{where}: token id {int(ids[r, c])} at position {int(c)} is outside [0, {self.vocab_size}) "
            f"(vocab_size of {self.split.out}/manifest.json); {_verify_hint(self.split.out)}"
        )
