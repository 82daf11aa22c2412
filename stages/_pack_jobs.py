"""The packing stage's driver side: the documents the tasks spilled per split, and the jobs that
pack them into the shuffle spool (:mod:`dataprep.shards.spool`), on the workers.

``concat``: one job per run of consecutive tasks; each task's stream offset is known from the
counts the tasks reported, so a job numbers its rows itself, and the driver joins only the rows
that span jobs. ``pad`` / ``bestfit``: each task packs its documents on its own (one job per
task), then jobs over runs of tasks move the rows into the shuffle buckets under their stream
numbers. Outputs do not depend on the number of workers.

Spill files of a task (``<task>.<split>.*`` in the work directory, written by
``Pack.compute``): ``tokens`` (token ids, ``<u2`` or ``<i4``), ``docs`` (int64 [n, 2]: tokens and
cut points per document), ``cuts`` (int32, optional), ``ids`` (JSON lines of [id, source,
characters]); ``<task>.meta.json`` holds its counts, read by :func:`read_spills`.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.decide_jobs import DecideJobs
from dataprep.formats.rows import DocumentBatch
from dataprep.shards.accounting import PackStats, SplitTotals
from dataprep.shards.output import SPLITS, SplitRows
from dataprep.shards.spool import Bucket, Buckets, RowSpool, iter_records, merge_buckets, split_buckets
from dataprep.stage import DriverContext
from stages._packers import ConcatPacker, DocChunk, Packing

CHUNK_TOKENS = 1 << 22


@dataclass(frozen=True)
class TaskSpill:
    """What one task spilled for a split: ``documents``, ``tokens`` of their stream (one EOS
    each), the spill's token type ``dtype``, the recipe source of its documents (-1: none), and
    the smallest and largest token id spilled (-1: no token)."""

    task_id: str
    tokens: int
    documents: int
    dtype: str = "<i4"
    source: int = -1
    min_id: int = -1
    max_id: int = -1


@dataclass
class SplitSpills:
    """One split's documents as its tasks spilled them into ``work_dir``: the tasks with
    documents, in stream order. Readable in any process (a shard format of whole documents reads
    them: :class:`dataprep.shards.files.DocumentSource`)."""

    work_dir: str
    split: str
    tasks: list[TaskSpill]

    @property
    def max_id(self) -> int:
        """The largest token id spilled (-1: none)."""
        return max((t.max_id for t in self.tasks), default=-1)

    @property
    def totals(self) -> SplitTotals:
        documents = sum(t.documents for t in self.tasks)
        return SplitTotals(documents, sum(t.tokens for t in self.tasks) - documents)

    def batches(self) -> Iterator[DocumentBatch]:
        """The documents (tokens without EOS), in stream order."""
        for t in self.tasks:
            for chunk in task_chunks(Path(self.work_dir), t.task_id, self.split, False, t.dtype):
                yield DocumentBatch(chunk.tokens, chunk.lengths)

    def last(self, count: int) -> list[tuple[str, str, int, np.ndarray]]:
        """(id, source, characters, tokens without EOS) of the last ``count`` documents."""
        return last_documents(
            Path(self.work_dir), [(t.task_id, t.dtype) for t in self.tasks], self.split, count
        )


SPILL_DTYPES = ("<u2", "<i4")
_SPLIT_COUNTS = ("documents", "doc_tokens", "min_id", "max_id")


def read_spills(work_dir: Path, task_ids: list[str]) -> dict[str, SplitSpills]:
    """Every split's spills (train first), from the counts the tasks wrote (``Pack.finish_compute``)
    in ``work_dir / "<task>.meta.json"``, ``task_ids`` in stream order: per split ``documents``,
    ``doc_tokens`` (without EOS), ``min_id`` and ``max_id`` (-1: no token); ``token_dtype`` of the
    token spill and the task's recipe ``source`` (-1: none). RuntimeError naming the file when
    it is missing or holds anything else."""
    spills = [_task_spills(work_dir / f"{task_id}.meta.json", task_id) for task_id in task_ids]
    return {
        split: SplitSpills(str(work_dir), split, [t[split] for t in spills if t[split].documents])
        for split in SPLITS
    }


def _task_spills(path: Path, task_id: str) -> dict[str, TaskSpill]:
    """One task's spill of each split, from its meta.json at ``path`` (see :func:`read_spills`)."""
    try:
        meta = json.loads(path.read_text())
        dtype, source = meta.get("token_dtype", "<i4"), meta.get("source", -1)
        counts = {split: {key: meta[split][key] for key in _SPLIT_COUNTS} for split in SPLITS}
    except (OSError, ValueError, LookupError, TypeError, AttributeError) as e:
        raise RuntimeError(f"pack: {path}: not the counts of a task's spills ({e!r})") from None
    numbers = [source, *(n for c in counts.values() for n in c.values())]
    if dtype not in SPILL_DTYPES or any(type(n) is not int for n in numbers):
        raise RuntimeError(f"pack: {path}: not the counts of a task's spills (a wrong token type or count)")
    spills = {}
    for split, c in counts.items():
        if min(c["documents"], c["doc_tokens"]) < 0 or c["max_id"] < c["min_id"]:
            raise RuntimeError(f"pack: {path}: impossible {split} counts {c}")
        documents, tokens = c["documents"], c["doc_tokens"] + c["documents"]
        spills[split] = TaskSpill(task_id, tokens, documents, dtype, source, c["min_id"], c["max_id"])
    return spills


@dataclass(frozen=True)
class PackSettings:
    """How a split is packed into the spool: ``packing``, rows of ``row_length`` tokens with
    ``eos`` / ``pad`` ids stored as ``token_dtype``; ``shuffle`` (seeded) into buckets of at most
    ``shuffle_buffer_mb``."""

    packing: Packing
    row_length: int
    eos: int
    pad: int
    token_dtype: str
    shuffle: bool
    shuffle_buffer_mb: int


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
    packing: Packing
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
    jobs: DecideJobs, base: PackJob, tasks: list[TaskSpill], assign: Buckets, bar: Any
) -> tuple[list[dict[int, Bucket]], PackStats]:
    """Concat packing, one job per run of consecutive tasks (a few runs per worker: each job
    writes a file per bucket it reaches); the driver joins the rows that span jobs (in stream
    order, as the results come in) and packs the stream's last partial row."""
    L = base.row_length
    offsets = np.concatenate([[0], np.cumsum([t.tokens for t in tasks])])
    ranges = job_ranges([t.tokens for t in tasks], jobs.workers)
    runs = [
        dataclasses.replace(
            base,
            tasks=[(t.task_id, t.dtype) for t in tasks[lo:hi]],
            offset=int(offsets[lo]),
            buckets=assign,
        )
        for lo, hi in ranges
    ]
    packer = ConcatPacker(L, base.eos, base.pad, base.packing.tail)
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
        bar.update(sum(t.documents for t in tasks[lo:hi]), 0)

    jobs.in_order(pack_concat_task, runs, join)
    for batch in packer.finish():
        driver.add(batch, np.arange(pos // L, pos // L + len(batch)))
    return [*shares, driver.close()], packer.stats


def pack_task_alone(job: PackJob) -> dict[str, Any]:
    """pad / bestfit, one task, in any process: its documents packed on their own, rows spooled
    in order under local numbers into one file. Returns ``rows``, the packer's ``stats`` and
    the file (a Bucket, or None without rows)."""
    packer = job.packing.packer(job.row_length, job.eos, job.pad)
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
    tasks: list[TaskSpill],
    buckets: Callable[[int], Buckets],
    bar: Any,
) -> tuple[list[dict[int, Bucket]], PackStats, Buckets, list[int]]:
    """pad / bestfit: every task packed on its own, then its rows moved into the buckets once
    the row counts (hence the stream numbers) of all tasks are known."""
    alone = Path(base.spool_dir) / "tasks"
    alone.mkdir()
    singles = [dataclasses.replace(base, tasks=[(t.task_id, t.dtype)], spool_dir=str(alone)) for t in tasks]
    results: list[dict[str, Any]] = []

    def take(result: dict[str, Any]) -> None:
        results.append(result)
        bar.update(tasks[len(results) - 1].documents, 0)

    jobs.in_order(pack_task_alone, singles, take)
    stats = PackStats()
    for result in results:
        stats.add(result["stats"])
    assign = buckets(stats.rows)
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


def pack_split(
    ctx: DriverContext, split_index: int, spills: SplitSpills, settings: PackSettings
) -> SplitRows:
    """Pack one split into its spool (``ctx``: the stage's :class:`dataprep.stage.DriverContext`),
    with jobs on the workers. ``concat``: a run of tasks' rows start at a token offset known from
    the counts every task reported, so a job numbers its rows itself and the driver joins only the
    rows that span jobs. ``pad`` and ``bestfit``: each task packs its documents on its own
    (bestfit's windows end with the task), then, once every task's row count is known, jobs over
    runs of tasks move the rows into the shuffle buckets under their stream numbers. Each row's
    source (``SplitRows.sources``) is recorded when ``ctx.artifacts`` has ``sources``."""
    from dataprep.progress import Progress

    s = settings
    L = s.row_length
    split, tasks = spills.split, spills.tasks
    buckets = functools.partial(split_buckets, ctx.seed, split_index, s.shuffle, s.shuffle_buffer_mb, L)
    spool_dir = ctx.work_dir / f"spool-{split}"
    shutil.rmtree(spool_dir, ignore_errors=True)
    spool_dir.mkdir(parents=True)
    base = PackJob(spills.work_dir, [], split, 0, L, s.eos, s.pad, str(spool_dir), s.token_dtype, s.packing)
    with Progress(f"pack {split}", total_docs=spills.totals.documents, quiet=ctx.quiet) as bar:
        if s.packing.packing == "concat":
            assign = buckets(math.ceil(sum(t.tokens for t in tasks) / L))
            shares, stats = _pack_concat(DecideJobs(ctx), base, tasks, assign, bar)
            # a row's source: that of its first token (the task holding stream token r * L)
            offsets = np.cumsum([0] + [t.tokens for t in tasks])[:-1]
            row_starts = [-(-int(o) // L) for o in offsets]
        else:
            shares, stats, assign, task_rows = _pack_per_task(DecideJobs(ctx), base, tasks, buckets, bar)
            row_starts = np.cumsum([0, *task_rows])[:-1].tolist()
    sources = None
    if "sources" in ctx.artifacts:
        sources = (row_starts, [t.source for t in tasks])
    return SplitRows(spool_dir, merge_buckets(shares), assign, stats, sources)
