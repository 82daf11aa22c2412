"""Exact document deduplication on a 128-bit hash of the text (run it after normalize, so a
Traditional copy of a Simplified text is an exact duplicate once converted).

compute: hash every document (xxh3-128 of its UTF-8 text) and spill (hash, row) entries and the
         document ids of the task (see ``_keyspill``).
decide:  over the whole corpus, in key-range partitions of bounded size spread over the run's
         workers (decide jobs; see ``_keyspill``): the first occurrence in corpus order
         (task, then row) survives; every later copy is dropped. Then one call per task writes
         its decision. Memory per worker: ~40 bytes per entry of one partition (at most 8M
         entries) or one task's entries; the driver merges counters only.
apply:   copies are dropped as ``duplicate``; rejected/ records carry ``extra`` = {"cluster": the
         survivor's corpus position, "survivor": its id, "cluster_size": copies of the text}.
stats:   counter ``unique_texts``, histogram ``cluster_size`` (copies per duplicated text).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.decide_jobs import load_shared
from dataprep.document import Document, Drop
from dataprep.stage import DriverContext, GlobalStage, StageContext, StageResult, param, register
from dataprep.stats import Histogram
from stages._decisions import DecisionReplay, write_decision
from stages._keyspill import (
    IdSpill,
    KeySpill,
    PartitionJob,
    StringTable,
    TaskJob,
    decide_in_two_rounds,
    digests_to_keys,
    load_entries,
    lookup_ids,
    partition_count,
    read_partition,
    save_partition_values,
    task_values,
)

CLUSTER_EDGES: list[float] = [2, 3, 4, 5, 6, 8, 11, 16, 32, 64, 128, 256, 1024, 4096]
EXAMPLE_CHARS = 300


@dataclass
class ExactDedupParams:
    examples: int = param(
        5, help="duplicates recorded per task for report.html (which shows up to 20, in task order)"
    )

    def validate(self) -> None:
        if self.examples < 0:
            raise ValueError("examples must be >= 0")


@dataclass(frozen=True)
class _Job:
    """What the decide calls of one run share (sent to workers; paths, no data)."""

    work_dir: str
    task_ids: list[str]
    offsets: list[int]  # first corpus position of each task, plus the total
    partitions: int

    def key_paths(self) -> list[Path]:
        return [self.key_path(t) for t in range(len(self.task_ids))]

    @functools.cached_property
    def offset_array(self) -> np.ndarray:
        """``offsets`` as int64, converted once per process (the job is cached by load_shared)."""
        return np.asarray(self.offsets, dtype=np.int64)

    def key_path(self, t: int) -> Path:
        return Path(self.work_dir) / f"{self.task_ids[t]}.keys.npy"

    def id_path(self, t: int) -> Path:
        return Path(self.work_dir) / f"{self.task_ids[t]}.ids"

    def partition_files(self, p: int) -> list[Path]:
        return [Path(self.work_dir) / f"part{p:04d}.{name}.npy" for name in ("survivor", "size")]


@dataclass(frozen=True)
class GroupResult:
    unique_texts: int  # distinct texts in the partition
    cluster_size: dict[str, Any]  # Histogram.to_json() of the texts with copies


def group_partition(partition: PartitionJob) -> GroupResult:
    """Decide round 1, one key-range partition: for every entry, the corpus position of its
    text's first occurrence (-1 for that occurrence itself) and the number of copies."""
    job, p = load_shared(partition.shared, _Job), partition.partition
    part = read_partition(job.key_paths(), p, job.partitions)
    order, starts = part.group_order()
    surv_values = np.zeros(0, dtype=np.int64)
    size_values = np.zeros(0, dtype=np.int32)
    hist = Histogram(CLUSTER_EDGES)
    if len(order):
        group = np.cumsum(starts) - 1
        first = np.flatnonzero(starts)
        group_size = np.diff(np.append(first, len(order)))
        position = np.asarray(job.offsets, dtype=np.int64)[part.task[order]] + part.row[order]
        surv = position[first][group]
        surv[starts] = -1
        surv_values = np.empty(len(order), dtype=np.int64)
        surv_values[order] = surv
        size_values = np.empty(len(order), dtype=np.int32)
        size_values[order] = group_size[group]
        hist.add(group_size[group_size > 1])
    survivor_path, size_path = job.partition_files(p)
    save_partition_values(survivor_path, part, surv_values)
    save_partition_values(size_path, part, size_values)
    return GroupResult(int(np.count_nonzero(starts)), hist.to_json())


@dataclass(frozen=True)
class _IdPaths:
    """The id table path of a task by index, without building the list of all of them."""

    job: _Job

    def __getitem__(self, t: int) -> Path:
        return self.job.id_path(t)


def write_task_decision(task: TaskJob) -> None:
    """Decide round 2, one task: its copies (rows), their survivors' positions and ids, and the
    copy counts, as ``<task>.decision.json``."""
    job, t = load_shared(task.shared, _Job), task.task
    work = Path(job.work_dir)
    files = [job.partition_files(p) for p in range(job.partitions)]
    surv = task_values([f[0] for f in files], t)
    size = task_values([f[1] for f in files], t)
    entries = load_entries(job.key_path(t))
    rows = np.asarray(entries["row"]) if len(entries) else np.zeros(0, dtype=np.int64)
    dup = np.flatnonzero(surv >= 0)
    dup = dup[np.argsort(rows[dup], kind="stable")]
    offsets = job.offset_array
    names = lookup_ids(_IdPaths(job), offsets, surv[dup])  # no list of every task's path
    write_decision(
        work / f"{job.task_ids[t]}.decision.json",
        rows[dup].astype(np.int64).tolist(),
        surv[dup].tolist(),
        [names[int(s)] for s in surv[dup]],
        size[dup].tolist(),
    )


@register
class ExactDedup(GlobalStage):
    """Drop documents whose text is byte-identical to an earlier document's."""

    name = "exact_dedup"
    Params = ExactDedupParams

    def __init__(self, params: ExactDedupParams):
        super().__init__(params)
        self._spill: KeySpill | None = None
        self._ids: IdSpill | None = None
        self._rows = 0
        self._replay: DecisionReplay | None = None

    def drop_hint(self, reason: str, label: str) -> str | None:
        return None  # one copy of each text is kept: nothing to loosen

    def begin_task(self, ctx: StageContext) -> None:
        self._spill, self._ids, self._rows = KeySpill(), IdSpill(), 0
        self._replay = None

    def compute(self, batch: list[Document], ctx: StageContext) -> None:
        import xxhash

        assert self._spill is not None and self._ids is not None
        hi, lo = digests_to_keys([xxhash.xxh3_128_digest(d.text.encode("utf-8")) for d in batch])
        self._spill.add(hi, lo, np.arange(self._rows, self._rows + len(batch)))
        self._ids.ids += [d.id for d in batch]
        self._rows += len(batch)

    def finish_compute(self, ctx: StageContext) -> None:
        assert self._spill is not None and self._ids is not None
        self._ids.close(ctx.work_dir / f"{ctx.task_id}.ids")
        self._spill.close(ctx.work_dir / f"{ctx.task_id}.keys.npy")
        self._spill = self._ids = None

    def decide(self, ctx: DriverContext) -> dict:
        key_paths = [ctx.work_dir / f"{t}.keys.npy" for t in ctx.task_ids]
        counts = [len(load_entries(p)) for p in key_paths]
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        count = partition_count(int(offsets[-1]), workers=ctx.workers)
        job = _Job(str(ctx.work_dir), list(ctx.task_ids), offsets.tolist(), count)
        grouped = f"{int(offsets[-1]):,} hashes"
        results = decide_in_two_rounds(
            ctx, "exact_dedup", job, count, group_partition, write_task_decision, grouped
        )
        hist = ctx.stats.histogram("cluster_size", CLUSTER_EDGES)
        for r in results:
            hist.merge(Histogram.from_json(r.cluster_size))
            ctx.stats.count("unique_texts", r.unique_texts)
        for p in range(count):
            for path in job.partition_files(p):
                path.unlink(missing_ok=True)
                path.with_name(path.name + ".slices.npy").unlink(missing_ok=True)
        return {}

    def apply(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        if self._replay is None:
            self._replay = DecisionReplay(ctx.work_dir / f"{ctx.task_id}.decision.json")
            (ctx.work_dir / f"{ctx.task_id}.keys.npy").unlink(missing_ok=True)  # no longer needed
            StringTable.remove(ctx.work_dir / f"{ctx.task_id}.ids")
        out: list[StageResult] = []
        for doc in batch:
            d = self._replay.next()
            if d is None:
                out.append(doc)
                continue
            extra = {"cluster": d["cluster"], "survivor": d["survivor"], "cluster_size": d["size"]}
            out.append(Drop(doc, "duplicate", detail=f"duplicate of {d['survivor']}", extra=extra))
            if len(ctx.stats.examples) < self.params.examples:
                text = doc.text[:EXAMPLE_CHARS]
                ctx.stats.add_example(
                    f"{d['size']} copies of one text",
                    [
                        {"label": f"kept: {d['survivor']}", "text": text},
                        {"label": f"dropped: {doc.id}", "text": text},
                    ],
                )
        return out
