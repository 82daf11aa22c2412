"""Packing documents into rows of seq_length + 1 tokens (EOS-aware), split, shuffle, shard.

compute (workers, per task): each document goes to the train or validation split by a hash of its
id (``validation_fraction``); its tokens, length and cut points are appended to the task's spill
files for that split.

decide (driver, streaming): per split, the spills are read in task order and packed:

* ``concat``: one EOS after each document, the stream cut into rows; documents span rows. The
  last partial row is padded (``tail: pad``) or dropped (``tail: drop``), counted either way.
* ``pad``: one document per row, padded; a document longer than a row is split into several rows
  (``long_docs: split``, at paragraph cuts when the tokenizer recorded them) or truncated
  (``long_docs: truncate``: its first row_length - 1 tokens plus the EOS are kept).
* ``bestfit``: best-fit-decreasing bin packing of the documents within a window of
  ``bestfit_window_rows`` rows' worth of tokens: documents that fit a row are never split;
  longer ones are split as in ``pad``. Padding and splits are reported against ``concat``.

Every row carries ``actual_seq_len`` (cumulative ends of its document pieces). Rows then go
through a seeded, bounded-memory shuffle (rows scattered into buckets of at most
``shuffle_buffer_mb``, each bucket permuted) and are written, in the same order, by every writer
in ``writers``. Train files hold equal row counts and their number is a multiple of
``shard_multiple``: the last ``rows mod files`` rows of the train stream are dropped and counted
(``equal_shards``). Token accounting is checked before the manifest is written:
tokens = Σ document tokens + documents (EOS) - dropped; EOS written = documents - EOS dropped.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from dataprep import stage as registry
from dataprep.document import Document
from dataprep.formats.rows import RowBatch, raw
from dataprep.stage import DriverContext, GlobalStage, RecipeError, StageContext, param, register

SPLITS = ("train", "validation")
CHUNK_TOKENS = 1 << 22
UINT16_LIMIT = 1 << 16


@dataclass
class PackParams:
    seq_length: int = param(512, help="tokens per training sample; rows hold seq_length + 1")
    packing: Literal["concat", "pad", "bestfit"] = param(
        "concat", help="concat: documents span rows; pad: one document per row; bestfit: bin packing"
    )
    tail: Literal["pad", "drop"] = param("pad", help="concat: the last partial row is padded or dropped")
    long_docs: Literal["split", "truncate"] = param(
        "split", help="pad/bestfit: documents longer than a row are split over rows, or truncated"
    )
    bestfit_window_rows: int = param(4096, help="bestfit: rows' worth of tokens packed together")
    validation_fraction: float = param(0.0, help="share of documents (by id hash) in the validation split")
    shuffle: bool = param(True, help="shuffle rows (seeded by the recipe seed, bounded memory)")
    shuffle_buffer_mb: int = param(256, help="memory bound of one shuffle bucket")
    dtype: Literal["int32", "uint16", "auto"] = param(
        "auto", help="token dtype of the .bin files (auto: uint16 when the vocabulary fits)"
    )
    writers: list[str] = param(["mindrecord", "bin"], help="shard formats to write (registered writers)")
    shards: int = param(0, help="train files (0: about shard_mb each, rounded up to shard_multiple)")
    shard_mb: int = param(256, help="target size of a shard file (int32 tokens) when shards is 0")
    shard_multiple: int = param(
        8, help="the number of train files is a multiple of this (data-parallel sizes)"
    )
    equal_shards: bool = param(True, help="drop the last rows mod files train rows so files hold equal rows")

    def validate(self) -> None:
        if self.seq_length < 1:
            raise ValueError("seq_length must be positive")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ValueError("validation_fraction must be in [0, 1)")
        if min(self.bestfit_window_rows, self.shuffle_buffer_mb, self.shard_mb, self.shard_multiple) < 1:
            raise ValueError(
                "bestfit_window_rows, shuffle_buffer_mb, shard_mb and shard_multiple must be >= 1"
            )
        if self.shards < 0:
            raise ValueError("shards must be >= 0")
        if not self.writers:
            raise ValueError("writers must name at least one shard format")


def split_of(doc_id: str, fraction: float) -> str:
    """'validation' for a deterministic ``fraction`` of document ids (xxh3-64 of the id), else 'train'."""
    if fraction <= 0.0:
        return "train"
    import xxhash

    h = xxhash.xxh3_64_intdigest(doc_id.encode("utf-8"))
    return "validation" if h < fraction * 2.0**64 else "train"


# ---------------------------------------------------------------------------------------------
# Packers: documents (tokens without EOS) in, RowBatches out, in stream order.


@dataclass
class DocChunk:
    """Consecutive documents: flat tokens (int32, no EOS), lengths (int64), cut points per doc
    (token offsets strictly inside the document where it may be split), or None for no cuts."""

    tokens: np.ndarray
    lengths: np.ndarray
    cuts: list[np.ndarray] | None = None

    def stream(self, eos: int) -> tuple[np.ndarray, np.ndarray]:
        """(tokens with one EOS after each document, exclusive end offset of each document)."""
        ends = np.cumsum(self.lengths + 1)
        out = np.empty(int(ends[-1]) if len(ends) else 0, dtype=np.int32)
        keep = np.ones(len(out), dtype=bool)
        keep[ends - 1] = False
        out[keep] = self.tokens
        out[ends - 1] = eos
        return out, ends


@dataclass
class PackStats:
    rows: int = 0
    padding: int = 0
    tail_dropped: int = 0
    eos_dropped: int = 0
    truncated_tokens: int = 0
    truncated_docs: int = 0
    split_docs: int = 0
    hard_cuts: int = 0
    extra: dict[str, int] = field(default_factory=dict)


def _rows_from_pieces(pieces: list[list[np.ndarray]], row_length: int, pad: int) -> RowBatch:
    """One row per entry of ``pieces`` (the pieces in the row, in order), padded with ``pad``."""
    n = len(pieces)
    tokens = np.full((n, row_length), pad, dtype=np.int32)
    counts = np.empty(n, dtype=np.int32)
    ends: list[int] = []
    for r, row in enumerate(pieces):
        pos = 0
        for p in row:
            tokens[r, pos : pos + len(p)] = p
            pos += len(p)
            ends.append(pos)
        counts[r] = len(row)
    return RowBatch(tokens, np.asarray(ends, dtype=np.int32), counts)


def piece_ends(m: int, cuts: np.ndarray | None, row_length: int, stats: PackStats) -> list[int]:
    """End offsets of the pieces of a document of ``m`` tokens (EOS included) split to fit rows:
    at the last cut point that fits, else at the row length (a hard cut, counted)."""
    ends: list[int] = []
    pos = 0
    while m - pos > row_length:
        limit = pos + row_length
        c = -1
        if cuts is not None and len(cuts):
            k = int(np.searchsorted(cuts, limit, side="right")) - 1
            if k >= 0 and cuts[k] > pos:
                c = int(cuts[k])
        if c < 0:
            c = limit
            stats.hard_cuts += 1
        ends.append(c)
        pos = c
    ends.append(m)
    return ends


class ConcatPacker:
    """Stream documents with an EOS after each; cut every row_length tokens (vectorised)."""

    def __init__(self, row_length: int, eos: int, pad: int, tail: str):
        self.L, self.eos, self.pad, self.tail = row_length, eos, pad, tail
        self.stats = PackStats()
        self._carry = np.zeros(0, dtype=np.int32)
        self._carry_ends = np.zeros(0, dtype=np.int64)

    def add(self, chunk: DocChunk) -> list[RowBatch]:
        stream, ends = chunk.stream(self.eos)
        L = self.L
        full = np.concatenate([self._carry, stream])
        ends = np.concatenate([self._carry_ends, ends + len(self._carry)])
        n = len(full) // L
        cut = n * L
        inside = ends[ends <= cut]
        self._carry = full[cut:].copy()
        self._carry_ends = ends[ends > cut] - cut
        if n == 0:
            return []
        row_of = (inside - 1) // L
        keys = np.concatenate([row_of * (L + 1) + (inside - row_of * L), np.arange(n) * (L + 1) + L])
        keys = np.unique(keys)
        counts = np.bincount(keys // (L + 1), minlength=n)
        self.stats.rows += n
        return [RowBatch(full[:cut].reshape(n, L), keys % (L + 1), counts)]

    def finish(self) -> list[RowBatch]:
        carry, carry_ends = self._carry, self._carry_ends
        self._carry = np.zeros(0, dtype=np.int32)
        self._carry_ends = np.zeros(0, dtype=np.int64)
        if not len(carry):
            return []
        if self.tail == "drop":
            self.stats.tail_dropped += len(carry)
            self.stats.eos_dropped += len(carry_ends)
            return []
        row = np.full((1, self.L), self.pad, dtype=np.int32)
        row[0, : len(carry)] = carry
        self.stats.rows += 1
        self.stats.padding += self.L - len(carry)
        return [RowBatch(row, carry_ends, np.asarray([len(carry_ends)]))]


class PadPacker:
    """One document per row (split over rows or truncated when longer), padded."""

    def __init__(self, row_length: int, eos: int, pad: int, long_docs: str):
        self.L, self.eos, self.pad, self.long_docs = row_length, eos, pad, long_docs
        self.stats = PackStats()

    def _pieces(self, chunk: DocChunk) -> Iterator[tuple[int, np.ndarray]]:
        """(document index within the chunk, piece) for every piece of every document, in order."""
        stream, ends = chunk.stream(self.eos)
        starts = ends - (chunk.lengths + 1)
        L = self.L
        for i in range(len(chunk.lengths)):
            s, e = int(starts[i]), int(ends[i])
            m = e - s
            if m <= L:
                yield i, stream[s:e]
            elif self.long_docs == "truncate":
                self.stats.truncated_docs += 1
                self.stats.truncated_tokens += m - L
                yield i, np.concatenate([stream[s : s + L - 1], stream[e - 1 : e]])
            else:
                self.stats.split_docs += 1
                cuts = chunk.cuts[i] if chunk.cuts is not None else None
                prev = 0
                for end in piece_ends(m, cuts, L, self.stats):
                    yield i, stream[s + prev : s + end]
                    prev = end

    def add(self, chunk: DocChunk) -> list[RowBatch]:
        pieces = [[p] for _, p in self._pieces(chunk)]
        if not pieces:
            return []
        batch = _rows_from_pieces(pieces, self.L, self.pad)
        self.stats.rows += len(batch)
        self.stats.padding += int(len(batch) * self.L - batch.real_tokens.sum())
        return [batch]

    def finish(self) -> list[RowBatch]:
        return []


class BestFitPacker(PadPacker):
    """Best-fit-decreasing bin packing of pieces within a bounded window."""

    def __init__(self, row_length: int, eos: int, pad: int, long_docs: str, window_rows: int):
        super().__init__(row_length, eos, pad, long_docs)
        self.window_tokens = window_rows * row_length
        self._items: list[np.ndarray] = []
        self._item_tokens = 0

    def add(self, chunk: DocChunk) -> list[RowBatch]:
        out: list[RowBatch] = []
        full: list[list[np.ndarray]] = []
        for _, piece in self._pieces(chunk):
            if len(piece) == self.L:
                full.append([piece])
                continue
            self._items.append(piece)
            self._item_tokens += len(piece)
            if self._item_tokens >= self.window_tokens:
                out += self._flush()
        if full:
            batch = _rows_from_pieces(full, self.L, self.pad)
            self.stats.rows += len(batch)
            out.insert(0, batch)
        return out

    def _flush(self) -> list[RowBatch]:
        items, self._items, self._item_tokens = self._items, [], 0
        if not items:
            return []
        L = self.L
        order = sorted(range(len(items)), key=lambda k: (-len(items[k]), k))
        bins: list[list[int]] = []
        by_free: dict[int, list[int]] = {}
        mask = 0  # bit c set <=> some open bin has exactly c free tokens
        for k in order:
            size = len(items[k])
            fits = mask >> size
            if fits:
                free = size + (fits & -fits).bit_length() - 1
                stack = by_free[free]
                b = stack.pop()
                if not stack:
                    mask &= ~(1 << free)
                bins[b].append(k)
                left = free - size
            else:
                b = len(bins)
                bins.append([k])
                left = L - size
            if left > 0:
                by_free.setdefault(left, []).append(b)
                mask |= 1 << left
        rows = [[items[k] for k in sorted(b)] for b in bins]
        batch = _rows_from_pieces(rows, L, self.pad)
        self.stats.rows += len(batch)
        self.stats.padding += int(len(batch) * L - batch.real_tokens.sum())
        return [batch]

    def finish(self) -> list[RowBatch]:
        return self._flush()


def make_packer(params: PackParams, eos: int, pad: int) -> ConcatPacker | PadPacker:
    L = params.seq_length + 1
    if params.packing == "concat":
        return ConcatPacker(L, eos, pad, params.tail)
    if params.packing == "pad":
        return PadPacker(L, eos, pad, params.long_docs)
    return BestFitPacker(L, eos, pad, params.long_docs, params.bestfit_window_rows)


# ---------------------------------------------------------------------------------------------
# Bounded-memory row shuffle: scatter rows into buckets on disk, then permute each bucket.


class RowSpool:
    """Rows on disk between packing and writing, with their stream index.

    With ``rng`` each row goes to a uniformly random bucket and ``batches()`` yields every bucket
    permuted (a uniform random permutation of all rows; memory = one bucket). Without, one
    bucket is replayed in stream order, a record at a time. A record is what one ``flush`` wrote
    of a bucket; rows not flushed yet (under FLUSH_BYTES in all) are served from memory as the
    record the next flush would have written, so small spools never touch the disk.
    """

    FLUSH_BYTES = 32 << 20
    OUT_ROWS = 4096

    def __init__(self, directory: Path, row_length: int, buckets: int, rng: np.random.Generator | None):
        self.dir = directory
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        self.L = row_length
        self.buckets = buckets if rng is not None else 1
        self.rng = rng
        self.rows = 0
        self._pending: dict[int, list[tuple[np.ndarray, RowBatch]]] = {}
        self._pending_bytes = 0
        self._bucket_rows = [0] * self.buckets  # rows and boundary values added to each bucket
        self._bucket_segs = [0] * self.buckets
        self._buffers: tuple[np.ndarray, ...] | None = None  # reused by _bucket

    def _path(self, b: int) -> Path:
        return self.dir / f"bucket{b:05d}.rows"

    def add(self, batch: RowBatch) -> None:
        n = len(batch)
        if n == 0:
            return
        index = np.arange(self.rows, self.rows + n, dtype=np.int64)
        self.rows += n
        if self.rng is None or self.buckets == 1:
            self._pending.setdefault(0, []).append((index, batch))
            self._bucket_rows[0] += n
            self._bucket_segs[0] += len(batch.seg_ends)
        else:
            which = self.rng.integers(0, self.buckets, size=n)
            order = np.argsort(which, kind="stable")
            bounds = np.searchsorted(which[order], np.arange(self.buckets + 1))
            for b in range(self.buckets):
                lo, hi = int(bounds[b]), int(bounds[b + 1])
                if hi > lo:
                    sel = order[lo:hi]
                    part = batch.select(sel)
                    self._pending.setdefault(b, []).append((index[sel], part))
                    self._bucket_rows[b] += hi - lo
                    self._bucket_segs[b] += len(part.seg_ends)
        self._pending_bytes += batch.tokens.nbytes
        if self._pending_bytes >= self.FLUSH_BYTES:
            self.flush()

    def _pending_record(self, b: int) -> tuple[np.ndarray, RowBatch] | None:
        """Bucket ``b``'s rows not flushed yet, as one record (None when there are none)."""
        parts = self._pending.get(b)
        if not parts:
            return None
        return np.concatenate([p[0] for p in parts]), RowBatch.concat([p[1] for p in parts], self.L)

    def flush(self) -> None:
        """Append each bucket's pending rows as one record (the parts written one after the other,
        never concatenated in memory)."""
        for b in sorted(self._pending):
            parts = self._pending[b]
            rows = sum(len(index) for index, _ in parts)
            segs = sum(len(batch.seg_ends) for _, batch in parts)
            with open(self._path(b), "ab") as f:
                f.write(raw(np.asarray([rows, segs]), "<i8"))
                for index, _ in parts:
                    f.write(raw(index, "<i8"))
                for _, batch in parts:
                    f.write(raw(batch.seg_counts, "<i4"))
                for _, batch in parts:
                    f.write(raw(batch.tokens, "<i4"))
                for _, batch in parts:
                    f.write(raw(batch.seg_ends, "<i4"))
        self._pending.clear()
        self._pending_bytes = 0

    def _records(self, b: int) -> Iterator[tuple[np.ndarray, RowBatch]]:
        """Bucket ``b``'s records in the order they were flushed, then its rows not flushed yet."""
        path = self._path(b)
        if path.exists():
            with open(path, "rb") as f:
                for n, nseg in self._headers(f):
                    index, counts = np.empty(n, dtype="<i8"), np.empty(n, dtype="<i4")
                    tokens, ends = np.empty((n, self.L), dtype="<i4"), np.empty(nseg, dtype="<i4")
                    self._read_sections(f, path, (index, counts, tokens, ends))
                    yield index, RowBatch(tokens, ends, counts)
        record = self._pending_record(b)
        if record is not None:
            self._pending_bytes -= record[1].tokens.nbytes
            del self._pending[b]
            yield record

    @staticmethod
    def _headers(f: Any) -> Iterator[tuple[int, int]]:
        """(rows, boundary values) of each record of an open bucket file, before its sections."""
        while head := f.read(16):
            n, nseg = (int(x) for x in np.frombuffer(head, dtype="<i8"))
            yield n, nseg

    @staticmethod
    def _read_sections(f: Any, path: Path, sections: tuple[np.ndarray, ...]) -> None:
        """Fill one record's arrays from ``f``, in the order ``flush`` writes them (index, counts,
        tokens, boundaries)."""
        for part in sections:
            view = memoryview(part.reshape(-1).view(np.uint8))
            if f.readinto(view) != len(view):
                raise RuntimeError(f"{path}: the spool file is truncated (was the disk full?)")

    def _bucket(self, b: int) -> tuple[np.ndarray, RowBatch]:
        """All of bucket ``b`` (its records in order, then its rows not flushed yet), read
        straight into buffers sized once for the largest bucket: one copy of every row, no
        concatenation, and no fresh memory to fault in per bucket. The arrays returned are views
        of those buffers, valid until the next call (``batches`` yields copies of their rows)."""
        n, nseg = self._bucket_rows[b], self._bucket_segs[b]
        if self._buffers is None:  # sized for the largest bucket once: memory already touched
            rows, segs = max(self._bucket_rows), max(self._bucket_segs)
            self._buffers = (
                np.empty(rows, dtype="<i8"),
                np.empty(rows, dtype="<i4"),
                np.empty((rows, self.L), dtype="<i4"),
                np.empty(segs, dtype="<i4"),
            )
        index_buf, counts_buf, tokens_buf, ends_buf = self._buffers
        index, counts, tokens, ends = index_buf[:n], counts_buf[:n], tokens_buf[:n], ends_buf[:nseg]
        r = s = 0
        path = self._path(b)
        if path.exists():
            with open(path, "rb") as f:
                for k, kseg in self._headers(f):
                    sections = (index[r : r + k], counts[r : r + k], tokens[r : r + k], ends[s : s + kseg])
                    self._read_sections(f, path, sections)
                    r, s = r + k, s + kseg
        for idx, batch in self._pending.pop(b, []):
            k, kseg = len(idx), len(batch.seg_ends)
            index[r : r + k], counts[r : r + k] = idx, batch.seg_counts
            tokens[r : r + k], ends[s : s + kseg] = batch.tokens, batch.seg_ends
            self._pending_bytes -= batch.tokens.nbytes
            r, s = r + k, s + kseg
        if (r, s) != (n, nseg):
            raise RuntimeError(f"{path}: the spool holds {r} rows, expected {n} (a bug: please report it)")
        return index, RowBatch(tokens, ends, counts)

    def batches(self) -> Iterator[tuple[np.ndarray, RowBatch]]:
        """(stream indices, rows) in final order."""
        for b in range(self.buckets):
            if self.rng is None:
                yield from self._records(b)
                continue
            if not self._bucket_rows[b]:
                continue
            index, batch = self._bucket(b)
            perm = self.rng.permutation(len(index))
            for lo in range(0, len(perm), self.OUT_ROWS):
                sel = perm[lo : lo + self.OUT_ROWS]
                yield index[sel], batch.select(sel)

    def remove(self) -> None:
        self._buffers = None
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------


def shard_plan(rows: int, files: int, equal: bool) -> tuple[list[int], int]:
    """(rows per file, rows kept): equal files drop rows mod files; else sizes differ by <= 1."""
    files = max(1, min(files, rows)) if rows else 1
    if equal:
        per = rows // files
        return [per] * files, per * files
    base, extra = divmod(rows, files)
    return [base + (1 if i < extra else 0) for i in range(files)], rows


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@register
class Pack(GlobalStage):
    """EOS-aware packing (concat / pad / bestfit) into shuffled, verified shards with a manifest."""

    name = "pack"
    Params = PackParams
    requires = ("tokenizer",)
    terminal = True

    def __init__(self, params: PackParams):
        super().__init__(params)
        self._files: dict[str, Any] = {}
        self._meta: dict[str, dict[str, int]] = {}

    def setup(self, ctx: DriverContext) -> None:
        for name in self.params.writers:
            if registry.get(name).kind != "writer":
                raise RecipeError(f"pack.writers: {name!r} is not a shard writer")
        if len(set(self.params.writers)) != len(self.params.writers):
            raise RecipeError("pack.writers: a format is named twice")

    def warm_ups(self) -> list[Callable[[Any], Any]]:
        """The shard writers' warm-ups (e.g. MindRecord's MindSpore import)."""
        return [w for w in (registry.get(name).warm_up for name in self.params.writers) if w is not None]

    # -- workers
    def begin_task(self, ctx: StageContext) -> None:
        self._files = {}
        self._meta = {s: {"documents": 0, "doc_tokens": 0, "min_id": -1, "max_id": -1} for s in SPLITS}
        self._tag = f"tmp{os.getpid()}"

    def _spill(self, ctx: StageContext, split: str, kind: str) -> Any:
        key = f"{split}.{kind}"
        f = self._files.get(key)
        if f is None:
            f = self._files[key] = open(ctx.work_dir / f".{ctx.task_id}.{key}.{self._tag}", "wb")  # noqa: SIM115
        return f

    def compute(self, batch: list[Document], ctx: StageContext) -> None:
        groups: dict[str, list[Document]] = {}
        for doc in batch:
            if doc.tokens is None:
                raise RuntimeError("pack needs token ids: put a tokenize stage before it")
            groups.setdefault(split_of(doc.id, self.params.validation_fraction), []).append(doc)
        for split, docs in groups.items():
            arrays = [np.asarray(d.tokens, dtype=np.int32) for d in docs]
            flat = np.concatenate(arrays)
            cuts = [d.meta_get("tokenize", {}).get("cuts", []) for d in docs]
            table = np.asarray([[len(a), len(c)] for a, c in zip(arrays, cuts, strict=True)], dtype="<i8")
            self._spill(ctx, split, "tokens").write(raw(flat, "<i4"))
            self._spill(ctx, split, "docs").write(raw(table, "<i8"))
            if any(cuts):
                flat_cuts = np.asarray([c for cs in cuts for c in cs], dtype="<i4")
                self._spill(ctx, split, "cuts").write(raw(flat_cuts, "<i4"))
            meta = self._meta[split]
            meta["documents"] += len(docs)
            meta["doc_tokens"] += len(flat)
            if len(flat):
                lo, hi = int(flat.min()), int(flat.max())
                meta["min_id"] = lo if meta["min_id"] < 0 else min(lo, meta["min_id"])
                meta["max_id"] = max(hi, meta["max_id"])
            ctx.stats.count(f"documents.{split}", len(docs))
            ctx.stats.count(f"doc_tokens.{split}", len(flat))

    def finish_compute(self, ctx: StageContext) -> None:
        for key, f in self._files.items():
            f.close()
            os.replace(f.name, ctx.work_dir / f"{ctx.task_id}.{key}")
        (ctx.work_dir / f"{ctx.task_id}.meta.json").write_text(json.dumps(self._meta))
        self._files = {}

    # -- driver
    def _chunks(self, work: Path, task_ids: list[str], split: str) -> Iterator[DocChunk]:
        for t in task_ids:
            docs_path = work / f"{t}.{split}.docs"
            if not docs_path.exists():
                continue
            table = np.fromfile(docs_path, dtype="<i8").reshape(-1, 2)
            cuts_path = work / f"{t}.{split}.cuts"
            all_cuts = np.fromfile(cuts_path, dtype="<i4") if cuts_path.exists() else None
            cut_off = np.concatenate([[0], np.cumsum(table[:, 1])])
            tok_off = np.concatenate([[0], np.cumsum(table[:, 0])])
            with open(work / f"{t}.{split}.tokens", "rb") as f:
                lo = 0
                while lo < len(table):
                    hi = int(np.searchsorted(tok_off, tok_off[lo] + CHUNK_TOKENS, side="right")) - 1
                    hi = min(max(hi, lo + 1), len(table))
                    tokens = np.fromfile(f, dtype="<i4", count=int(tok_off[hi] - tok_off[lo]))
                    cuts = None
                    if all_cuts is not None and self.params.packing != "concat":
                        cuts = [all_cuts[cut_off[i] : cut_off[i + 1]] for i in range(lo, hi)]
                    yield DocChunk(tokens.astype(np.int32, copy=False), table[lo:hi, 0].copy(), cuts)
                    lo = hi

    def _dtype(self, vocab_size: int) -> str:
        if self.params.dtype == "auto":
            return "uint16" if vocab_size <= UINT16_LIMIT else "int32"
        if self.params.dtype == "uint16" and vocab_size > UINT16_LIMIT:
            raise RecipeError(
                f"pack.dtype uint16 cannot hold a vocabulary of {vocab_size}; use int32 or auto"
            )
        return self.params.dtype

    def _train_files(self, rows: int, row_length: int) -> int:
        if self.params.shards:
            return self.params.shards
        target = max(1, (self.params.shard_mb << 20) // (row_length * 4))
        k = self.params.shard_multiple
        if rows < k:
            return 1
        return max(k, math.ceil(math.ceil(rows / target) / k) * k)

    def decide(self, ctx: DriverContext) -> dict[str, Any]:
        from dataprep.progress import Progress

        p = self.params
        tok = ctx.artifacts["tokenizer"]
        L = p.seq_length + 1
        eos = tok["eos_id"]
        pad = tok["pad_id"] if tok["pad_id"] is not None else eos
        vocab_size = tok["vocab_size"]
        dtype = self._dtype(vocab_size)
        metas = [json.loads((ctx.work_dir / f"{t}.meta.json").read_text()) for t in ctx.task_ids]
        totals = {s: {k: sum(m[s][k] for m in metas) for k in ("documents", "doc_tokens")} for s in SPLITS}
        max_id = max([m[s]["max_id"] for m in metas for s in SPLITS], default=-1)
        min_ids = [m[s]["min_id"] for m in metas for s in SPLITS if m[s]["min_id"] >= 0]
        if max_id >= tok["size"] or (min_ids and min(min_ids) < 0):
            raise RuntimeError(
                f"token ids reach {max_id}, outside the tokenizer's {tok['size']} ids: "
                "the tokenizer file is inconsistent"
            )
        if max(max_id, eos, pad) >= (UINT16_LIMIT if dtype == "uint16" else 1 << 31):
            raise RecipeError(f"pack.dtype {dtype} cannot hold token id {max(max_id, eos, pad)}; use int32")
        if totals["train"]["documents"] == 0:
            raise RecipeError(
                "pack: no documents reached the train split (all dropped, or validation_fraction too high)"
            )
        for warm_up in self.warm_ups():  # e.g. a slow import, on idle workers while the driver packs
            for _ in range(ctx.workers):  # whichever worker writes
                ctx.start(warm_up, None)
        # 1. pack every split into its spool (shuffle buckets)
        spools: dict[str, RowSpool] = {}
        packers: dict[str, Any] = {}
        for sid, split in enumerate(SPLITS):
            if totals[split]["documents"] == 0:
                continue
            est_rows = (totals[split]["doc_tokens"] + totals[split]["documents"]) / L * 1.2 + 1
            bucket_rows = max(1, (p.shuffle_buffer_mb << 20) // (3 * L * 4))
            buckets = max(1, math.ceil(est_rows / bucket_rows))
            rng = np.random.default_rng([ctx.seed, sid, 0]) if p.shuffle else None
            spool = spools[split] = RowSpool(ctx.work_dir / f"spool-{split}", L, buckets, rng)
            packer = packers[split] = make_packer(p, eos, pad)
            with Progress(f"pack {split}", total_docs=totals[split]["documents"], quiet=ctx.quiet) as bar:
                for chunk in self._chunks(ctx.work_dir, ctx.task_ids, split):
                    for batch in packer.add(chunk):
                        spool.add(batch)
                    bar.update(len(chunk.lengths), 0)
                for batch in packer.finish():
                    spool.add(batch)
        # 2. shard plan, then write rows in final order through every writer
        plan: dict[str, list[int]] = {}
        keep: dict[str, int] = {}
        for split, spool in spools.items():
            if split == "train":
                files = self._train_files(spool.rows, L)
                plan[split], keep[split] = shard_plan(spool.rows, files, p.equal_shards)
            else:
                files = max(1, math.ceil(spool.rows * L * 4 / (p.shard_mb << 20)))
                plan[split], keep[split] = shard_plan(spool.rows, files, False)
        meta = {
            "seq_length": p.seq_length,
            "row_length": L,
            "dtype": dtype,
            "vocab_size": vocab_size,
            "plan": plan,
            "with_loss_mask": p.packing != "concat",
            "eos_id": eos,
        }
        shard_dir = ctx.output_dir / "shards"
        shutil.rmtree(shard_dir, ignore_errors=True)  # leftovers of an interrupted earlier decide
        writers = [registry.get(w)(registry.NoParams(), shard_dir, meta) for w in p.writers]
        for writer in writers:
            writer.parallel_map, writer.background = ctx.map, ctx.start
        written: dict[str, dict[str, int]] = {}
        for split, spool in spools.items():
            w = written[split] = {"rows": 0, "tokens": 0, "eos": 0, "padding": 0, "segments": 0}
            w.update({"remainder_rows": 0, "remainder_tokens": 0, "remainder_eos": 0})
            with Progress(f"write {split} rows", total_docs=spool.rows, quiet=ctx.quiet) as bar:
                for index, batch in spool.batches():
                    real = batch.real_tokens
                    masks = np.arange(L)[None, :] < real[:, None]
                    eos_per_row = ((batch.tokens == eos) & masks).sum(axis=1)
                    kept = index < keep[split]
                    if not kept.all():
                        gone = ~kept
                        w["remainder_rows"] += int(gone.sum())
                        w["remainder_tokens"] += int(real[gone].sum())
                        w["remainder_eos"] += int(eos_per_row[gone].sum())
                        batch = batch.select(np.flatnonzero(kept))
                        real, eos_per_row = real[kept], eos_per_row[kept]
                    for writer in writers:
                        writer.write(batch, split)
                    w["rows"] += len(batch)
                    w["tokens"] += int(real.sum())
                    w["eos"] += int(eos_per_row.sum())
                    w["padding"] += int(len(batch) * L - real.sum())
                    w["segments"] += len(batch.seg_ends)
                    bar.update(len(index), 0)
            spool.remove()
        entries = [e for writer in writers for e in writer.close()]
        # 3. accounting and manifest
        splits_out: dict[str, Any] = {}
        for split, w in written.items():
            st = packers[split].stats
            t = totals[split]
            dropped = {
                "tail_tokens": st.tail_dropped,
                "truncated_tokens": st.truncated_tokens,
                "remainder_rows": w["remainder_rows"],
                "remainder_tokens": w["remainder_tokens"],
                "eos": st.eos_dropped + w["remainder_eos"],
            }
            expected = t["doc_tokens"] + t["documents"] - st.tail_dropped - st.truncated_tokens
            expected -= w["remainder_tokens"]
            if w["tokens"] != expected or w["eos"] != t["documents"] - dropped["eos"]:
                raise RuntimeError(
                    f"token accounting ({split}): wrote {w['tokens']} tokens / {w['eos']} EOS, expected "
                    f"{expected} / {t['documents'] - dropped['eos']} (a bug: please report it)"
                )
            concat_rows = math.ceil((t["doc_tokens"] + t["documents"]) / L)
            splits_out[split] = {
                "rows": w["rows"],
                "tokens": w["tokens"],
                "documents": t["documents"],
                "doc_tokens": t["doc_tokens"],
                "eos_tokens": w["eos"],
                "padding_tokens": w["padding"],
                "segments": w["segments"],
                "dropped": dropped,
                "packing": {
                    "truncated_docs": st.truncated_docs,
                    "split_docs": st.split_docs,
                    "hard_cuts": st.hard_cuts,
                    "concat_rows": concat_rows,
                    "rows_vs_concat": round(w["rows"] / concat_rows, 4) if concat_rows else None,
                    "padding_fraction": round(w["padding"] / (w["rows"] * L), 6) if w["rows"] else 0.0,
                },
                "files": [e for e in entries if e["split"] == split],
            }
            for name, value in (
                ("rows", w["rows"]),
                ("tokens_written", w["tokens"]),
                ("eos_written", w["eos"]),
                ("padding_tokens", w["padding"]),
                ("tail_tokens_dropped", st.tail_dropped),
                ("truncated_tokens", st.truncated_tokens),
                ("truncated_docs", st.truncated_docs),
                ("split_docs", st.split_docs),
                ("remainder_rows_dropped", w["remainder_rows"]),
                ("remainder_tokens_dropped", w["remainder_tokens"]),
                ("concat_rows", concat_rows),
            ):
                ctx.stats.count(f"{name}.{split}", value)
        tokenizer_entry = {k: v for k, v in tok.items() if k not in ("local_path", "examples_dir")}
        tokenizer_entry["roundtrip"] = _roundtrip_report(tok.get("examples_dir"), ctx.task_ids)
        if tokenizer_entry["roundtrip"]["examples"]:
            ex = tokenizer_entry["roundtrip"]["examples"][0]
            _log(
                "warning: the tokenizer does not decode back to the original text on some documents "
                f"(e.g. {ex['id']}: {ex['original']!r} -> {ex['decoded']!r}); "
                "see manifest.json tokenizer.roundtrip"
            )
        return {
            "tokenizer": tokenizer_entry,
            "shards": {
                "seq_length": p.seq_length,
                "row_length": L,
                "dtype": dtype,
                "packing": p.packing,
                "columns": ["input_ids", "actual_seq_len"]
                + (["loss_mask"] if meta["with_loss_mask"] else []),
                "vocab_size": vocab_size,
                "eos_id": eos,
                "pad_id": pad,
                "bos_id": tok["bos_id"],
                "shuffle": {
                    "enabled": p.shuffle,
                    "seed": ctx.seed,
                    "buckets": {s: sp.buckets for s, sp in spools.items()},
                },
                "formats": list(p.writers),
                "splits": splits_out,
                "totals": {
                    k: sum(s[k] for s in splits_out.values())
                    for k in ("rows", "tokens", "documents", "eos_tokens")
                },
            },
        }


def _roundtrip_report(examples_dir: str | None, task_ids: list[str]) -> dict[str, Any]:
    examples: list[dict[str, Any]] = []
    if examples_dir:
        for t in task_ids:
            path = Path(examples_dir) / f"{t}.roundtrip.json"
            if path.exists() and len(examples) < 10:
                examples += json.loads(path.read_text())[: 10 - len(examples)]
    return {"examples": examples, "note": "counts: stats.json, stage tokenize, counters roundtrip_*"}
