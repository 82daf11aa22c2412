"""A run's shard output, written in one call (:func:`write_shards`): the packed rows of every split
(in the spool, :mod:`dataprep.shards.spool`) shuffled and cut into files by the shard plan
(:mod:`dataprep.shards.plan`), every file written in every row format and every split's kept
documents in every format of documents (:mod:`dataprep.shards.files`), each split's tokens
checked (:mod:`dataprep.shards.accounting`), and the manifest's ``shards`` block returned.

Jobs run on the workers (:class:`dataprep.decide_jobs.DecideJobs`): one per shuffle bucket
(scatter into parts of files), one per shard file (as soon as the buckets holding its rows are
done), one per split and format of documents. Outputs do not depend on the number of workers.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dataprep.decide_jobs import DecideJobs
from dataprep.formats.manifest import FileEntry, ShardsManifest
from dataprep.formats.registry import ShardMeta, get_format
from dataprep.shards.accounting import PackStats, SplitTotals, SplitWritten, split_entry
from dataprep.shards.files import (
    DocumentsJob,
    DocumentSource,
    ShardFileJob,
    write_documents_task,
    write_shard_file,
)
from dataprep.shards.plan import TOKEN_DTYPES, FilesSettings, ShardPlan
from dataprep.shards.spool import COUNTS, Bucket, Buckets, ScatterJob, scatter_bucket

if TYPE_CHECKING:
    from dataprep.stage.context import DriverContext

SPLITS = ("train", "validation")


def check_writers(names: list[str]) -> None:
    """ValueError unless every name is a registered shard format, named once."""
    for name in names:
        get_format(name)
    if len(set(names)) != len(names):
        raise ValueError("a format is named twice")


def writer_warm_ups(names: list[str]) -> list[Callable[[Any], Any]]:
    """The warm-ups of the writers of ``names`` (e.g. MindRecord's MindSpore import)."""
    warm_ups = (get_format(name).writer.warm_up for name in names)
    return [w for w in warm_ups if w is not None]


@dataclass
class SplitRows:
    """A split packed into the spool: the buckets (files in a fixed order), how rows were
    assigned to them, the packers' counts, and the runs of rows by source (``ScatterJob.sources``)
    when rows carry a source id."""

    dir: Path
    buckets: list[Bucket]
    assign: Buckets
    stats: PackStats
    sources: tuple[list[int], list[int]] | None = None

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.buckets)


@dataclass
class SplitInput:
    """One split handed to :func:`write_shards`: what its tasks spilled (``totals``), its packed
    rows, and its documents in stream order for formats of documents."""

    totals: SplitTotals
    rows: SplitRows
    documents: DocumentSource


@dataclass(frozen=True)
class ShardOutput:
    """How a run's shards are written (the packing stage's parameters and tokenizer): rows of
    ``seq_length + 1`` tokens of ``dtype`` ("uint16" / "int32"), made by ``packing``; the formats
    ``writers``; ``shuffle`` seeded by ``seed``; the files per split (``files``); ``sources``:
    the mix's source names when rows carry a source id."""

    seq_length: int
    packing: str
    dtype: str
    vocab_size: int
    eos_id: int
    pad_id: int
    bos_id: int | None
    writers: list[str]
    seed: int
    shuffle: bool = True
    files: FilesSettings = field(default_factory=FilesSettings)
    sources: list[str] | None = None

    @property
    def row_length(self) -> int:
        return self.seq_length + 1

    @property
    def with_loss_mask(self) -> bool:
        return self.packing != "concat"


def bucket_order(
    splits: dict[str, SplitRows], seed: int
) -> Iterator[tuple[str, Bucket, int, list[int] | None]]:
    """(split, bucket, first position of its rows in the split's final order, seed of its
    permutation or None for stream order) for every non-empty bucket, in final order."""
    for split, sp in splits.items():
        start = 0
        for b, bucket in enumerate(sp.buckets):
            if bucket.rows:
                perm_seed = None if sp.assign.key is None else [seed, SPLITS.index(split), 1, b]
                yield split, bucket, start, perm_seed
                start += bucket.rows


def _scatter_and_write(
    ctx: DriverContext,
    scatter_jobs: Iterator[ScatterJob],
    writers: list[str],
    shard_dir: str,
    meta: ShardMeta,
) -> tuple[dict[str, dict[str, int]], list[dict[str, Any]]]:
    """Run the scatter jobs and start each file's job as soon as the buckets holding its rows are
    done. Returns the counts written per split, and the manifest entries (writer by writer, files
    in plan order)."""
    from dataprep.progress import Progress

    plan = {split: p.sizes for split, p in meta.plan.items()}
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


def write_shards(ctx: DriverContext, spec: ShardOutput, splits: dict[str, SplitInput]) -> ShardsManifest:
    """Write the shards of ``splits`` (train first) into ``ctx.output_dir / "shards"`` in every
    format of ``spec.writers`` (``ctx``: the packing stage's :class:`dataprep.stage.DriverContext`),
    remove the spool, check every split's tokens and return the manifest's ``shards`` block."""
    L = spec.row_length
    plans: dict[str, ShardPlan] = {
        split: spec.files.plan(split, inp.rows.rows, L) for split, inp in splits.items()
    }
    meta = ShardMeta(
        row_length=L,
        dtype=spec.dtype,
        vocab_size=spec.vocab_size,
        eos_id=spec.eos_id,
        with_loss_mask=spec.with_loss_mask,
        plan=plans,
        sources=spec.sources,
    )
    shard_dir = ctx.output_dir / "shards"
    shutil.rmtree(shard_dir, ignore_errors=True)  # leftovers of an interrupted earlier decide
    writers = [get_format(w).writer(shard_dir, meta) for w in spec.writers]
    for writer in writers:
        writer.prepare()
    row_writers = [w for w in spec.writers if get_format(w).takes == "rows"]
    documents = [  # formats of whole documents: one job per split, beside the rows' jobs
        DecideJobs(ctx).submit(
            write_documents_task,
            DocumentsJob(
                inp.documents,
                split,
                inp.totals.documents - inp.rows.stats.eos_dropped,
                name,
                str(shard_dir),
                meta,
            ),
        )
        for name in spec.writers
        if get_format(name).takes == "documents"
        for split, inp in splits.items()
    ]
    parts_dir = ctx.work_dir / "shard-parts"
    shutil.rmtree(parts_dir, ignore_errors=True)
    parts_dir.mkdir(parents=True)
    token_dtype = TOKEN_DTYPES[spec.dtype]
    rows = {split: inp.rows for split, inp in splits.items()}
    scatter_jobs = (
        ScatterJob(
            split,
            number,
            bucket,
            L,
            token_dtype,
            spec.eos_id,
            start,
            np.cumsum(plans[split].sizes),
            perm_seed,
            str(parts_dir),
            rows[split].sources,
        )
        for number, (split, bucket, start, perm_seed) in enumerate(bucket_order(rows, spec.seed))
    )
    written, entries = _scatter_and_write(ctx, scatter_jobs, row_writers, str(shard_dir), meta)
    entries += [future.result() for future in documents]
    for sp in rows.values():
        shutil.rmtree(sp.dir, ignore_errors=True)
    shutil.rmtree(parts_dir, ignore_errors=True)
    for writer in writers:
        writer.commit()
    splits_out = {
        split: split_entry(
            SplitWritten(
                split,
                splits[split].totals,
                splits[split].rows.stats,
                counts,
                plans[split],
                [FileEntry.from_json(e) for e in entries if e["split"] == split],
            ),
            L,
            ctx.stats,
        )
        for split, counts in written.items()
    }
    return ShardsManifest(
        seq_length=spec.seq_length,
        row_length=L,
        dtype=spec.dtype,
        packing=spec.packing,
        columns=["input_ids", "actual_seq_len"]
        + (["loss_mask"] if spec.with_loss_mask else [])
        + (["source_id"] if spec.sources else []),
        vocab_size=spec.vocab_size,
        eos_id=spec.eos_id,
        pad_id=spec.pad_id,
        bos_id=spec.bos_id,
        shuffle={
            "enabled": spec.shuffle,
            "seed": spec.seed,
            "buckets": {s: len(sp.buckets) for s, sp in rows.items()},
        },
        formats=list(spec.writers),
        splits=splits_out,
        totals={
            k: sum(getattr(s, k) for s in splits_out.values())
            for k in ("rows", "tokens", "documents", "eos_tokens")
        },
        sources=spec.sources,
    )
