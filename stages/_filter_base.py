"""Helpers shared by the quality filters (no stage here)."""

from __future__ import annotations

from typing import Any

import numpy as np

from dataprep.document import Document, Drop
from dataprep.stage import ScoredFilter, StageContext, StageResult

SHARE_EDGES: list[float] = [round(i / 20, 2) for i in range(21)]  # 0, 0.05, ..., 1
RUN_EDGES: list[float] = [0, 10, 20, 50, 100, 150, 200, 300, 500, 1000, 2000, 5000, 10000, 50000]

Columns = dict[str, np.ndarray]


class CleaningFilter(ScoredFilter):
    """A ScoredFilter whose ``keep_scores`` comes from its params (``keep_scores`` field).

    Scores are computed for a whole batch at once by ``score_columns``: one array per score name,
    in the key order of a document's scores dict, int64 for integer scores and float64 for the
    others (so that ``.tolist()`` gives the very ints and floats of the dict). ``may_drop`` marks
    the documents ``decide`` could drop (a superset: an exact vectorised copy of its tests);
    ``decide`` runs on those only, every other document is kept as it is. Scores dicts are built
    only when they are kept (``keep_scores``) or decided on.
    """

    def __init__(self, params: Any):
        super().__init__(params)
        self.keep_scores = bool(getattr(params, "keep_scores", False))  # type: ignore[misc]

    def score_columns(self, batch: list[Document]) -> Columns:
        """Every score of every document of ``batch``, one array per score name."""
        raise NotImplementedError

    def may_drop(self, cols: Columns) -> np.ndarray:
        """bool per document: ``decide`` may drop it (default: every document)."""
        return np.ones(len(next(iter(cols.values()))), dtype=bool)

    def score(self, doc: Document) -> dict[str, float]:
        return self.score_batch([doc])[0]

    def score_batch(self, batch: list[Document]) -> list[dict[str, float]]:
        return rows(self.score_columns(batch)) if batch else []

    def process(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        """As ``ScoredFilter.process`` (same histograms, scores, verdicts), one pass per batch."""
        if not batch:
            return []
        cols = self.score_columns(batch)
        for key, edges in self.score_edges.items():
            if key in cols:
                ctx.stats.histogram(key, edges).add(cols[key])
        all_rows = rows(cols) if self.keep_scores else None
        if all_rows is not None:
            for doc, scores in zip(batch, all_rows, strict=True):
                doc.meta.setdefault("scores", {})[self.name] = scores
        out: list[StageResult] = list(batch)
        for i in np.flatnonzero(self.may_drop(cols)).tolist():
            scores = all_rows[i] if all_rows is not None else {k: v[i].item() for k, v in cols.items()}
            verdict = self.decide(scores)
            if verdict is not None:
                detail = verdict[2] if len(verdict) > 2 else ""  # type: ignore[misc]
                out[i] = Drop(batch[i], verdict[0], score=verdict[1], detail=detail)
        return out


def rows(cols: Columns) -> list[dict[str, float]]:
    """The scores dict of every document from score columns (Python ints and floats)."""
    keys = list(cols)
    values = zip(*(cols[k].tolist() for k in keys), strict=True)
    return [dict(zip(keys, row, strict=True)) for row in values]


def share(part: int, whole: int) -> float:
    """part / whole, 0 for an empty whole."""
    return part / whole if whole else 0.0


def shares(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """part / whole per element as float64, 0 where whole is 0 (the same floats as ``share``)."""
    out = np.zeros(len(part), dtype=np.float64)
    np.divide(part, whole, out=out, where=whole != 0)
    return out
