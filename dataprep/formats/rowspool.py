"""Packed rows on disk between packing and shard writing: a seeded, bounded-memory shuffle whose
second half runs one bucket per job, and the parts those jobs leave for the shard files.

1. ``RowSpool`` (driver, rows in stream order): with an ``rng`` every row goes to a uniformly
   random bucket; without, buckets are consecutive runs of ``bucket_rows`` rows. A bucket is one
   file of records; a record is what one ``flush`` wrote of the bucket.
2. ``scatter_bucket`` (any process, one job per bucket): reads its bucket whole (memory: one
   bucket), puts it in final order (the permutation drawn for it, or stream order), drops the rows
   past ``keep`` in stream order, and cuts what is left at shard-file boundaries into parts. A
   split's buckets are contiguous in final order, so each job knows where its rows land from the
   kept rows of the buckets before it, and jobs run in any order, on any worker.
3. ``read_part`` replays a part batch by batch for the shard file it belongs to.

Permuting every bucket uniformly after scattering rows uniformly makes the final order a uniform
random permutation of all rows. Rows come out in batches of at most ``OUT_ROWS`` of a bucket's
final order, cut at kept rows and file boundaries; those cuts are recorded with each part, as
MindRecord files depend on how their rows were cut into writes.

Layouts (little-endian). Bucket record: int64 rows, int64 boundary values, then int64 stream index
[rows], int32 seg_counts [rows], tokens [rows, row_length] in the shards' token type, int32
seg_ends. Part: per batch, tokens [n, row_length], int32 seg_counts [n], int32 seg_ends.
``buckets.u4``: each row's bucket (uint32), in stream order.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from dataprep.formats.rows import RowBatch, raw

OUT_ROWS = 4096
COUNTS = (
    "rows",
    "tokens",
    "eos",
    "padding",
    "segments",
    "remainder_rows",
    "remainder_tokens",
    "remainder_eos",
)


@dataclass
class Bucket:
    path: str
    rows: int
    segments: int


class RowSpool:
    """Scatters rows (stream order) into bucket files; memory: rows not flushed yet (< FLUSH_BYTES)."""

    FLUSH_BYTES = 32 << 20

    def __init__(
        self,
        directory: Path,
        row_length: int,
        token_dtype: str,
        rng: np.random.Generator | None,
        buckets: int = 1,
        bucket_rows: int = 1 << 62,
    ):
        self.dir = directory
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        self.L = row_length
        self.token_dtype = token_dtype
        self.rng = rng
        self.bucket_rows = bucket_rows
        self.rows = 0
        self.buckets: list[Bucket] = [self._new_bucket(b) for b in range(buckets if rng is not None else 1)]
        self._pending: dict[int, list[tuple[np.ndarray, RowBatch]]] = {}
        self._pending_bytes = 0
        self._which = open(directory / "buckets.u4", "wb")  # noqa: SIM115 (closed in close)

    def _new_bucket(self, b: int) -> Bucket:
        return Bucket(str(self.dir / f"bucket{b:05d}.rows"), 0, 0)

    def _bucket_of(self, n: int) -> np.ndarray:
        """Bucket of each of the next ``n`` rows (draws from the rng when shuffling)."""
        if self.rng is not None:
            if len(self.buckets) == 1:
                return np.zeros(n, dtype=np.int64)
            return self.rng.integers(0, len(self.buckets), size=n)
        which = np.arange(self.rows, self.rows + n, dtype=np.int64) // self.bucket_rows
        while len(self.buckets) <= int(which[-1]):
            self.buckets.append(self._new_bucket(len(self.buckets)))
        return which

    def add(self, batch: RowBatch) -> None:
        n = len(batch)
        if n == 0:
            return
        which = self._bucket_of(n)
        index = np.arange(self.rows, self.rows + n, dtype=np.int64)
        self.rows += n
        self._which.write(raw(which, "<u4"))
        order = np.argsort(which, kind="stable")
        first, last = int(which[order[0]]), int(which[order[-1]])
        bounds = np.searchsorted(which[order], np.arange(first, last + 2))
        for b in range(first, last + 1):
            lo, hi = int(bounds[b - first]), int(bounds[b - first + 1])
            if hi > lo:
                sel = order[lo:hi]
                part = batch if hi - lo == n else batch.select(sel)
                self._pending.setdefault(b, []).append((index[sel], part))
                self.buckets[b].rows += hi - lo
                self.buckets[b].segments += len(part.seg_ends)
        self._pending_bytes += batch.tokens.nbytes
        if self._pending_bytes >= self.FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        """Append each bucket's pending rows as one record (parts written one after the other)."""
        for b in sorted(self._pending):
            parts = self._pending[b]
            rows = sum(len(index) for index, _ in parts)
            segs = sum(len(batch.seg_ends) for _, batch in parts)
            with open(self.buckets[b].path, "ab") as f:
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

    def close(self) -> list[Bucket]:
        """Flush everything; the buckets (each file complete) in bucket order."""
        self.flush()
        self._which.close()
        return self.buckets

    def dropped_per_bucket(self, dropped: int) -> np.ndarray:
        """int64 [buckets]: how many of the last ``dropped`` rows of the stream each bucket holds."""
        counts = np.zeros(len(self.buckets), dtype=np.int64)
        if dropped > 0:
            tail = np.fromfile(self.dir / "buckets.u4", dtype="<u4", offset=(self.rows - dropped) * 4)
            counts += np.bincount(tail, minlength=len(self.buckets))
        return counts

    def remove(self) -> None:
        if not self._which.closed:
            self._which.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _read_into(f: BinaryIO, path: str, arrays: tuple[np.ndarray, ...]) -> None:
    for part in arrays:
        view = memoryview(part.reshape(-1).view(np.uint8))
        if f.readinto(view) != len(view):
            raise RuntimeError(f"{path}: the spool file is truncated (was the disk full?)")


def read_bucket(bucket: Bucket, row_length: int, token_dtype: str) -> tuple[np.ndarray, RowBatch]:
    """(stream index of every row, the rows) of one bucket, its records in the order written."""
    n, nseg = bucket.rows, bucket.segments
    index, counts = np.empty(n, dtype="<i8"), np.empty(n, dtype="<i4")
    tokens, ends = np.empty((n, row_length), dtype=token_dtype), np.empty(nseg, dtype="<i4")
    r = s = 0
    with open(bucket.path, "rb") as f:
        while head := f.read(16):
            k, kseg = (int(x) for x in np.frombuffer(head, dtype="<i8"))
            if r + k > n or s + kseg > nseg:
                break
            sections = (index[r : r + k], counts[r : r + k], tokens[r : r + k], ends[s : s + kseg])
            _read_into(f, bucket.path, sections)
            r, s = r + k, s + kseg
    if (r, s) != (n, nseg):
        raise RuntimeError(f"{bucket.path}: the spool file holds {r} rows, expected {n} (was the disk full?)")
    return index, RowBatch(tokens, ends, counts)


@dataclass
class ScatterJob:
    """One bucket of one split: where its kept rows start in the split's final order (``start``),
    the file boundaries of the split (``file_ends``: cumulative rows), and its permutation."""

    split: str
    bucket: Bucket
    row_length: int
    token_dtype: str
    eos: int
    keep: int  # rows with a stream index >= keep are dropped (equal shards)
    start: int
    file_ends: np.ndarray
    perm: np.ndarray | None
    parts_dir: str


def scatter_bucket(job: ScatterJob) -> dict[str, Any]:
    """Write one bucket's rows, in final order, as parts of the shard files they fall in.

    Returns ``parts`` ((file index, path, batch sizes) in file order) and ``counts``
    of rows, tokens, EOS, padding and segments written and dropped. The bucket file is removed."""
    L, eos = job.row_length, job.eos
    index, rows = read_bucket(job.bucket, L, job.token_dtype)
    order = job.perm if job.perm is not None else np.arange(len(index))
    counts = dict.fromkeys(COUNTS, 0)
    parts: dict[int, tuple[int, str, list[int]]] = {}
    files: dict[int, BinaryIO] = {}
    pos = job.start
    try:
        for lo in range(0, len(order), OUT_ROWS):
            sel = order[lo : lo + OUT_ROWS]
            batch = rows.select(sel)
            real = batch.real_tokens
            eos_per_row = ((batch.tokens == eos) & (np.arange(L)[None, :] < real[:, None])).sum(axis=1)
            kept = index[sel] < job.keep
            if not kept.all():
                gone = ~kept
                counts["remainder_rows"] += int(gone.sum())
                counts["remainder_tokens"] += int(real[gone].sum())
                counts["remainder_eos"] += int(eos_per_row[gone].sum())
                batch = batch.select(np.flatnonzero(kept))
                real, eos_per_row = real[kept], eos_per_row[kept]
            counts["rows"] += len(batch)
            counts["tokens"] += int(real.sum())
            counts["eos"] += int(eos_per_row.sum())
            counts["padding"] += int(len(batch) * L - real.sum())
            counts["segments"] += len(batch.seg_ends)
            done = 0
            while done < len(batch):  # cut at file boundaries
                k = int(np.searchsorted(job.file_ends, pos, side="right"))
                take = min(int(job.file_ends[k]) - pos, len(batch) - done)
                piece = batch if take == len(batch) else batch.select(np.arange(done, done + take))
                if k not in files:
                    path = Path(job.parts_dir) / f"{job.split}-{k:05d}.{Path(job.bucket.path).stem}.part"
                    files[k] = open(path, "wb")  # noqa: SIM115 (closed below)
                    parts[k] = (k, str(path), [])
                f = files[k]
                f.write(raw(piece.tokens, job.token_dtype))
                f.write(raw(piece.seg_counts, "<i4"))
                f.write(raw(piece.seg_ends, "<i4"))
                parts[k][2].append(take)
                done += take
                pos += take
    finally:
        for f in files.values():
            f.close()
    Path(job.bucket.path).unlink()
    return {"split": job.split, "parts": [parts[k] for k in sorted(parts)], "counts": counts}


def read_part(path: str, batches: list[int], row_length: int, token_dtype: str) -> Any:
    """The batches of one part (RowBatch each, in the sizes recorded)."""
    with open(path, "rb") as f:
        for n in batches:
            tokens = np.empty((n, row_length), dtype=token_dtype)
            seg_counts = np.empty(n, dtype="<i4")
            _read_into(f, path, (tokens, seg_counts))
            ends = np.empty(int(seg_counts.sum()), dtype="<i4")
            _read_into(f, path, (ends,))
            yield RowBatch(tokens, ends, seg_counts)
