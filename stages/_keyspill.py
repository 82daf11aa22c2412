"""Corpus-wide grouping of 128-bit keys with bounded memory (used by exact and paragraph dedup).

compute (per task): :class:`KeySpill` collects (key, row) entries, sorts them by (key, row) and
writes one ``.npy`` file (20 bytes an entry) through a rename, so a killed task leaves no file.

decide (driver): :func:`partitions` cuts the key space into ranges of the top key bits, so that
each range holds at most ``budget`` entries over all tasks, and yields one :class:`Partition`
at a time: the entries of every task in that range, concatenated in task order (each task's
slice is contiguous in its sorted file, found by binary search on the memory-mapped file).
Within a partition, entries with equal keys are consecutive after a stable sort, and the first
of a group is the earliest (task, row) occurrence. Results per entry are written back aligned
with the task files by :class:`EntryResults` (memory-mapped, renamed when complete).
Memory: ``budget`` x ~40 bytes, whatever the corpus size.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ENTRY = np.dtype([("hi", "<u8"), ("lo", "<u8"), ("row", "<u4")])
DEFAULT_BUDGET = 8_000_000


def digests_to_keys(digests: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(hi, lo) uint64 arrays from 16-byte digests (big-endian halves, so key order is byte order)."""
    raw = np.frombuffer(b"".join(digests), dtype=">u8").reshape(-1, 2) if digests else np.zeros((0, 2))
    return raw[:, 0].astype(np.uint64), raw[:, 1].astype(np.uint64)


class KeySpill:
    """The (key, row) entries of one task; ``close`` writes them sorted and de-duplicated."""

    def __init__(self) -> None:
        self._parts: list[np.ndarray] = []

    def add(self, hi: np.ndarray, lo: np.ndarray, rows: np.ndarray) -> None:
        part = np.empty(len(rows), dtype=ENTRY)
        part["hi"], part["lo"], part["row"] = hi, lo, rows
        self._parts.append(part)

    def close(self, path: Path) -> int:
        """Write the sorted unique entries to ``path`` (atomically); returns their number."""
        entries = np.concatenate(self._parts) if self._parts else np.zeros(0, dtype=ENTRY)
        self._parts = []
        if entries.size:
            entries = entries[np.lexsort((entries["row"], entries["lo"], entries["hi"]))]
            same = (
                (entries["hi"][1:] == entries["hi"][:-1])
                & (entries["lo"][1:] == entries["lo"][:-1])
                & (entries["row"][1:] == entries["row"][:-1])
            )
            entries = entries[np.r_[True, ~same]]
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        with open(tmp, "wb") as f:
            np.save(f, entries)
        os.replace(tmp, path)
        return int(entries.size)


def load_entries(path: Path) -> np.ndarray:
    return np.load(path, mmap_mode="r") if path.stat().st_size > 128 else np.load(path)


@dataclass
class Partition:
    """Entries of one key range across all tasks, in (task, key, row) order.

    hi/lo: keys; task: index into the task list; row: the document's row in its task.
    slices: (task index, start, stop) of each task's contiguous range in its file.
    """

    hi: np.ndarray
    lo: np.ndarray
    task: np.ndarray
    row: np.ndarray
    slices: list[tuple[int, int, int]]

    def group_order(self) -> tuple[np.ndarray, np.ndarray]:
        """(order, starts): ``order`` sorts entries by key, earliest (task, row) first within a
        key; ``starts`` marks the first entry of each group of equal keys, in sorted order."""
        order = np.lexsort((self.lo, self.hi))  # stable: task, then row order kept within keys
        hi, lo = self.hi[order], self.lo[order]
        starts = np.ones(len(order), dtype=bool)
        if len(order) > 1:
            starts[1:] = (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])
        return order, starts


def partitions(paths: list[Path], budget: int | None = None) -> Iterator[Partition]:
    """Partitions of the entries of all ``paths`` (task order) with at most ~``budget`` entries
    (default DEFAULT_BUDGET) each, assuming uniformly distributed keys; every key lands in
    exactly one partition."""
    budget = budget or DEFAULT_BUDGET
    files = [load_entries(p) for p in paths]
    total = sum(len(f) for f in files)
    bits = 0
    while total > budget << bits and bits < 10:
        bits += 1
    count = 1 << bits
    for p in range(count):
        low = np.uint64(p << (64 - bits)) if bits else np.uint64(0)
        parts, slices = [], []
        for t, f in enumerate(files):
            if not len(f):
                continue
            his = f["hi"]  # a strided view of the mapped file: binary search touches ~log2(n) pages
            start = bisect.bisect_left(his, low) if p else 0
            stop = bisect.bisect_left(his, np.uint64((p + 1) << (64 - bits))) if p + 1 < count else len(f)
            if stop > start:
                parts.append((t, np.array(f[start:stop])))
                slices.append((t, start, stop))
        if parts:
            yield Partition(
                hi=np.concatenate([x["hi"] for _, x in parts]),
                lo=np.concatenate([x["lo"] for _, x in parts]),
                task=np.concatenate([np.full(len(x), t, dtype=np.int32) for t, x in parts]),
                row=np.concatenate([x["row"] for _, x in parts]).astype(np.int64),
                slices=slices,
            )
        else:
            yield Partition(
                np.zeros(0, np.uint64),
                np.zeros(0, np.uint64),
                np.zeros(0, np.int32),
                np.zeros(0, np.int64),
                [],
            )


class EntryResults:
    """One result value per entry, per task, aligned with the task's entry file (memory-mapped
    ``.npy`` written under a temporary name; ``close`` renames them all)."""

    def __init__(self, paths: list[Path], counts: list[int], dtype: str, fill: int = 0):
        self.paths = paths
        self.tmps = [p.with_name(f".{p.name}.tmp{os.getpid()}") for p in paths]
        self.arrays = []
        for tmp, n in zip(self.tmps, counts, strict=True):
            if n:
                arr = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=(n,))
                arr[:] = fill
            else:
                arr = np.zeros(0, dtype=dtype)
                with open(tmp, "wb") as f:
                    np.save(f, arr)
            self.arrays.append(arr)

    def write(self, part: Partition, values: np.ndarray) -> None:
        """``values`` aligned with the partition's entries (task order)."""
        offset = 0
        for t, start, stop in part.slices:
            n = stop - start
            self.arrays[t][start:stop] = values[offset : offset + n]
            offset += n

    def close(self) -> None:
        for arr, tmp, path in zip(self.arrays, self.tmps, self.paths, strict=True):
            if isinstance(arr, np.memmap):
                arr.flush()
            del arr
            os.replace(tmp, path)
        self.arrays = []


class IdSpill:
    """Document ids of one task, in row order (Parquet, one string column), for naming survivors."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def close(self, path: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        table = pa.table({"id": pa.array(self.ids, pa.string())})
        pq.write_table(table, tmp, compression="zstd", row_group_size=ROW_GROUP)
        os.replace(tmp, path)
        self.ids = []


ROW_GROUP = 1 << 14


def read_rows(path: Path, columns: list[str], rows: np.ndarray) -> dict[str, list]:
    """Values of ``columns`` at ``rows`` (sorted, unique) of a Parquet file, reading only the row
    groups that hold them (memory: those row groups, not the file)."""
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    sizes = [f.metadata.row_group(i).num_rows for i in range(f.metadata.num_row_groups)]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    group_of = np.searchsorted(starts, rows, side="right") - 1
    out: dict[str, list] = {c: [] for c in columns}
    for g in np.unique(group_of):
        table = f.read_row_group(int(g), columns=columns).take(rows[group_of == g] - starts[g])
        for c in columns:
            out[c] += table.column(c).to_pylist()
    return out


def lookup_ids(paths: list[Path], offsets: np.ndarray, positions: np.ndarray) -> dict[int, str]:
    """{global position: document id} for ``positions`` (global = offsets[task] + row); reads
    only the row groups of the id files that hold one of them."""
    wanted = np.unique(np.asarray(positions, dtype=np.int64))
    out: dict[int, str] = {}
    tasks = np.searchsorted(offsets, wanted, side="right") - 1
    for t in np.unique(tasks):
        names = read_rows(paths[int(t)], ["id"], wanted[tasks == t] - offsets[t])["id"]
        out.update({int(p): n for p, n in zip(wanted[tasks == t].tolist(), names, strict=True)})
    return out
