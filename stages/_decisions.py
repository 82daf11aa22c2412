"""Per-task dedup decisions: which rows of a task are dropped, and their cluster.

``decide`` writes one file per task (rows in ascending order); ``apply`` replays it document by
document, in the order ``compute`` saw them, with :class:`DecisionReplay`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dataprep.io import write_text_atomic


def write_decision(
    path: Path,
    rows: list[int],
    clusters: list[int],
    survivors: list[str],
    sizes: list[int],
    scores: list[float] | None = None,
) -> None:
    """rows: task-local positions of dropped documents (ascending); per row its cluster (the
    survivor's corpus position), the survivor's id, the cluster size and optionally a similarity."""
    decision: dict[str, Any] = {"drop": rows, "cluster": clusters, "survivor": survivors, "size": sizes}
    if scores is not None:
        decision["score"] = [round(float(x), 6) for x in scores]
    write_text_atomic(path, json.dumps(decision, ensure_ascii=False))


class DecisionReplay:
    """``next()`` once per document of the task, in order: the drop record of that document
    ({"cluster", "survivor", "size"[, "score"]}) or None when it is kept."""

    def __init__(self, path: Path):
        self._d = json.loads(path.read_text())
        self._position = 0
        self._next = 0

    def next(self) -> dict[str, Any] | None:
        k, drops = self._next, self._d["drop"]
        self._position += 1
        if k >= len(drops) or drops[k] != self._position - 1:
            return None
        self._next += 1
        return {key: values[k] for key, values in self._d.items() if key != "drop"}
