"""Paragraph (or line) deduplication across the corpus: boilerplate removal.

A paragraph found in more than ``max_docs`` documents is boilerplate: it is removed from every
document but the first one (corpus order: task, then row) that contains it. Paragraphs are the
lines of a document (``unit: line``) or its blocks separated by blank lines (``unit: paragraph``);
two paragraphs are equal when they are equal after stripping and collapsing whitespace. Those
shorter than ``min_chars`` (after that) are never touched. A paragraph repeated inside one
document counts once for that document; in the documents it is removed from, every occurrence
goes. A document left without text is dropped as ``duplicate_paragraphs``.

compute: spill (xxh3-128 of the paragraph, row) entries per task (see ``_keyspill``; paragraphs
         and keys as defined in ``_paragraphs``).
decide:  group equal paragraphs over the corpus in key-range partitions (bounded memory), spread
         over the run's workers (decide jobs; see ``_keyspill``), then write, per task
         (one call each), the (paragraph, row) entries to remove. The keys of every boilerplate
         paragraph go to one sorted file, published as the artifact ``boilerplate_paragraphs``
         ({"path", "unit", "min_chars", "count"}): later stages that must see every copy of a
         document alike (minhash_dedup) remove them from all documents, the first included.
apply:   rebuild each affected document without its marked paragraphs.
stats:   counters ``paragraphs`` (distinct per document, long enough), ``repeated_paragraphs``,
         ``boilerplate_paragraphs`` (distinct texts over max_docs), ``paragraphs_removed``,
         ``chars_removed``, ``docs_changed``; histogram ``docs_per_paragraph`` of repeated ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from dataprep.decide_jobs import load_shared
from dataprep.document import Document, Drop
from dataprep.stage import DriverContext, GlobalStage, StageContext, StageResult, param, register
from dataprep.stats import Histogram
from stages import _paragraphs as para
from stages._keyspill import (
    KeySpill,
    PartitionJob,
    TaskJob,
    decide_in_two_rounds,
    load_entries,
    partition_count,
    read_partition,
    save_atomic,
    save_partition_values,
    task_values,
)

DOCS_EDGES: list[float] = [2, 3, 4, 5, 6, 8, 11, 16, 32, 64, 128, 256, 1024, 4096, 16384]
EXAMPLE_CHARS = 300
BOILERPLATE_FILE = "boilerplate.keys.npy"


@dataclass
class ParagraphDedupParams:
    unit: Literal["line", "paragraph"] = param(
        "line", help="line: every line is a paragraph; paragraph: blocks separated by blank lines"
    )
    max_docs: int = param(
        3, help="a paragraph found in more documents than this is removed from all but the first"
    )
    min_chars: int = param(20, help="paragraphs shorter than this (whitespace collapsed) are kept")
    examples: int = param(
        5, help="removals recorded per task for report.html (which shows up to 20, in task order)"
    )

    def validate(self) -> None:
        if self.max_docs < 1:
            raise ValueError("max_docs must be >= 1")
        if self.min_chars < 1:
            raise ValueError("min_chars must be >= 1")


@dataclass(frozen=True)
class _Job:
    """What the decide calls of one run share (sent to workers; paths, no data)."""

    work_dir: str
    task_ids: list[str]
    partitions: int
    max_docs: int

    def key_paths(self) -> list[Path]:
        return [Path(self.work_dir) / f"{t}.keys.npy" for t in self.task_ids]

    def partition_file(self, p: int) -> Path:
        return Path(self.work_dir) / f"part{p:04d}.remove.npy"

    def boilerplate_file(self, p: int) -> Path:
        return Path(self.work_dir) / f"part{p:04d}.boilerplate.npy"


@dataclass(frozen=True)
class MarkResult:
    repeated: int  # paragraphs found in more than one document
    boilerplate: int  # paragraphs found in more than max_docs documents
    removed: int  # (paragraph, document) entries marked for removal
    docs_per_paragraph: dict[str, Any]  # Histogram.to_json() of the repeated paragraphs


def mark_partition(partition: PartitionJob) -> MarkResult:
    """Decide round 1, one key-range partition: marks the (paragraph, document) entries to remove
    (all but the first of a paragraph found in more than max_docs documents) and writes the
    partition's boilerplate keys, sorted."""
    job, p = load_shared(partition.shared, _Job), partition.partition
    part = read_partition(job.key_paths(), p, job.partitions)
    order, starts = part.group_order()
    values = np.zeros(len(order), dtype=np.uint8)
    hist = Histogram(DOCS_EDGES)
    counts = {"repeated": 0, "boilerplate": 0, "removed": 0}
    boilerplate = np.zeros(0, dtype=para.KEY)
    if len(order):
        first = np.flatnonzero(starts)
        size = np.diff(np.append(first, len(order)))
        group = np.cumsum(starts) - 1
        remove_sorted = (size[group] > job.max_docs) & ~starts
        values[order] = remove_sorted
        heads = order[first[size > job.max_docs]]
        boilerplate = np.empty(len(heads), dtype=para.KEY)
        boilerplate["hi"], boilerplate["lo"] = part.hi[heads], part.lo[heads]
        hist.add(size[size > 1])
        counts = {
            "repeated": int(np.count_nonzero(size > 1)),
            "boilerplate": int(np.count_nonzero(size > job.max_docs)),
            "removed": int(np.count_nonzero(remove_sorted)),
        }
    save_partition_values(job.partition_file(p), part, values)
    save_atomic(job.boilerplate_file(p), boilerplate)
    return MarkResult(**counts, docs_per_paragraph=hist.to_json())


def write_task_decision(task: TaskJob) -> None:
    """Decide round 2, one task: the (paragraph, row) entries to remove, ``<task>.decision.npy``."""
    job, t = load_shared(task.shared, _Job), task.task
    marks = task_values([job.partition_file(p) for p in range(job.partitions)], t).astype(bool)
    entries = np.load(job.key_paths()[t])
    save_atomic(Path(job.work_dir) / f"{job.task_ids[t]}.decision.npy", entries[marks])


@register
class ParagraphDedup(GlobalStage):
    """Remove paragraphs (lines) repeated in more than max_docs documents from all but the first."""

    name = "paragraph_dedup"
    Params = ParagraphDedupParams
    provides = ("boilerplate_paragraphs",)

    def __init__(self, params: ParagraphDedupParams):
        super().__init__(params)
        self._spill: KeySpill | None = None
        self._rows = 0
        self._remove: dict[int, set[tuple[int, int]]] | None = None

    def begin_task(self, ctx: StageContext) -> None:
        self._spill, self._rows, self._remove, self._position = KeySpill(), 0, None, 0

    def compute(self, batch: list[Document], ctx: StageContext) -> None:
        """Spill the keys of the batch's paragraphs, with their row (one key computation per batch)."""
        assert self._spill is not None
        if not batch:
            return
        paragraphs: list[str] = []
        counts: list[int] = []
        for doc in batch:
            pieces = para.paragraphs(doc.text, self.params.unit)
            paragraphs += pieces
            counts.append(len(pieces))
        rows = np.repeat(np.arange(self._rows, self._rows + len(batch), dtype=np.int64), counts)
        self._rows += len(batch)
        idx, hi, lo = para.keys(paragraphs, self.params.min_chars)
        self._spill.add(hi, lo, rows[idx])

    def finish_compute(self, ctx: StageContext) -> None:
        assert self._spill is not None
        self._spill.close(ctx.work_dir / f"{ctx.task_id}.keys.npy")
        self._spill = None

    def decide(self, ctx: DriverContext) -> dict:
        key_paths = [ctx.work_dir / f"{t}.keys.npy" for t in ctx.task_ids]
        total = sum(len(load_entries(p)) for p in key_paths)
        count = partition_count(total, workers=ctx.workers)
        job = _Job(str(ctx.work_dir), list(ctx.task_ids), count, self.params.max_docs)
        grouped = f"{total:,} paragraphs"
        results = decide_in_two_rounds(
            ctx, "paragraph_dedup", job, count, mark_partition, write_task_decision, grouped
        )
        hist = ctx.stats.histogram("docs_per_paragraph", DOCS_EDGES)
        repeated = boilerplate = removed = 0
        for r in results:
            hist.merge(Histogram.from_json(r.docs_per_paragraph))
            repeated += r.repeated
            boilerplate += r.boilerplate
            removed += r.removed
        keys = para.BoilerplateSet.write(
            ctx.work_dir / BOILERPLATE_FILE, [job.boilerplate_file(p) for p in range(count)]
        )
        ctx.publish(
            "boilerplate_paragraphs",
            {
                "path": str(ctx.work_dir / BOILERPLATE_FILE),
                "unit": self.params.unit,
                "min_chars": self.params.min_chars,
                "count": keys,
            },
        )
        for p in range(count):
            path = job.partition_file(p)
            path.unlink(missing_ok=True)
            path.with_name(path.name + ".slices.npy").unlink(missing_ok=True)
            job.boilerplate_file(p).unlink(missing_ok=True)
        ctx.stats.count("paragraphs", total)
        ctx.stats.count("repeated_paragraphs", repeated)
        ctx.stats.count("boilerplate_paragraphs", boilerplate)
        ctx.stats.count("occurrences_to_remove", removed)
        return {}

    def _load_removals(self, ctx: StageContext) -> dict[int, set[tuple[int, int]]]:
        chosen = np.load(ctx.work_dir / f"{ctx.task_id}.decision.npy")
        out: dict[int, set[tuple[int, int]]] = {}
        for hi, lo, row in zip(
            chosen["hi"].tolist(), chosen["lo"].tolist(), chosen["row"].tolist(), strict=True
        ):
            out.setdefault(row, set()).add((hi, lo))
        return out

    def apply(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        if self._remove is None:
            self._remove = self._load_removals(ctx)
        out: list[StageResult] = []
        for doc in batch:
            row = self._position
            self._position += 1
            remove = self._remove.get(row)
            if not remove:
                out.append(doc)
                continue
            pieces = para.pieces(doc.text, self.params.unit)
            idx, hi, lo = para.keys(pieces[::2], self.params.min_chars)
            gone = [
                2 * i for i, h, l_ in zip(idx, hi.tolist(), lo.tolist(), strict=True) if (h, l_) in remove
            ]
            text = para.join_kept(pieces, set(gone))
            removed_chars = len(doc.text) - len(text)
            ctx.stats.count("paragraphs_removed", len(gone))
            ctx.stats.count("chars_removed", removed_chars)
            ctx.stats.count("docs_changed")
            if len(ctx.stats.examples) < self.params.examples:
                ctx.stats.add_example(
                    f"{doc.id}: {len(gone)} boilerplate paragraph(s) removed",
                    [
                        {"label": "removed", "text": "\n".join(pieces[j] for j in gone)[:EXAMPLE_CHARS]},
                        {"label": "document after", "text": text[:EXAMPLE_CHARS]},
                    ],
                )
            if not text.strip():
                out.append(
                    Drop(doc, "duplicate_paragraphs", detail="every paragraph is boilerplate found elsewhere")
                )
                continue
            doc.text = text
            out.append(doc)
        return out
