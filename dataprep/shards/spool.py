"""Packed rows on disk between packing and shard writing: a seeded, bounded-memory shuffle whose
halves both run as jobs on the workers, and the parts it leaves for the shard files.

1. ``RowSpool`` (wherever rows are packed, e.g. one job per run of tasks): every row goes to a bucket
   chosen by its stream index alone (``Buckets``): a uniform hash of (seed, index) when
   shuffling, consecutive runs of rows when not. Each writer has its own file per bucket; a
   bucket is its writers' files in a fixed order, whatever process wrote them.
2. ``scatter_bucket`` (one job per bucket): reads its bucket whole (memory: one bucket), puts it
   in stream order, then in final order (a permutation seeded for that bucket), and cuts it at
   shard-file boundaries into parts. A split's buckets are contiguous in final order, so each job
   knows where its rows land from the rows of the buckets before it, and jobs run in any order,
   on any worker.
3. ``read_part`` replays a part batch by batch for the shard file it belongs to.

Scattering rows uniformly and permuting every bucket uniformly makes the final order a uniform
random permutation of all rows. Rows come out in batches of at most ``OUT_ROWS`` of a bucket's
final order, cut at file boundaries; those cuts are recorded with each part, as
MindRecord files depend on how their rows were cut into writes.

Layouts (little-endian). Bucket file record: int64 rows, int64 boundary values, then int64
stream index [rows], int32 seg_counts [rows], tokens [rows, row_length] in the shards' token
type, int32 seg_ends. Part: per batch, tokens [n, row_length], int32 seg_counts [n], int32
seg_ends, then (when the rows have sources) int32 source ids [n].

Sources: a row's source is a function of its stream index (``ScatterJob.sources``: the first
stream index of each run of rows from one source, and that source's id), so it is attached in
``scatter_bucket`` and never stored in the bucket files.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from dataprep.formats.rows import RowBatch, raw

OUT_ROWS = 4096
COUNTS = ("rows", "tokens", "eos", "padding", "segments")


@dataclass
class Bucket:
    """One shuffle bucket: its files (read in this order), rows and boundary values in all."""

    paths: list[str]
    rows: int = 0
    segments: int = 0


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@dataclass
class Buckets:
    """Which bucket each row goes to, by its stream index alone (so any process can place any
    row): with a ``key`` (shuffling), a 64-bit mix of (key, index) modulo ``count``, uniform and
    independent per row; without, consecutive runs of ``rows_each`` rows in stream order."""

    key: int | None
    count: int
    rows_each: int

    def of(self, index: np.ndarray) -> np.ndarray:
        index = np.asarray(index, dtype=np.int64)
        if self.key is None:
            return index // self.rows_each
        with np.errstate(over="ignore"):
            mixed = _splitmix64(index.astype(np.uint64) ^ np.uint64(self.key))
        return (mixed % np.uint64(self.count)).astype(np.int64)


def split_buckets(
    seed: int, split_index: int, shuffle: bool, buffer_mb: int, row_length: int, rows: int
) -> Buckets:
    """How the ``rows`` rows of a split are assigned to buckets: by a hash keyed by (``seed``,
    ``split_index``) when shuffling, else in stream order; a bucket holds at most ``buffer_mb``
    MiB of rows (:func:`bucket_rows`)."""
    key = (
        int(np.random.SeedSequence([seed, split_index]).generate_state(1, np.uint64)[0]) if shuffle else None
    )
    each = bucket_rows(buffer_mb, row_length)
    return Buckets(key, max(1, math.ceil(rows / each)), each)


def bucket_rows(buffer_mb: int, row_length: int) -> int:
    """Rows a bucket of ``buffer_mb`` MiB holds (three int32 copies of its tokens in memory)."""
    return max(1, (buffer_mb << 20) // (3 * row_length * 4))


class RowSpool:
    """Writes rows (with their stream index) into bucket files of a spool directory shared by
    several writers: this one's files are ``bucket<b>.<tag>.rows``. Memory: rows not flushed
    yet (< FLUSH_BYTES)."""

    FLUSH_BYTES = 32 << 20

    def __init__(self, directory: Path, tag: str, row_length: int, token_dtype: str, buckets: Buckets):
        self.dir = Path(directory)
        self.tag = tag
        self.L = row_length
        self.token_dtype = token_dtype
        self.buckets = buckets
        self.rows = 0
        self.written: dict[int, Bucket] = {}  # bucket -> this writer's file, rows, boundary values
        self._pending: dict[int, list[tuple[np.ndarray, RowBatch]]] = {}
        self._pending_bytes = 0
        self._flushed: set[int] = set()

    def add(self, batch: RowBatch, index: np.ndarray) -> None:
        """Rows with their stream indices (int64, one per row)."""
        n = len(batch)
        if n == 0:
            return
        which = self.buckets.of(index)
        self.rows += n
        order = np.argsort(which, kind="stable")
        first, last = int(which[order[0]]), int(which[order[-1]])
        bounds = np.searchsorted(which[order], np.arange(first, last + 2))
        for b in range(first, last + 1):
            lo, hi = int(bounds[b - first]), int(bounds[b - first + 1])
            if hi > lo:
                sel = order[lo:hi]
                part = batch if hi - lo == n else batch.select(sel)
                self._pending.setdefault(b, []).append((index[sel], part))
                mine = self.written.get(b)
                if mine is None:
                    mine = self.written[b] = Bucket([str(self.dir / f"bucket{b:05d}.{self.tag}.rows")])
                mine.rows += hi - lo
                mine.segments += len(part.seg_ends)
        self._pending_bytes += batch.tokens.nbytes
        if self._pending_bytes >= self.FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        """Append each bucket's pending rows as one record (parts written one after the other)."""
        for b in sorted(self._pending):
            parts = self._pending[b]
            rows = sum(len(index) for index, _ in parts)
            segs = sum(len(batch.seg_ends) for _, batch in parts)
            mode = "ab" if b in self._flushed else "wb"  # a retried job starts its files afresh
            self._flushed.add(b)
            with open(self.written[b].paths[0], mode) as f:
                f.write(raw(np.asarray([rows, segs]), "<i8"))
                for index, _ in parts:
                    f.write(raw(index, "<i8"))
                for _, batch in parts:
                    f.write(raw(batch.seg_counts, "<i4"))
                for _, batch in parts:
                    f.write(raw(batch.tokens, self.token_dtype))
                for _, batch in parts:
                    f.write(raw(batch.seg_ends, "<i4"))
        self._pending.clear()
        self._pending_bytes = 0

    def close(self) -> dict[int, Bucket]:
        """Flush everything; this writer's share of each bucket it wrote to."""
        self.flush()
        return self.written


def merge_buckets(shares: list[dict[int, Bucket]]) -> list[Bucket]:
    """Buckets 0..max from the writers' shares, each bucket's files in the order of ``shares``."""
    count = 1 + max((b for share in shares for b in share), default=-1)
    merged = [Bucket([]) for _ in range(count)]
    for share in shares:
        for b, mine in share.items():
            merged[b].paths += mine.paths
            merged[b].rows += mine.rows
            merged[b].segments += mine.segments
    return merged


def _read_into(f: BinaryIO, path: str, arrays: tuple[np.ndarray, ...]) -> None:
    for part in arrays:
        view = memoryview(part.reshape(-1).view(np.uint8))
        if f.readinto(view) != len(view):
            raise RuntimeError(f"{path}: the spool file is truncated (was the disk full?)")


def _records(f: BinaryIO) -> Iterator[tuple[int, int]]:
    """(rows, boundary values) of each record of an open bucket file, before its sections."""
    while head := f.read(16):
        if len(head) < 16:
            raise RuntimeError(f"{f.name}: the spool file is truncated (was the disk full?)")
        k, kseg = (int(x) for x in np.frombuffer(head, dtype="<i8"))
        yield k, kseg


def iter_records(path: str, row_length: int, token_dtype: str) -> Iterator[tuple[np.ndarray, RowBatch]]:
    """(stream index, rows) of each record of one bucket file, in the order written."""
    with open(path, "rb") as f:
        for k, kseg in _records(f):
            index, counts = np.empty(k, dtype="<i8"), np.empty(k, dtype="<i4")
            tokens, ends = np.empty((k, row_length), dtype=token_dtype), np.empty(kseg, dtype="<i4")
            _read_into(f, path, (index, counts, tokens, ends))
            yield index, RowBatch(tokens, ends, counts)


def read_bucket(bucket: Bucket, row_length: int, token_dtype: str) -> tuple[np.ndarray, RowBatch]:
    """(stream index of every row, the rows) of one bucket: its files in order, each file's
    records in the order written."""
    n, nseg = bucket.rows, bucket.segments
    index, counts = np.empty(n, dtype="<i8"), np.empty(n, dtype="<i4")
    tokens, ends = np.empty((n, row_length), dtype=token_dtype), np.empty(nseg, dtype="<i4")
    r = s = 0
    for path in bucket.paths:
        with open(path, "rb") as f:
            for k, kseg in _records(f):
                if r + k > n or s + kseg > nseg:
                    raise RuntimeError(f"{path}: more rows in the spool than recorded (a bug)")
                sections = (index[r : r + k], counts[r : r + k], tokens[r : r + k], ends[s : s + kseg])
                _read_into(f, path, sections)
                r, s = r + k, s + kseg
    if (r, s) != (n, nseg):
        raise RuntimeError(f"{bucket.paths}: the spool holds {r} rows, expected {n} (was the disk full?)")
    return index, RowBatch(tokens, ends, counts)


@dataclass
class ScatterJob:
    """One bucket of one split: where its rows start in the split's final order (``start``),
    the file boundaries of the split (``file_ends``: cumulative rows), and its permutation."""

    split: str
    number: int
    bucket: Bucket
    row_length: int
    token_dtype: str
    eos: int
    start: int
    file_ends: np.ndarray
    perm_seed: list[int] | None  # the bucket's permutation: default_rng(perm_seed); None: stream order
    parts_dir: str
    sources: tuple[list[int], list[int]] | None = None  # (first stream index of each run, source id)


def sources_of(index: np.ndarray, sources: tuple[list[int], list[int]]) -> np.ndarray:
    """The source id of the rows at stream ``index``: that of the last run starting at or before."""
    starts, ids = sources
    run = np.searchsorted(np.asarray(starts, dtype=np.int64), index, side="right") - 1
    return np.asarray(ids, dtype=np.int32)[np.maximum(run, 0)]


def scatter_bucket(job: ScatterJob) -> dict[str, Any]:
    """Write one bucket's rows, in final order, as parts of the shard files they fall in.

    Returns ``parts`` ((file index, path, batch sizes) in file order) and ``counts``
    of rows, tokens, EOS, padding and segments written. The bucket's files are left
    for the caller to remove (a retried job must find them)."""
    L, eos = job.row_length, job.eos
    index, rows = read_bucket(job.bucket, L, job.token_dtype)
    if job.sources is not None:
        rows.source_id = sources_of(index, job.sources)
    # stream order first, whatever order the bucket's files were written in (jobs' shares, then
    # the rows the driver joined), then the bucket's permutation
    order = np.argsort(index, kind="stable")
    if job.perm_seed is not None:
        order = order[np.random.default_rng(job.perm_seed).permutation(len(index))]
    counts = dict.fromkeys(COUNTS, 0)
    parts: dict[int, tuple[int, str, list[int]]] = {}
    files: dict[int, BinaryIO] = {}
    pos = job.start
    try:
        for lo in range(0, len(order), OUT_ROWS):
            sel = order[lo : lo + OUT_ROWS]
            batch = rows.select(sel)
            real = batch.real_tokens
            counts["rows"] += len(batch)
            counts["tokens"] += int(real.sum())
            counts["eos"] += int(((batch.tokens == eos) & (np.arange(L)[None, :] < real[:, None])).sum())
            counts["padding"] += int(len(batch) * L - real.sum())
            counts["segments"] += len(batch.seg_ends)
            done = 0
            while done < len(batch):  # cut at file boundaries
                k = int(np.searchsorted(job.file_ends, pos, side="right"))
                take = min(int(job.file_ends[k]) - pos, len(batch) - done)
                piece = batch if take == len(batch) else batch.select(np.arange(done, done + take))
                if k not in files:
                    path = Path(job.parts_dir) / f"{job.split}-{k:05d}.{job.number:05d}.part"
                    files[k] = open(path, "wb")  # noqa: SIM115 (closed below)
                    parts[k] = (k, str(path), [])
                f = files[k]
                f.write(raw(piece.tokens, job.token_dtype))
                f.write(raw(piece.seg_counts, "<i4"))
                f.write(raw(piece.seg_ends, "<i4"))
                if piece.source_id is not None:
                    f.write(raw(piece.source_id, "<i4"))
                parts[k][2].append(take)
                done += take
                pos += take
    finally:
        for f in files.values():
            f.close()
    return {"split": job.split, "parts": [parts[k] for k in sorted(parts)], "counts": counts}


def read_part(
    path: str, batches: list[int], row_length: int, token_dtype: str, with_sources: bool = False
) -> Iterator[RowBatch]:
    """The batches of one part (RowBatch each, in the sizes recorded; ``with_sources``: the part
    holds each row's source id)."""
    with open(path, "rb") as f:
        for n in batches:
            tokens = np.empty((n, row_length), dtype=token_dtype)
            seg_counts = np.empty(n, dtype="<i4")
            _read_into(f, path, (tokens, seg_counts))
            ends = np.empty(int(seg_counts.sum()), dtype="<i4")
            _read_into(f, path, (ends,))
            sources = None
            if with_sources:
                sources = np.empty(n, dtype="<i4")
                _read_into(f, path, (sources,))
            yield RowBatch(tokens, ends, seg_counts, sources)
