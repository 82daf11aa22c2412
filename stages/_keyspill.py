"""Corpus-wide grouping of 128-bit keys with bounded memory (used by exact and paragraph dedup).

compute (per task): :class:`KeySpill` collects (key, row) entries, sorts them by (key, row) and
writes one ``.npy`` file (20 bytes an entry) through a rename, so a killed task leaves no file.

decide, distributed over the run's workers (:class:`dataprep.decide_jobs.DecideJobs`), in two
rounds of named jobs (:class:`PartitionJob`, then :class:`TaskJob`):

1. one call per key-range partition (:func:`partition_count` ranges of the top key bits, so that
   each holds at most ``budget`` entries over all tasks, and at least one per worker):
   :func:`read_partition` gathers the entries of every task in that range, in task order (each
   task's slice is contiguous in its sorted file, found by binary search on the memory-mapped
   file). Within a partition, entries with equal keys are consecutive after a stable sort, and
   the first of a group is the earliest (task, row) occurrence. The per-entry results go to one
   file per partition (:func:`save_partition_values`, with the task slices they came from).
2. one call per task: :func:`task_values` reassembles the task's results in its entry order from
   every partition file, and the task's decision is written.

Memory per worker: ``budget`` x ~40 bytes in round 1, one task's entries in round 2; the driver
only merges counters. Partition files are whole files written through renames, so a worker
killed mid-call and retried leaves nothing half-written. Ids of survivors are looked up through
:class:`StringTable` files (random access by row through memory maps).
"""

from __future__ import annotations

import bisect
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from dataprep.decide_jobs import DecideJobs, share
from dataprep.formats import arrow

if TYPE_CHECKING:
    from dataprep.stage import DriverContext

ENTRY = np.dtype([("hi", "<u8"), ("lo", "<u8"), ("row", "<u4")])
DEFAULT_BUDGET = 8_000_000
PARALLEL_MIN = 1 << 20  # entries below which decide groups them in one call (no worker start-up)


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


MAX_PARTITION_BITS = 16  # 65,536 partitions: ~5e11 entries at the default budget


def partition_count(total: int, budget: int | None = None, workers: int = 1) -> int:
    """Key-range partitions for ``total`` entries: a power of two, enough for ~``budget`` entries
    each (default DEFAULT_BUDGET) and, from PARALLEL_MIN entries on, at least one per worker; at
    most 2**MAX_PARTITION_BITS. The results never depend on the count."""
    budget = budget or DEFAULT_BUDGET
    minimum = workers if total >= PARALLEL_MIN else 1
    bits = 0
    while (total > budget << bits or 1 << bits < minimum) and bits < MAX_PARTITION_BITS:
        bits += 1
    return 1 << bits


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


def read_partition(paths: list[Path], p: int, count: int) -> Partition:
    """Partition ``p`` of ``count`` (a power of two): the entries of every task file in ``paths``
    whose key's top log2(count) bits equal p, concatenated in task order. Each task's slice is
    contiguous in its sorted file and found by binary search on the memory-mapped file (touching
    ~log2(n) pages); every key lands in exactly one partition."""
    bits = count.bit_length() - 1
    parts, slices = [], []
    for t, path in enumerate(paths):
        f = load_entries(path)
        if not len(f):
            continue
        his = f["hi"]  # a strided view of the mapped file
        start = bisect.bisect_left(his, np.uint64(p << (64 - bits))) if p else 0
        stop = bisect.bisect_left(his, np.uint64((p + 1) << (64 - bits))) if p + 1 < count else len(f)
        if stop > start:
            parts.append((t, np.array(f[start:stop])))
            slices.append((t, start, stop))
    if not parts:
        empty = np.zeros(0, np.uint64)
        return Partition(empty, empty, np.zeros(0, np.int32), np.zeros(0, np.int64), [])
    return Partition(
        hi=np.concatenate([x["hi"] for _, x in parts]),
        lo=np.concatenate([x["lo"] for _, x in parts]),
        task=np.concatenate([np.full(len(x), t, dtype=np.int32) for t, x in parts]),
        row=np.concatenate([x["row"] for _, x in parts]).astype(np.int64),
        slices=slices,
    )


@dataclass(frozen=True)
class PartitionJob:
    """Decide round 1: key-range partition ``partition``; ``shared``: the path of what every job
    of the decide shares (:func:`dataprep.decide_jobs.share`: paths, task ids, partition count)."""

    shared: str
    partition: int


@dataclass(frozen=True)
class TaskJob:
    """Decide round 2: the decision of task ``task`` (its index), from every partition's results."""

    shared: str
    task: int


R = TypeVar("R")


def decide_in_two_rounds(
    ctx: DriverContext,
    stage: str,
    job: Any,
    partitions: int,
    per_partition: Callable[[PartitionJob], R],
    per_task: Callable[[TaskJob], None],
    grouped: str,
) -> list[R]:
    """The two rounds of a decide on the run's workers: ``per_partition`` for each of
    ``partitions`` key ranges, then ``per_task`` for every task (its decision), both reading
    ``job`` (what every call shares, written to work/decide-job.json for the two rounds), with the ``stage``'s
    two-step progress bar (``grouped``: what round 1 groups, e.g. "1,234 hashes"). Round 1's
    results, in partition order."""
    from dataprep.progress import phase_bar

    shared = share(ctx.work_dir / "decide-job.json", job)
    jobs = DecideJobs(ctx)
    bar = phase_bar(f"{stage}: decide", 2, "round", quiet=ctx.quiet)
    bar.set_description(f"{stage}: grouping {grouped} in {partitions} partitions")
    results = jobs.map(per_partition, [PartitionJob(shared, p) for p in range(partitions)])
    bar.update(1)
    bar.set_description(f"{stage}: writing the decisions of {len(ctx.task_ids)} tasks")
    jobs.map(per_task, [TaskJob(shared, t) for t in range(len(ctx.task_ids))])
    bar.update(1)
    bar.close()
    Path(shared).unlink()
    return results


def save_atomic(path: Path, array: np.ndarray) -> None:
    """``np.save`` through a temporary name and a rename (a killed writer leaves no file)."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        np.save(f, array)
    os.replace(tmp, path)


SLICE = np.dtype([("task", "<i8"), ("start", "<i8"), ("stop", "<i8"), ("at", "<i8")])


def save_partition_values(path: Path, part: Partition, values: np.ndarray) -> None:
    """Per-entry results of one partition (aligned with its entries, task order), with the task
    slices they came from, so that :func:`task_values` can reassemble any task's results."""
    slices = np.zeros(len(part.slices), dtype=SLICE)
    if part.slices:
        arr = np.asarray(part.slices, dtype=np.int64)
        slices["task"], slices["start"], slices["stop"] = arr[:, 0], arr[:, 1], arr[:, 2]
        sizes = arr[:, 2] - arr[:, 1]
        slices["at"] = np.cumsum(sizes) - sizes
    save_atomic(path.with_name(path.name + ".slices.npy"), slices)
    save_atomic(path, values)


def _slices(path: Path) -> np.ndarray:
    """A partition's task slices, loaded once per process and file version (every task's job
    reads them: loading them per job would cost tasks x partitions x tasks)."""
    st = path.stat()
    return _load_slices(str(path), st.st_ino, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=256)
def _load_slices(path: str, inode: int, mtime_ns: int, size: int) -> np.ndarray:
    return np.load(path)


def task_values(paths: list[Path], t: int) -> np.ndarray:
    """The results of task ``t``'s entries, in the order of its entry file, gathered from the
    partition result files ``paths`` (in partition order, i.e. key order)."""
    pieces = []
    for path in paths:
        slices = _slices(path.with_name(path.name + ".slices.npy"))
        k = int(np.searchsorted(slices["task"], t))
        if k < len(slices) and slices["task"][k] == t:
            s = slices[k]
            values = np.load(path, mmap_mode="r") if path.stat().st_size > 128 else np.load(path)
            pieces.append(np.array(values[s["at"] : s["at"] + s["stop"] - s["start"]]))
    if not pieces:
        return np.zeros(0, dtype=np.load(paths[0]).dtype) if paths else np.zeros(0)
    return np.concatenate(pieces)


class StringTable:
    """Strings by row with random access: ``<path>`` holds their UTF-8 bytes concatenated,
    ``<path>.off.npy`` the int64 offsets [rows + 1]; both are read through memory maps, so a
    lookup costs a few pages whatever the table size (document ids of a task)."""

    @staticmethod
    def write(path: Path, strings: list[str]) -> None:
        data = [s.encode("utf-8") for s in strings]
        offsets = np.zeros(len(data) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in data], out=offsets[1:])
        StringTable._save(path, b"".join(data), offsets)

    @staticmethod
    def write_arrow(path: Path, array: Any) -> None:
        """From a pyarrow (large_)string array without nulls, straight from its buffers."""
        import pyarrow as pa

        array = array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array
        kind = np.int32 if pa.types.is_string(array.type) else np.int64
        buffers = array.buffers()
        ends = np.frombuffer(buffers[1], dtype=kind)[array.offset : array.offset + len(array) + 1]
        ends = ends.astype(np.int64) if len(ends) else np.zeros(1, dtype=np.int64)
        data = memoryview(buffers[2])[ends[0] : ends[-1]] if buffers[2] is not None else b""
        StringTable._save(path, data, ends - ends[0])

    @staticmethod
    def _save(path: Path, data: Any, offsets: np.ndarray) -> None:
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        with open(tmp, "wb") as f:
            f.write(data)
        save_atomic(path.with_name(path.name + ".off.npy"), offsets)
        os.replace(tmp, path)

    def __init__(self, path: Path):
        self.offsets = np.load(path.with_name(path.name + ".off.npy"), mmap_mode="r")
        size = path.stat().st_size
        self.data = np.memmap(path, dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8)

    def get(self, rows: np.ndarray) -> list[str]:
        starts = np.asarray(self.offsets[rows])
        ends = np.asarray(self.offsets[np.asarray(rows) + 1])
        return [
            bytes(self.data[a:b]).decode("utf-8") for a, b in zip(starts.tolist(), ends.tolist(), strict=True)
        ]

    @staticmethod
    def remove(path: Path) -> None:
        path.unlink(missing_ok=True)
        path.with_name(path.name + ".off.npy").unlink(missing_ok=True)


class IdSpill:
    """Document ids of one task, in row order, as a :class:`StringTable` (for naming survivors)."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def close(self, path: Path) -> None:
        StringTable.write(path, self.ids)
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
        table = f.read_row_group(int(g), columns=columns).take(
            arrow.numbers(rows[group_of == g] - starts[g], np.int64)
        )
        for c in columns:
            out[c] += table.column(c).to_pylist()
    return out


class PathsByTask(Protocol):
    """Anything that gives a task's path by its index (a list of paths does)."""

    def __getitem__(self, task: int, /) -> Path: ...


def lookup_ids(paths: PathsByTask, offsets: np.ndarray, positions: np.ndarray) -> dict[int, str]:
    """{global position: document id} for ``positions`` (global = offsets[task] + row), from the
    tasks' :class:`StringTable` files ``paths`` (only the pages holding them are read)."""
    wanted = np.unique(np.asarray(positions, dtype=np.int64))
    out: dict[int, str] = {}
    tasks = np.searchsorted(offsets, wanted, side="right") - 1
    for t in np.unique(tasks):
        sel = wanted[tasks == t]
        names = StringTable(paths[int(t)]).get(sel - offsets[t])
        out.update({int(p): n for p, n in zip(sel.tolist(), names, strict=True)})
    return out
