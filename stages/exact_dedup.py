"""Exact document deduplication on a 128-bit hash of the text (run it after normalize, so a
Traditional copy of a Simplified text is an exact duplicate once converted).

compute: hash every document (xxh3-128 of its UTF-8 text) and spill (hash, row) entries and the
         document ids of the task (see ``_keyspill``).
decide:  over the whole corpus, in key-range partitions of bounded size: the first occurrence in
         corpus order (task, then row) survives; every later copy is dropped. Memory: ~40 bytes
         per entry of one partition (at most 8M entries), plus the ids of the survivors.
apply:   copies are dropped as ``duplicate``; rejected/ records carry ``extra`` = {"cluster": the
         survivor's corpus position, "survivor": its id, "cluster_size": copies of the text}.
stats:   counter ``unique_texts``, histogram ``cluster_size`` (copies per duplicated text).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from dataprep.document import Document, Drop
from dataprep.io import write_text_atomic
from dataprep.stage import DriverContext, GlobalStage, StageContext, StageResult, param, register
from stages._keyspill import EntryResults, IdSpill, KeySpill, digests_to_keys, lookup_ids, partitions

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
        self._decision: dict[str, Any] | None = None

    def begin_task(self, ctx: StageContext) -> None:
        self._spill, self._ids, self._rows = KeySpill(), IdSpill(), 0
        self._decision = None
        self._position = self._next = 0

    def compute(self, batch: list[Document], ctx: StageContext) -> None:
        import xxhash

        assert self._spill is not None and self._ids is not None
        hi, lo = digests_to_keys([xxhash.xxh3_128_digest(d.text.encode("utf-8")) for d in batch])
        self._spill.add(hi, lo, np.arange(self._rows, self._rows + len(batch)))
        self._ids.ids += [d.id for d in batch]
        self._rows += len(batch)

    def finish_compute(self, ctx: StageContext) -> None:
        assert self._spill is not None and self._ids is not None
        self._ids.close(ctx.work_dir / f"{ctx.task_id}.ids.parquet")
        self._spill.close(ctx.work_dir / f"{ctx.task_id}.keys.npy")
        self._spill = self._ids = None

    def decide(self, ctx: DriverContext) -> dict:
        from dataprep.progress import phase_bar

        key_paths = [ctx.work_dir / f"{t}.keys.npy" for t in ctx.task_ids]
        entries = [np.load(p, mmap_mode="r") for p in key_paths]
        counts = [len(e) for e in entries]
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        survivor_paths = [ctx.work_dir / f"{t}.survivor.npy" for t in ctx.task_ids]
        size_paths = [ctx.work_dir / f"{t}.size.npy" for t in ctx.task_ids]
        survivors = EntryResults(survivor_paths, counts, "<i8", fill=-1)
        sizes = EntryResults(size_paths, counts, "<i4", fill=1)
        hist = ctx.stats.histogram("cluster_size", CLUSTER_EDGES)
        unique = 0
        bar = phase_bar(
            "exact_dedup: grouping hashes", int(offsets[-1]), "doc", unit_scale=True, quiet=ctx.quiet
        )
        for part in partitions(key_paths):
            bar.update(len(part.hi))
            order, starts = part.group_order()
            if not len(order):
                continue
            group = np.cumsum(starts) - 1
            first = np.flatnonzero(starts)
            group_size = np.diff(np.append(first, len(order)))
            position = offsets[part.task[order]] + part.row[order]
            surv = position[first][group]
            surv[starts] = -1
            values = np.empty(len(order), dtype=np.int64)
            values[order] = surv
            survivors.write(part, values)
            size_values = np.empty(len(order), dtype=np.int32)
            size_values[order] = group_size[group]
            sizes.write(part, size_values)
            unique += len(first)
            hist.add(group_size[group_size > 1])
        bar.close()
        survivors.close()
        sizes.close()
        needed = [s[s >= 0] for s in (np.load(p) for p in survivor_paths)]
        names = lookup_ids(
            [ctx.work_dir / f"{t}.ids.parquet" for t in ctx.task_ids],
            offsets,
            np.concatenate(needed) if needed else np.zeros(0, np.int64),
        )
        bar = phase_bar("exact_dedup: writing decisions", len(ctx.task_ids), "task", quiet=ctx.quiet)
        for t, path, spath, zpath in zip(ctx.task_ids, key_paths, survivor_paths, size_paths, strict=True):
            bar.update(1)
            rows = np.load(path, mmap_mode="r")["row"] if path.stat().st_size > 128 else np.zeros(0)
            surv, size = np.load(spath), np.load(zpath)
            dup = np.flatnonzero(surv >= 0)
            order = np.argsort(np.asarray(rows)[dup], kind="stable")
            dup = dup[order]
            decision = {
                "drop": np.asarray(rows)[dup].astype(np.int64).tolist(),
                "cluster": surv[dup].tolist(),
                "survivor": [names[int(s)] for s in surv[dup]],
                "size": size[dup].tolist(),
            }
            write_text_atomic(ctx.work_dir / f"{t}.decision.json", json.dumps(decision, ensure_ascii=False))
        bar.close()
        ctx.stats.count("unique_texts", unique)
        return {}

    def apply(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        if self._decision is None:
            self._decision = json.loads((ctx.work_dir / f"{ctx.task_id}.decision.json").read_text())
            self._position = self._next = 0
            for suffix in (".keys.npy", ".ids.parquet", ".survivor.npy", ".size.npy"):  # no longer needed
                (ctx.work_dir / f"{ctx.task_id}{suffix}").unlink(missing_ok=True)
        d = self._decision
        drops = d["drop"]
        out: list[StageResult] = []
        for doc in batch:
            k = self._next
            if k < len(drops) and drops[k] == self._position:
                extra = {
                    "cluster": d["cluster"][k],
                    "survivor": d["survivor"][k],
                    "cluster_size": d["size"][k],
                }
                out.append(Drop(doc, "duplicate", detail=f"duplicate of {d['survivor'][k]}", extra=extra))
                if len(ctx.stats.examples) < self.params.examples:
                    text = doc.text[:EXAMPLE_CHARS]
                    ctx.stats.add_example(
                        f"{d['size'][k]} copies of one text",
                        [
                            {"label": f"kept: {d['survivor'][k]}", "text": text},
                            {"label": f"dropped: {doc.id}", "text": text},
                        ],
                    )
                self._next += 1
            else:
                out.append(doc)
            self._position += 1
        return out
