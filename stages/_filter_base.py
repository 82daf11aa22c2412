"""Helpers shared by the quality filters (no stage here)."""

from __future__ import annotations

from typing import Any

from dataprep.stage import ScoredFilter

SHARE_EDGES: list[float] = [round(i / 20, 2) for i in range(21)]  # 0, 0.05, ..., 1
RUN_EDGES: list[float] = [0, 10, 20, 50, 100, 150, 200, 300, 500, 1000, 2000, 5000, 10000, 50000]


class CleaningFilter(ScoredFilter):
    """A ScoredFilter whose ``keep_scores`` comes from its params (``keep_scores`` field)."""

    def __init__(self, params: Any):
        super().__init__(params)
        self.keep_scores = bool(getattr(params, "keep_scores", False))  # type: ignore[misc]


def share(part: int, whole: int) -> float:
    """part / whole, 0 for an empty whole."""
    return part / whole if whole else 0.0
