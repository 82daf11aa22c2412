"""Packing documents into rows of seq_length + 1 tokens (EOS-aware), split, shuffle, shard.

compute (workers, per task): each document goes to the train or validation split by a hash of its
id (``validation_fraction``); its tokens, length and cut points are appended to the task's spill
files for that split.

decide: per split, the spills are packed in task order (stream order):

* ``concat``: one EOS after each document, the stream cut into rows; documents span rows. The
  last partial row is padded (``tail: pad``) or dropped (``tail: drop``), counted either way;
  the documents whose EOS it held are rejected (``tail_dropped``): a document is kept, in the
  shards, exactly when its EOS is.
* ``pad``: one document per row, padded; a document longer than a row is split into several rows
  (``long_docs: split``, at paragraph cuts when the tokenizer recorded them) or truncated
  (``long_docs: truncate``: its first row_length - 1 tokens plus the EOS are kept).
* ``bestfit``: best-fit-decreasing bin packing of the documents within a window of
  ``bestfit_window_rows`` rows' worth of tokens (windows end with each task): documents that fit
  a row are never split; longer ones are split as in ``pad``. Padding and splits are reported
  against ``concat``.

Every row carries ``actual_seq_len`` (cumulative ends of its document pieces). Rows then go
through a seeded, bounded-memory shuffle (:mod:`dataprep.formats.rowspool`: rows scattered into
buckets of at most ``shuffle_buffer_mb``, each bucket permuted) and are written, in the same
order, by every writer of rows in ``writers``; a writer of whole documents (``megatron``) gets
instead each split's kept documents in stream order, one job per split. Train files hold equal
row counts and their number is a multiple of ``shard_multiple``; the ``rows mod files`` rows
left over (the last of the final order) go to the remainder file ``train-remainder``, so no row
is lost (``equal_shards``; see :mod:`dataprep.formats.shardplan`). Token accounting is checked
before the manifest is written: tokens = Σ document tokens + documents (EOS) - dropped; EOS
written = documents - EOS dropped. When no train row can be made (no train document, or under
``tail: drop`` fewer train tokens than a row) every document is rejected and decide raises
NothingLeft: the run ends there.

Where it runs: on the workers. ``concat``: one job per run of consecutive tasks; each task's
stream offset is known from the counts the tasks reported, so a job numbers its rows itself, and
the driver joins only the rows that span jobs. ``pad`` / ``bestfit``: each task packs its
documents on its own (one job per task), then jobs over runs of tasks move the rows into the
shuffle buckets under their stream numbers. The shuffle's second half is one job per bucket and
each shard file is one job. Outputs do not depend on the number of workers.
"""

from __future__ import annotations

import dataclasses
import itertools
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

from dataprep.decide_jobs import DecideJobs
from dataprep.document import Document, Drop
from dataprep.formats.manifest import Dropped, FileEntry, MixManifest, ShardsManifest, SourceMix, SplitEntry
from dataprep.formats.registry import get_format
from dataprep.formats.rows import RowBatch, raw
from dataprep.formats.rowspool import (
    COUNTS,
    Bucket,
    Buckets,
    RowSpool,
    ScatterJob,
    iter_records,
    merge_buckets,
    scatter_bucket,
)
from dataprep.formats.shardplan import TOKEN_DTYPES, ShardFileJob, ShardPlan, shard_plan, write_shard_file
from dataprep.plan import source_of
from dataprep.stage import (
    DriverContext,
    GlobalStage,
    InputError,
    NoParams,
    NothingLeft,
    RecipeError,
    StageContext,
    param,
    register,
)
from stages import _mix

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
    bestfit_window_rows: int = param(
        4096, help="bestfit: rows' worth of tokens packed together (a window ends with its task)"
    )
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
    equal_shards: bool = param(
        True,
        help="train files hold equal rows, the rows mod files left over go to a remainder file "
        "(train-remainder); false: file sizes differ by at most one row",
    )

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

    def add(self, other: PackStats) -> None:
        """Add another packer's counts (e.g. one task's) to these."""
        for f in dataclasses.fields(self):
            if f.name != "extra":
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        for k, v in other.extra.items():
            self.extra[k] = self.extra.get(k, 0) + v


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

    @property
    def carried(self) -> int:
        """Tokens held back: the start of the next row."""
        return len(self._carry)

    def take_carry(self) -> tuple[np.ndarray, np.ndarray]:
        """(tokens held back, their document ends), handed over instead of ``finish``."""
        carry, ends = self._carry, self._carry_ends
        self._carry = np.zeros(0, dtype=np.int32)
        self._carry_ends = np.zeros(0, dtype=np.int64)
        return carry, ends

    def add(self, chunk: DocChunk) -> list[RowBatch]:
        return self.add_stream(*chunk.stream(self.eos))

    def add_stream(self, stream: np.ndarray, ends: np.ndarray) -> list[RowBatch]:
        """Rows completed by ``stream`` (tokens, EOS included) with ``ends`` (exclusive end offset
        of each document within it)."""
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
        carry, carry_ends = self.take_carry()
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


def task_chunks(
    work: Path, task_id: str, split: str, with_cuts: bool, dtype: str = "<i4"
) -> Iterator[DocChunk]:
    """The documents one task spilled for ``split`` (tokens stored as ``dtype``), in chunks of
    about CHUNK_TOKENS tokens (none when it spilled none); ``with_cuts``: with their cut points,
    when the tokenizer recorded them."""
    docs_path = work / f"{task_id}.{split}.docs"
    if not docs_path.exists():
        return
    table = np.fromfile(docs_path, dtype="<i8").reshape(-1, 2)
    cuts_path = work / f"{task_id}.{split}.cuts"
    all_cuts = np.fromfile(cuts_path, dtype="<i4") if with_cuts and cuts_path.exists() else None
    cut_off = np.concatenate([[0], np.cumsum(table[:, 1])])
    tok_off = np.concatenate([[0], np.cumsum(table[:, 0])])
    with open(work / f"{task_id}.{split}.tokens", "rb") as f:
        lo = 0
        while lo < len(table):
            hi = int(np.searchsorted(tok_off, tok_off[lo] + CHUNK_TOKENS, side="right")) - 1
            hi = min(max(hi, lo + 1), len(table))
            tokens = np.fromfile(f, dtype=dtype, count=int(tok_off[hi] - tok_off[lo]))
            cuts = None
            if all_cuts is not None:
                cuts = [all_cuts[cut_off[i] : cut_off[i + 1]] for i in range(lo, hi)]
            yield DocChunk(tokens.astype(np.int32, copy=False), table[lo:hi, 0].copy(), cuts)
            lo = hi


def last_documents(
    work: Path, tasks: list[tuple[str, str]], split: str, count: int
) -> list[tuple[str, str, int, np.ndarray]]:
    """(id, source, characters, tokens without EOS) of the last ``count`` documents the ``tasks``
    (task id, token spill type; in stream order) spilled for ``split``, in stream order."""
    found: list[tuple[str, str, int, np.ndarray]] = []
    for task_id, dtype in reversed(tasks):
        if len(found) >= count:
            break
        with open(work / f"{task_id}.{split}.ids", encoding="utf-8") as f:
            where = [w for line in f for w in json.loads(line)]
        lengths = np.fromfile(work / f"{task_id}.{split}.docs", dtype="<i8").reshape(-1, 2)[:, 0]
        tokens = np.memmap(work / f"{task_id}.{split}.tokens", dtype=dtype, mode="r")
        ends = np.cumsum(lengths)
        for k in range(len(lengths) - 1, max(len(lengths) - 1 - (count - len(found)), -1), -1):
            doc_id, source, chars = where[k]
            piece = np.asarray(tokens[int(ends[k] - lengths[k]) : int(ends[k])], dtype=np.int32)
            found.append((doc_id, source, chars, piece))
    return found[::-1]


@dataclass
class PackJob:
    """Packing of consecutive tasks' documents of one split (``tasks``: task id and token spill
    type of each, in stream order) into a spool directory; for concat, their stream (EOS
    included) starts at the global token ``offset``."""

    work_dir: str
    tasks: list[tuple[str, str]]
    split: str
    offset: int
    row_length: int
    eos: int
    pad: int
    spool_dir: str
    token_dtype: str
    params: PackParams
    buckets: Buckets | None = None

    @property
    def tag(self) -> str:
        """Names this job's spool files (its first task)."""
        return self.tasks[0][0]

    def chunks(self, with_cuts: bool) -> Iterator[DocChunk]:
        for task_id, dtype in self.tasks:
            yield from task_chunks(Path(self.work_dir), task_id, self.split, with_cuts, dtype)


RUNS_PER_WORKER = 4  # packing jobs per worker: each job writes one file per bucket it reaches


def task_ranges(weights: list[int], jobs: int) -> list[tuple[int, int]]:
    """At most ``jobs`` contiguous [lo, hi) ranges covering all items, of about equal weight."""
    n = len(weights)
    if n == 0:
        return []
    jobs = max(1, min(jobs, n))
    cum = np.cumsum(weights, dtype=np.float64)
    cuts = {int(np.searchsorted(cum, cum[-1] * k / jobs)) + 1 for k in range(1, jobs)}
    bounds = [0, *sorted(c for c in cuts if 0 < c < n), n]
    return list(itertools.pairwise(bounds))


def job_ranges(weights: list[int], workers: int) -> list[tuple[int, int]]:
    """The runs of consecutive tasks the packing jobs take: RUNS_PER_WORKER per worker, of about
    equal weight (:func:`task_ranges`)."""
    return task_ranges(weights, RUNS_PER_WORKER * max(1, workers))


def pack_concat_task(job: PackJob) -> dict[str, Any]:
    """Concat, consecutive tasks, in any process: the rows lying wholly inside their stream go to
    the spool under their global row numbers; the tokens before its first row boundary (``head``)
    and after its last (``tail``) go back, as (tokens, document ends), for the driver to join with
    the neighbours'. Also returns the stream ``size`` (tokens, EOS included), ``rows`` spooled
    and this job's share of each bucket."""
    L = job.row_length
    assert job.buckets is not None
    packer = ConcatPacker(L, job.eos, job.pad, "pad")
    spool = RowSpool(Path(job.spool_dir), job.tag, L, job.token_dtype, job.buckets)
    need = (-job.offset) % L  # tokens before the first row boundary
    head: list[np.ndarray] = []
    head_ends: list[np.ndarray] = []
    size = head_size = 0
    row = (job.offset + need) // L
    for chunk in job.chunks(with_cuts=False):
        stream, ends = chunk.stream(job.eos)
        size += len(stream)
        if need:
            take = min(need, len(stream))
            head.append(stream[:take])
            head_ends.append(ends[ends <= take] + head_size)
            head_size += take
            need -= take
            stream, ends = stream[take:], ends[ends > take] - take
        if len(stream):
            for batch in packer.add_stream(stream, ends):
                spool.add(batch, np.arange(row, row + len(batch), dtype=np.int64))
                row += len(batch)
    empty_ends = np.zeros(0, dtype=np.int64)
    return {
        "head": (
            np.concatenate(head) if head else np.zeros(0, np.int32),
            np.concatenate([empty_ends, *head_ends]),
        ),
        "tail": packer.take_carry(),
        "size": size,
        "rows": spool.rows,
        "buckets": spool.close(),
    }


def _pack_concat(
    jobs: DecideJobs, base: PackJob, tasks: list[tuple[str, int, int, str]], assign: Buckets, bar: Any
) -> tuple[list[dict[int, Bucket]], PackStats]:
    """Concat packing, one job per run of consecutive tasks (a few runs per worker: each job
    writes a file per bucket it reaches); the driver joins the rows that span jobs (in stream
    order, as the results come in) and packs the stream's last partial row."""
    L = base.row_length
    offsets = np.concatenate([[0], np.cumsum([size for _, size, _, _ in tasks])])
    ranges = job_ranges([size for _, size, _, _ in tasks], jobs.workers)
    runs = [
        dataclasses.replace(
            base,
            tasks=[(t, dtype) for t, _, _, dtype in tasks[lo:hi]],
            offset=int(offsets[lo]),
            buckets=assign,
        )
        for lo, hi in ranges
    ]
    packer = ConcatPacker(L, base.eos, base.pad, base.params.tail)
    driver = RowSpool(Path(base.spool_dir), "driver", L, base.token_dtype, assign)
    shares: list[dict[int, Bucket]] = []
    pos = 0  # global offset of the first token the packer holds

    def join(result: dict[str, Any]) -> None:
        nonlocal pos
        job = runs[len(shares)]
        shares.append(result["buckets"])
        packer.stats.rows += result["rows"]
        tail_start = job.offset + result["size"] - len(result["tail"][0])
        for start, (tokens, ends) in ((job.offset, result["head"]), (tail_start, result["tail"])):
            if not len(tokens):
                continue
            if packer.carried == 0:
                pos = start
            if pos + packer.carried != start:
                raise RuntimeError(f"pack: {job.tag} does not continue the stream (a bug)")
            for batch in packer.add_stream(tokens, ends):
                driver.add(batch, np.arange(pos // L, pos // L + len(batch)))
                pos += len(batch) * L
        lo, hi = ranges[len(shares) - 1]
        bar.update(sum(docs for _, _, docs, _ in tasks[lo:hi]), 0)

    jobs.in_order(pack_concat_task, runs, join)
    for batch in packer.finish():
        driver.add(batch, np.arange(pos // L, pos // L + len(batch)))
    return [*shares, driver.close()], packer.stats


def pack_task_alone(job: PackJob) -> dict[str, Any]:
    """pad / bestfit, one task, in any process: its documents packed on their own, rows spooled
    in order under local numbers into one file. Returns ``rows``, the packer's ``stats`` and
    the file (a Bucket, or None without rows)."""
    packer = make_packer(job.params, job.eos, job.pad)
    spool = RowSpool(Path(job.spool_dir), job.tag, job.row_length, job.token_dtype, Buckets(None, 1, 1 << 62))
    rows = 0
    for batches in (*(packer.add(chunk) for chunk in job.chunks(with_cuts=True)), packer.finish()):
        for batch in batches:
            spool.add(batch, np.arange(rows, rows + len(batch), dtype=np.int64))
            rows += len(batch)
    return {"rows": rows, "stats": packer.stats, "file": spool.close().get(0)}


@dataclass
class RespoolJob:
    """Consecutive tasks' rows (one spool file each, local numbers) moved into the shuffle
    buckets under their stream numbers (local + the task's offset)."""

    files: list[Bucket]
    offsets: list[int]
    tag: str
    spool_dir: str
    row_length: int
    token_dtype: str
    buckets: Buckets


def respool_task(job: RespoolJob) -> dict[int, Bucket]:
    """Runs in any process, a record at a time. Returns this job's share of each bucket."""
    spool = RowSpool(Path(job.spool_dir), job.tag, job.row_length, job.token_dtype, job.buckets)
    for file, offset in zip(job.files, job.offsets, strict=True):
        for index, batch in iter_records(file.paths[0], job.row_length, job.token_dtype):
            spool.add(batch, index + offset)
    return spool.close()


def _pack_per_task(
    jobs: DecideJobs,
    base: PackJob,
    tasks: list[tuple[str, int, int, str]],
    key: int | None,
    bucket_rows: int,
    bar: Any,
) -> tuple[list[dict[int, Bucket]], PackStats, Buckets, list[int]]:
    """pad / bestfit: every task packed on its own, then its rows moved into the buckets once
    the row counts (hence the stream numbers) of all tasks are known."""
    alone = Path(base.spool_dir) / "tasks"
    alone.mkdir()
    singles = [
        dataclasses.replace(base, tasks=[(t, dtype)], spool_dir=str(alone)) for t, _, _, dtype in tasks
    ]
    results: list[dict[str, Any]] = []

    def take(result: dict[str, Any]) -> None:
        results.append(result)
        bar.update(tasks[len(results) - 1][2], 0)

    jobs.in_order(pack_task_alone, singles, take)
    stats = PackStats()
    for result in results:
        stats.add(result["stats"])
    assign = Buckets(key, max(1, math.ceil(stats.rows / bucket_rows)), bucket_rows)
    offsets = np.cumsum([0] + [r["rows"] for r in results])[:-1].tolist()
    spooled = [
        (r["file"], offset, job.tag)
        for r, offset, job in zip(results, offsets, singles, strict=True)
        if r["file"] is not None
    ]
    moves = [
        RespoolJob(
            [file for file, _, _ in spooled[lo:hi]],
            [offset for _, offset, _ in spooled[lo:hi]],
            spooled[lo][2],
            base.spool_dir,
            base.row_length,
            base.token_dtype,
            assign,
        )
        for lo, hi in job_ranges([file.rows for file, _, _ in spooled], jobs.workers)
    ]
    shares: list[dict[int, Bucket]] = []
    jobs.in_order(respool_task, moves, shares.append, inputs=lambda move: [f.paths[0] for f in move.files])
    return shares, stats, assign, [r["rows"] for r in results]


@dataclass
class DocumentsJob:
    """One split's kept documents (the first ``keep`` of its stream: the tasks' spills in
    ``work_dir``, task id and token spill type each, in stream order) written whole by the
    writer of the shard format ``writer`` (one that takes documents)."""

    work_dir: str
    tasks: list[tuple[str, str]]
    split: str
    keep: int
    writer: str
    shard_dir: str
    meta: dict[str, Any]


def write_documents_task(job: DocumentsJob) -> dict[str, Any]:
    """Runs in any process: the split's file in a documents format; its manifest entry."""
    from dataprep.formats.rows import DocumentBatch

    writer = get_format(job.writer).writer(NoParams(), Path(job.shard_dir), job.meta)
    handle = writer.open_file(job.split, 0)
    left = job.keep
    for task_id, dtype in job.tasks:
        for chunk in task_chunks(Path(job.work_dir), task_id, job.split, False, dtype):
            n = min(left, len(chunk.lengths))
            if n:
                lengths = chunk.lengths[:n]
                writer.write(handle, DocumentBatch(chunk.tokens[: int(lengths.sum())], lengths))
            left -= n
    if left:
        raise RuntimeError(f"{job.split}: {job.keep - left} documents for {job.writer}, expected {job.keep}")
    return writer.close_file(handle)


@dataclass
class Spooled:
    """A split packed into its spool: the buckets (files in a fixed order), how rows were
    assigned to them, and the packers' counts."""

    dir: Path
    buckets: list[Bucket]
    assign: Buckets
    stats: PackStats
    sources: tuple[list[int], list[int]] | None = None  # runs of rows by source (ScatterJob.sources)

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.buckets)


def _bucket_order(
    spooled: dict[str, Spooled], seed: int
) -> Iterator[tuple[str, Bucket, int, list[int] | None]]:
    """(split, bucket, first position of its rows in the split's final order, seed of its
    permutation or None for stream order) for every non-empty bucket, in final order."""
    for split, sp in spooled.items():
        start = 0
        for b, bucket in enumerate(sp.buckets):
            if bucket.rows:
                perm_seed = None if sp.assign.key is None else [seed, SPLITS.index(split), 1, b]
                yield split, bucket, start, perm_seed
                start += bucket.rows


def _scatter_and_write(
    ctx: DriverContext,
    scatter_jobs: Iterator[ScatterJob],
    plan: dict[str, list[int]],
    writers: list[str],
    shard_dir: str,
    meta: dict[str, Any],
) -> tuple[dict[str, dict[str, int]], list[dict[str, Any]]]:
    """Run the scatter jobs and start each file's job as soon as the buckets holding its rows are
    done. Returns the counts written per split, and the manifest entries (writer by writer, files
    in plan order)."""
    from dataprep.progress import Progress

    written = {split: dict.fromkeys(COUNTS, 0) for split in plan}
    parts: dict[str, list[list[tuple[str, list[int]]]]] = {
        s: [[] for _ in sizes] for s, sizes in plan.items()
    }
    file_ends = {split: np.cumsum(sizes) for split, sizes in plan.items()}
    jobs = DecideJobs(ctx)
    next_file = dict.fromkeys(plan, 0)
    files: dict[tuple[str, int], Any] = {}

    def start_ready_files(split: str) -> None:
        k = next_file[split]
        while k < len(plan[split]) and file_ends[split][k] <= written[split]["rows"]:
            if plan[split][k]:
                job = ShardFileJob(split, k, plan[split][k], parts[split][k], writers, shard_dir, meta)
                files[split, k] = jobs.submit(write_shard_file, job, [path for path, _ in job.parts])
            k += 1
        next_file[split] = k

    def collect(result: dict[str, Any]) -> None:
        split = result["split"]
        for key, value in result["counts"].items():
            written[split][key] += value
        for k, path, batches in result["parts"]:
            parts[split][k].append((path, batches))
        bar.update(result["counts"]["rows"], 0)
        start_ready_files(split)

    total = sum(sum(sizes) for sizes in plan.values())
    with Progress("shuffle and write rows", total_docs=total, quiet=ctx.quiet) as bar:
        jobs.in_order(scatter_bucket, scatter_jobs, collect, inputs=lambda job: job.bucket.paths)
    for split, sizes in plan.items():
        start_ready_files(split)  # a split without rows has no bucket to start its (empty) files
        if next_file[split] != len(sizes):
            raise RuntimeError(f"{split}: rows for {next_file[split]} of {len(sizes)} files (a bug)")
    in_plan_order = sorted(files, key=lambda key: (SPLITS.index(key[0]), key[1]))
    results = [files[key].result() for key in in_plan_order]
    entries = [r[w] for w in range(len(writers)) for r in results]
    return written, entries


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@register
class Pack(GlobalStage):
    """EOS-aware packing (concat / pad / bestfit) into shuffled, verified shards with a manifest."""

    name = "pack"
    Params = PackParams
    requires = ("tokenizer",)
    uses = ("sources",)  # the mix, when the recipe has sources
    terminal = True

    def __init__(self, params: PackParams):
        super().__init__(params)
        self._files: dict[str, Any] = {}
        self._meta: dict[str, dict[str, int]] = {}
        self._spill_dtype = "<i4"

    def setup(self, ctx: DriverContext) -> None:
        for name in self.params.writers:
            try:
                get_format(name)
            except ValueError as e:
                raise RecipeError(f"pack.writers: {e}") from None
        if len(set(self.params.writers)) != len(self.params.writers):
            raise RecipeError("pack.writers: a format is named twice")
        ctx.publish("seq_length", self.params.seq_length)  # a trained tokenizer's model_max_length

    def warm_ups(self) -> list[Callable[[Any], Any]]:
        """The shard writers' warm-ups (e.g. MindRecord's MindSpore import), run ahead in the
        processes that will write the files (the driver at one worker, else the pool's workers)."""
        warm_ups = (get_format(name).writer.warm_up for name in self.params.writers)
        return [w for w in warm_ups if w is not None]

    # -- workers
    def begin_task(self, ctx: StageContext) -> None:
        self._files = {}
        # token spills in uint16 when every id of the tokenizer fits: half the disk and I/O
        size = ctx.artifacts.get("tokenizer", {}).get("size", 1 << 31)
        self._spill_dtype = "<u2" if size <= UINT16_LIMIT else "<i4"
        self._meta = {s: {"documents": 0, "doc_tokens": 0, "min_id": -1, "max_id": -1} for s in SPLITS}
        self._tag = f"tmp{os.getpid()}"
        self._names = [s["name"] for s in ctx.artifacts.get("sources", {}).get("sources", [])]
        self._source = -1

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
            if self._names:
                source = source_of(doc.source, self._names)
                if source < 0 or (self._source >= 0 and source != self._source):
                    raise RuntimeError(f"pack: {doc.where}: in no source of the recipe, or a task of two")
                self._source = source
        for split, docs in groups.items():
            arrays = [np.asarray(d.tokens, dtype=np.int32) for d in docs]
            flat = np.concatenate(arrays)
            cuts = [d.meta_get("tokenize", {}).get("cuts", []) for d in docs]
            table = np.asarray([[len(a), len(c)] for a, c in zip(arrays, cuts, strict=True)], dtype="<i8")
            if (
                len(flat)
                and self._spill_dtype == "<u2"
                and not 0 <= int(flat.min()) <= int(flat.max()) < UINT16_LIMIT
            ):
                raise RuntimeError(
                    "pack: token ids outside the tokenizer's ids: the tokenizer file is inconsistent"
                )
            self._spill(ctx, split, "tokens").write(raw(flat, self._spill_dtype))
            self._spill(ctx, split, "docs").write(raw(table, "<i8"))
            where = [[d.id, d.source, len(d.text)] for d in docs]  # to name documents dropped in decide
            self._spill(ctx, split, "ids").write(json.dumps(where, ensure_ascii=False).encode() + b"\n")
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
        meta = {**self._meta, "token_dtype": self._spill_dtype, "source": self._source}
        (ctx.work_dir / f"{ctx.task_id}.meta.json").write_text(json.dumps(meta))
        self._files = {}

    # -- driver
    def _pack_split(
        self,
        ctx: DriverContext,
        sid: int,
        split: str,
        metas: list[dict[str, Any]],
        token_dtype: str,
        eos: int,
        pad: int,
        work_dir: Path | None = None,
    ) -> Spooled:
        """Pack one split into its spool, with jobs on the workers. ``concat``: a run of tasks'
        rows start at a token offset known from the counts every task reported, so a job numbers
        its rows itself and the driver joins only the rows that span jobs. ``pad`` and
        ``bestfit``: each task packs its documents on its own (bestfit's windows end with the
        task), then, once every task's row count is known, jobs over runs of tasks move the rows
        into the shuffle buckets under their stream numbers."""
        from dataprep.progress import Progress

        p = self.params
        L = p.seq_length + 1
        key = (
            int(np.random.SeedSequence([ctx.seed, sid]).generate_state(1, np.uint64)[0])
            if p.shuffle
            else None
        )
        bucket_rows = max(1, (p.shuffle_buffer_mb << 20) // (3 * L * 4))
        spool_dir = ctx.work_dir / f"spool-{split}"
        shutil.rmtree(spool_dir, ignore_errors=True)
        spool_dir.mkdir(parents=True)
        tasks = [
            (
                t,
                m[split]["doc_tokens"] + m[split]["documents"],
                m[split]["documents"],
                m.get("token_dtype", "<i4"),
            )
            for t, m in zip(ctx.task_ids, metas, strict=True)
            if m[split]["documents"]
        ]
        documents = sum(docs for _, _, docs, _ in tasks)
        work = str(work_dir or ctx.work_dir)
        base = PackJob(work, [], split, 0, L, eos, pad, str(spool_dir), token_dtype, p)
        source_of_task = {t: m.get("source", -1) for t, m in zip(ctx.task_ids, metas, strict=True)}
        with Progress(f"pack {split}", total_docs=documents, quiet=ctx.quiet) as bar:
            if p.packing == "concat":
                rows = math.ceil(sum(size for _, size, _, _ in tasks) / L)
                assign = Buckets(key, max(1, math.ceil(rows / bucket_rows)), bucket_rows)
                shares, stats = _pack_concat(DecideJobs(ctx), base, tasks, assign, bar)
                # a row's source: that of its first token (the task holding stream token r * L)
                offsets = np.cumsum([0] + [size for _, size, _, _ in tasks])[:-1]
                row_starts = [-(-int(o) // L) for o in offsets]
            else:
                shares, stats, assign, task_rows = _pack_per_task(
                    DecideJobs(ctx), base, tasks, key, bucket_rows, bar
                )
                row_starts = np.cumsum([0, *task_rows])[:-1].tolist()
        sources = None
        if "sources" in ctx.artifacts:
            sources = (row_starts, [source_of_task[t] for t, *_ in tasks])
        return Spooled(spool_dir, merge_buckets(shares), assign, stats, sources)

    def _last_documents(
        self,
        ctx: DriverContext,
        split: str,
        metas: list[dict[str, Any]],
        count: int,
        work_dir: Path | None = None,
    ) -> list[tuple[Document, int, int]]:
        """(document with its text decoded from its tokens, its characters when it reached this
        stage, its tokens) of the last ``count`` documents of ``split``'s stream, in stream order."""
        from dataprep.tokenizers.load import load_tokenizer

        tasks = [
            (t, m.get("token_dtype", "<i4"))
            for t, m in zip(ctx.task_ids, metas, strict=True)
            if m[split]["documents"]
        ]
        tok = load_tokenizer(ctx.artifacts["tokenizer"]["local_path"])
        return [
            (Document(id=doc_id, text=tok.decode(tokens), source=source), chars, len(tokens))
            for doc_id, source, chars, tokens in last_documents(work_dir or ctx.work_dir, tasks, split, count)
        ]

    def _reject_tail(
        self,
        ctx: DriverContext,
        split: str,
        metas: list[dict[str, Any]],
        count: int,
        size: int,
        kept: int,
        work_dir: Path | None = None,
    ) -> None:
        """Reject the last ``count`` documents of ``split``'s concat stream (``size`` tokens, EOS
        included), whose EOS fell in the last partial row that ``tail: drop`` dropped: the
        stream's first ``kept`` tokens are in the shards, and a document is in the shards if and
        only if its EOS is."""
        docs = self._last_documents(ctx, split, metas, count, work_dir)
        start = size - sum(n + 1 for *_, n in docs)
        for doc, chars, n in docs:
            stays = max(0, kept - start)
            detail = "its EOS fell in the last partial row of the stream, which pack.tail: drop drops"
            if stays:
                detail += f"; its first {stays} of {n} tokens end the last row kept"
            extra = {"split": split, "tokens": n, "tokens_in_shards": stays}
            ctx.reject(Drop(doc, "tail_dropped", detail=detail, extra=extra), chars=chars)
            start += n + 1

    def _nothing_to_train_on(
        self, ctx: DriverContext, metas: list[dict[str, Any]], totals: dict[str, Any]
    ) -> None:
        """No train row can be made: reject every document and end the run. No document reached
        the train split: ``no_train_documents``; its stream is shorter than a row under ``tail:
        drop``: ``tail_dropped`` (train) and ``no_train_rows`` (validation)."""
        p = self.params
        train = totals["train"]
        if train["documents"] == 0:
            why = (
                f"no document reached the train split: the {totals['validation']['documents']} left went "
                f"to validation (pack.validation_fraction={p.validation_fraction})"
            )
            reasons = {"validation": "no_train_documents"}
        else:
            why = (
                f"the train split holds {train['doc_tokens'] + train['documents']} tokens, less than one "
                f"row of {p.seq_length + 1}, and pack.tail: drop keeps no partial row"
            )
            reasons = {"train": "tail_dropped", "validation": "no_train_rows"}
        for split in SPLITS:
            for doc, chars, n in self._last_documents(ctx, split, metas, totals[split]["documents"]):
                drop = Drop(doc, reasons[split], detail=why, extra={"split": split, "tokens": n})
                ctx.reject(drop, chars=chars)
        raise NothingLeft(f"pack: {why}")

    def drop_hint(self, reason: str, label: str) -> str | None:
        p = self.params
        if reason in ("tail_dropped", "no_train_rows"):
            return (
                f"set {label}.tail: pad, or lower {label}.seq_length (now {p.seq_length}), or add documents"
            )
        if reason == "no_train_documents":
            return f"add documents, or lower {label}.validation_fraction (now {p.validation_fraction})"
        return super().drop_hint(reason, label)

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
        train_tokens = totals["train"]["doc_tokens"] + totals["train"]["documents"]
        if totals["train"]["documents"] == 0 or (
            p.packing == "concat" and p.tail == "drop" and train_tokens < L
        ):
            self._nothing_to_train_on(ctx, metas, totals)
        # (what a writer needs was imported ahead, while the tokenizer trained: see warm_ups;
        # a process that missed it imports it with its first file)
        # 0. the mix (recipes with sources): the train spills rewritten, copies and all
        mix: MixManifest | None = None
        mixed_dir: Path | None = None
        pack_metas = metas
        if "sources" in ctx.artifacts:
            mix, mixed_dir, pack_metas = self._apply_mix(ctx, metas)
            totals["train"] = {k: sum(m["train"][k] for m in pack_metas) for k in ("documents", "doc_tokens")}
        # 1. pack every split into its spool (shuffle buckets)
        token_dtype = TOKEN_DTYPES[dtype]
        spooled: dict[str, Spooled] = {}
        for sid, split in enumerate(SPLITS):
            if totals[split]["documents"]:
                in_dir = mixed_dir if split == "train" else None
                spooled[split] = self._pack_split(
                    ctx, sid, split, pack_metas if split == "train" else metas, token_dtype, eos, pad, in_dir
                )
        # 2. shard plan, then every bucket scattered into parts of the files (one job per bucket)
        #    and every file written from its parts in every format (one job per file)
        plans: dict[str, ShardPlan] = {}
        for split, sp in spooled.items():
            if split == "train":
                plans[split] = shard_plan(sp.rows, self._train_files(sp.rows, L), p.equal_shards)
            else:
                plans[split] = shard_plan(
                    sp.rows, max(1, math.ceil(sp.rows * L * 4 / (p.shard_mb << 20))), False
                )
        plan = {split: sp.sizes for split, sp in plans.items()}
        meta = {
            "seq_length": p.seq_length,
            "row_length": L,
            "dtype": dtype,
            "vocab_size": vocab_size,
            "plan": plan,
            "remainder_file": {split: sp.remainder for split, sp in plans.items()},
            "with_loss_mask": p.packing != "concat",
            "eos_id": eos,
            "sources": [s["name"] for s in ctx.artifacts["sources"]["sources"]] if mix else None,
        }
        shard_dir = ctx.output_dir / "shards"
        shutil.rmtree(shard_dir, ignore_errors=True)  # leftovers of an interrupted earlier decide
        writers = [get_format(w).writer(NoParams(), shard_dir, meta) for w in p.writers]
        for writer in writers:
            writer.prepare()
        row_writers = [w for w in p.writers if get_format(w).takes == "rows"]
        documents = [  # formats of whole documents: one job per split, beside the rows' jobs
            DecideJobs(ctx).submit(
                write_documents_task,
                DocumentsJob(
                    str(mixed_dir if split == "train" and mixed_dir else ctx.work_dir),
                    [
                        (t, m.get("token_dtype", "<i4"))
                        for t, m in zip(ctx.task_ids, pack_metas if split == "train" else metas, strict=True)
                        if m[split]["documents"]
                    ],
                    split,
                    totals[split]["documents"] - sp.stats.eos_dropped,
                    name,
                    str(shard_dir),
                    meta,
                ),
            )
            for name in p.writers
            if get_format(name).takes == "documents"
            for split, sp in spooled.items()
        ]
        parts_dir = ctx.work_dir / "shard-parts"
        shutil.rmtree(parts_dir, ignore_errors=True)
        parts_dir.mkdir(parents=True)
        scatter_jobs = (
            ScatterJob(split, number, bucket, L, token_dtype, eos, start, ends, perm_seed, parts, sp.sources)
            for number, (split, bucket, start, perm_seed) in enumerate(_bucket_order(spooled, ctx.seed))
            for ends, parts, sp in [(np.cumsum(plan[split]), str(parts_dir), spooled[split])]
        )
        written, entries = _scatter_and_write(ctx, scatter_jobs, plan, row_writers, str(shard_dir), meta)
        entries += [future.result() for future in documents]
        for sp in spooled.values():
            shutil.rmtree(sp.dir, ignore_errors=True)
        shutil.rmtree(parts_dir, ignore_errors=True)
        for writer in writers:
            writer.commit()
        for split, sp in spooled.items():  # documents whose EOS fell in a dropped tail
            if sp.stats.eos_dropped:
                size = totals[split]["doc_tokens"] + totals[split]["documents"]
                self._reject_tail(
                    ctx,
                    split,
                    pack_metas if split == "train" else metas,
                    sp.stats.eos_dropped,
                    size,
                    size - sp.stats.tail_dropped,
                    mixed_dir if split == "train" else None,
                )
        # 3. accounting and manifest
        splits_out = {
            split: self._split_entry(
                ctx, split, w, totals[split], spooled[split].stats, plans[split], entries
            )
            for split, w in written.items()
        }
        tokenizer_entry = {k: v for k, v in tok.items() if k not in ("local_path", "examples_dir")}
        tokenizer_entry["roundtrip"] = _roundtrip_report(tok.get("examples_dir"), ctx.task_ids)
        if tokenizer_entry["roundtrip"]["examples"]:
            ex = tokenizer_entry["roundtrip"]["examples"][0]
            _log(
                "warning: the tokenizer does not decode back to the original text on some documents "
                f"(e.g. {ex['id']}: {ex['original']!r} -> {ex['decoded']!r}); "
                "see manifest.json tokenizer.roundtrip"
            )
        shards = ShardsManifest(
            seq_length=p.seq_length,
            row_length=L,
            dtype=dtype,
            packing=p.packing,
            columns=["input_ids", "actual_seq_len"]
            + (["loss_mask"] if meta["with_loss_mask"] else [])
            + (["source_id"] if mix else []),
            vocab_size=vocab_size,
            eos_id=eos,
            pad_id=pad,
            bos_id=tok["bos_id"],
            shuffle={
                "enabled": p.shuffle,
                "seed": ctx.seed,
                "buckets": {s: len(sp.buckets) for s, sp in spooled.items()},
            },
            formats=list(p.writers),
            splits=splits_out,
            totals={
                k: sum(getattr(s, k) for s in splits_out.values())
                for k in ("rows", "tokens", "documents", "eos_tokens")
            },
            sources=meta["sources"],
        )
        out: dict[str, Any] = {"tokenizer": tokenizer_entry, "shards": shards.to_json()}
        if mix is not None:
            train = spooled.get("train")
            if train is not None and train.sources is not None:
                starts, ids = train.sources
                ends = [*starts[1:], train.rows]
                for name, entry in mix.sources.items():
                    entry.rows = sum(
                        max(0, min(e, train.rows) - s)
                        for s, e, i in zip(starts, ends, ids, strict=True)
                        if i == entry.source_id
                    )
                    ctx.stats.count(f"mix_rows.{name}", entry.rows)
            out["mix"] = mix.to_json()
        return out

    def _apply_mix(
        self, ctx: DriverContext, metas: list[dict[str, Any]]
    ) -> tuple[MixManifest, Path, list[dict[str, Any]]]:
        """The mix of the train split (:mod:`stages._mix`): per source its target tokens, each
        document's copies, each task's copies in stream order (two copies of a document never in
        one row); the train spills rewritten so into ``work/mixed`` (one job per task), the
        documents no copy of which is written rejected (``mix_not_chosen``). Returns the
        manifest's ``mix`` block, the directory of the rewritten spills and the metas describing
        them. A source short of its share: a warning, or under ``mix.policy: strict`` an
        InputError before anything is written."""
        config = ctx.artifacts["sources"]
        sources, settings = config["sources"], config["mix"]
        names = [s["name"] for s in sources]
        tasks = [t for t, m in zip(ctx.task_ids, metas, strict=True) if m["train"]["documents"]]
        by_task = dict(zip(ctx.task_ids, metas, strict=True))
        lengths: dict[str, np.ndarray] = {}
        where: dict[str, list[list[Any]]] = {}
        for t in tasks:
            lengths[t] = np.fromfile(ctx.work_dir / f"{t}.train.docs", dtype="<i8").reshape(-1, 2)[:, 0] + 1
            with open(ctx.work_dir / f"{t}.train.ids", encoding="utf-8") as f:
                where[t] = [w for line in f for w in json.loads(line)]
        of_source = [[t for t in tasks if by_task[t]["source"] == k] for k in range(len(names))]
        available = [int(sum(int(lengths[t].sum()) for t in ts)) for ts in of_source]
        targets = _mix.plan_targets(
            available,
            [s["share"] for s in sources],
            [s["max_epochs"] for s in sources],
            int(settings.get("total_tokens", 0)),
        )
        short = [k for k, n in enumerate(targets.short) if n >= 1]
        for k in short:
            have = available[k] * sources[k]["max_epochs"]
            msg = (
                f"mix: source {names[k]!r} is short by {int(targets.short[k])} tokens: its share "
                f"{sources[k]['share']:g} of {int(targets.total)} is {int(targets.goal[k])} tokens, it has "
                f"{available[k]} after cleaning and dedup (x max_epochs {sources[k]['max_epochs']:g} = "
                f"{int(have)})"
            )
            if settings.get("policy") == "strict":
                raise InputError(f"{msg}; mix.policy is strict, so no shard was written")
            _log(f"warning: {msg}; the achieved shares will differ from the targets")
        mult: dict[str, np.ndarray] = {}
        for k, ts in enumerate(of_source):
            if not ts:
                continue
            ids = [w[0] for t in ts for w in where[t]]
            joined = np.concatenate([lengths[t] for t in ts])
            m = _mix.multiplicities(joined, _mix.doc_hash(ids, ctx.seed), targets.planned[k])
            cuts = np.cumsum([0] + [len(lengths[t]) for t in ts])
            for j, t in enumerate(ts):
                mult[t] = m[cuts[j] : cuts[j + 1]]
        row = self.params.seq_length + 1 if self.params.packing == "concat" else 1
        mixed_dir = ctx.work_dir / "mixed"
        mixed_dir.mkdir(exist_ok=True)
        offset = 0
        jobs: list[_mix.RewriteJob] = []
        new_metas = [json.loads(json.dumps(m)) for m in metas]
        new_by_task = dict(zip(ctx.task_ids, new_metas, strict=True))
        written = [[0, 0] for _ in names]  # copies, tokens (with EOS)
        kept = [[0, 0] for _ in names]
        unplaced = [0 for _ in names]
        for i, t in enumerate(tasks):
            k = by_task[t]["source"]
            order, left = _mix.order_copies(lengths[t], mult[t], offset, row, [ctx.seed, i])
            offset += int(lengths[t][order].sum())
            np.save(mixed_dir / f"{t}.order.npy", order)
            dtype = by_task[t].get("token_dtype", "<i4")
            order_path = str(mixed_dir / f"{t}.order.npy")
            jobs.append(_mix.RewriteJob(str(ctx.work_dir), str(mixed_dir), t, dtype, order_path))
            new_by_task[t]["train"]["documents"] = len(order)
            new_by_task[t]["train"]["doc_tokens"] = int(lengths[t][order].sum()) - len(order)
            written[k][0] += len(order)
            written[k][1] += int(lengths[t][order].sum())
            chosen = mult[t] > 0
            kept[k][0] += int(chosen.sum())
            kept[k][1] += int(lengths[t][chosen].sum())
            unplaced[k] += int(left.sum())
            for j in np.flatnonzero(~chosen).tolist():
                doc_id, source, chars = where[t][j]
                drop = Drop(
                    Document(id=doc_id, text="", source=source),
                    "mix_not_chosen",
                    detail=f"source {names[k]}: not among the documents chosen (seeded hash) for its share",
                    extra={"source": names[k], "tokens": int(lengths[t][j]) - 1},
                )
                ctx.reject(drop, chars=chars)
        for t, m in zip(ctx.task_ids, new_metas, strict=True):
            if t not in mult:
                m["train"]["documents"] = m["train"]["doc_tokens"] = 0
        DecideJobs(ctx).map(_mix.rewrite_task, jobs)
        shares = _mix.achieved([w[1] for w in written])
        tolerance = float(settings.get("tolerance", 0.005))
        entries: dict[str, SourceMix] = {}
        for k, name in enumerate(names):
            docs_available = sum(len(lengths[t]) for t in of_source[k])
            entries[name] = SourceMix(
                source_id=k,
                target_share=sources[k]["share"],
                achieved_share=round(shares[k], 6),
                epochs=_mix.epochs_of(written[k][1], available[k]),
                max_epochs=sources[k]["max_epochs"],
                priority=sources[k]["priority"],
                docs_available=docs_available,
                tokens_available=available[k],
                docs_kept=kept[k][0],
                tokens_kept=kept[k][1],
                docs_written=written[k][0],
                tokens_written=written[k][1],
                short_tokens=int(targets.short[k]),
                unplaced_copies=unplaced[k],
            )
            for key in ("docs_written", "tokens_written", "unplaced_copies"):
                ctx.stats.count(f"mix_{key}.{name}", getattr(entries[name], key))
        met = all(_mix.within(e.achieved_share, e.target_share, tolerance) for e in entries.values())
        mix = MixManifest(
            sources=entries,
            total_tokens=int(sum(w[1] for w in written)),
            policy=str(settings.get("policy", "warn")),
            tolerance=tolerance,
            met=met,
            short=[names[k] for k in short],
        )
        if not met and not short:
            _log("warning: mix: achieved shares outside the tolerance of the targets (see manifest.json mix)")
        return mix, mixed_dir, new_metas

    def _split_entry(
        self,
        ctx: DriverContext,
        split: str,
        written: dict[str, int],
        totals: dict[str, int],
        st: PackStats,
        plan: ShardPlan,
        entries: list[dict[str, Any]],
    ) -> SplitEntry:
        """The manifest entry of ``split``, its token accounting checked (``written``: what the
        files hold; ``totals``: documents and tokens the tasks spilled), its counters counted."""
        L = self.params.seq_length + 1
        w, t = written, totals
        dropped = Dropped(
            tail_tokens=st.tail_dropped, truncated_tokens=st.truncated_tokens, eos=st.eos_dropped
        )
        expected = t["doc_tokens"] + t["documents"] - st.tail_dropped - st.truncated_tokens
        if w["tokens"] != expected or w["eos"] != t["documents"] - dropped.eos:
            raise RuntimeError(
                f"token accounting ({split}): wrote {w['tokens']} tokens / {w['eos']} EOS, expected "
                f"{expected} / {t['documents'] - dropped.eos} (a bug: please report it)"
            )
        concat_rows = math.ceil((t["doc_tokens"] + t["documents"]) / L)
        entry = SplitEntry(
            rows=w["rows"],
            tokens=w["tokens"],
            documents=t["documents"],
            doc_tokens=t["doc_tokens"],
            eos_tokens=w["eos"],
            padding_tokens=w["padding"],
            segments=w["segments"],
            dropped=dropped,
            packing={
                "truncated_docs": st.truncated_docs,
                "split_docs": st.split_docs,
                "hard_cuts": st.hard_cuts,
                "concat_rows": concat_rows,
                "rows_vs_concat": round(w["rows"] / concat_rows, 4) if concat_rows else None,
                "padding_fraction": round(w["padding"] / (w["rows"] * L), 6) if w["rows"] else 0.0,
            },
            files=[FileEntry.from_json(e) for e in entries if e["split"] == split],
        )
        if split == "train" and self.params.equal_shards:
            entry.equal_files = {"files": len(plan.sizes) - plan.remainder, "rows": plan.sizes[0]}
        for name, value in (
            ("rows", w["rows"]),
            ("tokens_written", w["tokens"]),
            ("eos_written", w["eos"]),
            ("padding_tokens", w["padding"]),
            ("tail_tokens_dropped", st.tail_dropped),
            ("truncated_tokens", st.truncated_tokens),
            ("truncated_docs", st.truncated_docs),
            ("split_docs", st.split_docs),
            ("concat_rows", concat_rows),
        ):
            ctx.stats.count(f"{name}.{split}", value)
        return entry


def _roundtrip_report(examples_dir: str | None, task_ids: list[str]) -> dict[str, Any]:
    examples: list[dict[str, Any]] = []
    if examples_dir:
        for t in task_ids:
            path = Path(examples_dir) / f"{t}.roundtrip.json"
            if path.exists() and len(examples) < 10:
                examples += json.loads(path.read_text())[: 10 - len(examples)]
    return {"examples": examples, "note": "counts: stats.json, stage tokenize, counters roundtrip_*"}
