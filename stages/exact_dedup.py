"""Exact document deduplication on a 128-bit hash of the text (run it after normalize).

compute: hash every document (xxh3-128 of its UTF-8 text), per task, in order.
decide:  over the whole corpus, the first occurrence in (task, position) order survives.
apply:   later copies are dropped as ``duplicate``, naming the survivor's id.
Memory in decide: 16 bytes per document plus sort workspace.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from dataprep.document import Document, Drop
from dataprep.stage import DriverContext, GlobalStage, NoParams, StageContext, StageResult, register


@dataclass
class _TaskHashes:
    hashes: list[bytes]
    ids: list[str]


@register
class ExactDedup(GlobalStage):
    """Drop documents whose text is byte-identical to an earlier document's."""

    name = "exact_dedup"
    Params = NoParams

    def __init__(self, params: NoParams):
        super().__init__(params)
        self._task: _TaskHashes | None = None
        self._decision: tuple[np.ndarray, list[str]] | None = None

    def begin_task(self, ctx: StageContext) -> None:
        self._task = None
        self._decision = None

    def compute(self, batch: list[Document], ctx: StageContext) -> None:
        import xxhash

        if self._task is None:
            self._task = _TaskHashes([], [])
        for doc in batch:
            self._task.hashes.append(xxhash.xxh3_128_digest(doc.text.encode("utf-8")))
            self._task.ids.append(doc.id)

    def finish_compute(self, ctx: StageContext) -> None:
        task = self._task or _TaskHashes([], [])
        self._task = None
        digests = np.frombuffer(b"".join(task.hashes), dtype="V16")
        np.save(ctx.work_dir / f"{ctx.task_id}.hashes.npy", digests)
        (ctx.work_dir / f"{ctx.task_id}.ids.json").write_text(json.dumps(task.ids, ensure_ascii=False))

    def decide(self, ctx: DriverContext) -> dict:
        parts = [np.load(ctx.work_dir / f"{t}.hashes.npy") for t in ctx.task_ids]
        counts = [len(p) for p in parts]
        digests = np.concatenate(parts) if parts else np.zeros(0, dtype="V16")
        _, first, inverse = np.unique(digests, return_index=True, return_inverse=True)
        survivor = first[inverse]  # global index of the first copy of each document
        duplicate = survivor != np.arange(len(digests))
        bounds = np.cumsum([0, *counts])
        needed = np.unique(survivor[duplicate])
        names: dict[int, str] = {}
        for k, t in enumerate(ctx.task_ids):
            lo, hi = np.searchsorted(needed, [bounds[k], bounds[k + 1]])
            if hi > lo:
                ids = json.loads((ctx.work_dir / f"{t}.ids.json").read_text())
                names.update({int(i): ids[int(i) - bounds[k]] for i in needed[lo:hi]})
        offset = 0
        for t, n in zip(ctx.task_ids, counts, strict=True):
            rows = np.flatnonzero(duplicate[offset : offset + n])
            decision = {"drop": rows.tolist(), "survivor": [names[int(survivor[offset + r])] for r in rows]}
            (ctx.work_dir / f"{t}.decision.json").write_text(json.dumps(decision, ensure_ascii=False))
            offset += n
        ctx.stats.count("unique_texts", len(first))
        return {}

    def apply(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        if self._decision is None:
            d = json.loads((ctx.work_dir / f"{ctx.task_id}.decision.json").read_text())
            self._decision = (np.asarray(d["drop"], dtype=np.int64), d["survivor"])
            self._position = 0
            self._next = 0
        drops, survivors = self._decision
        out: list[StageResult] = []
        for doc in batch:
            if self._next < len(drops) and drops[self._next] == self._position:
                out.append(Drop(doc, "duplicate", detail=f"duplicate of {survivors[self._next]}"))
                self._next += 1
            else:
                out.append(doc)
            self._position += 1
        return out
