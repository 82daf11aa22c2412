"""Counters that every stage reports, merged exactly across tasks.

All numbers are integers or fixed-bin histograms, so merging per-task stats in task order gives
the same result whatever the worker count.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

# Character-length bins: 0, 1, 2, 4, ... 2**26 (upper edges, exclusive).
LENGTH_EDGES: list[float] = [0, 1] + [2**k for k in range(1, 27)]


@dataclass
class Histogram:
    """Counts of values in bins ``[edges[i], edges[i+1])``, plus underflow and overflow.

    counts has len(edges) + 1 entries: counts[0] < edges[0], counts[-1] >= edges[-1].
    """

    edges: list[float]
    counts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.edges) + 1)

    def add(self, values: Any) -> None:
        values = np.asarray(values, dtype=np.float64)
        if values.size == 0:
            return
        idx = np.searchsorted(np.asarray(self.edges, dtype=np.float64), values, side="right")
        binned = np.bincount(idx, minlength=len(self.counts))
        self.counts = [a + int(b) for a, b in zip(self.counts, binned, strict=True)]

    def merge(self, other: Histogram) -> None:
        if list(other.edges) != list(self.edges):
            raise ValueError("cannot merge histograms with different bin edges")
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]

    def subtract(self, other: Histogram) -> None:
        """Take away the counts of ``other`` (values that were added and no longer count)."""
        if list(other.edges) != list(self.edges):
            raise ValueError("cannot subtract histograms with different bin edges")
        self.counts = [a - b for a, b in zip(self.counts, other.counts, strict=True)]

    def total(self) -> int:
        return sum(self.counts)

    def to_json(self) -> dict[str, Any]:
        return {"edges": list(self.edges), "counts": list(self.counts)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Histogram:
        return cls(list(d["edges"]), list(d["counts"]))


@dataclass
class StageStats:
    """What one stage did: documents and characters in and out, drops by reason, named event
    counters (e.g. ``pii.email``) and score histograms. Invariant: docs_in = docs_out + Σ drops.

    first_drop: per reason, where its first drop came from (``file:line``, or ``file (id X)``);
    first in task order, as stats merge in task order.

    examples: a few illustrations for report.html (at most MAX_EXAMPLES, kept in merge order, so
    task order), each ``{"title": str, "items": [{"label": str, "text": str}, ...]}``; the report
    shows the items of one example side by side (e.g. the members of a duplicate cluster).
    """

    MAX_EXAMPLES: ClassVar[int] = 20

    docs_in: int = 0
    docs_out: int = 0
    chars_in: int = 0
    chars_out: int = 0
    drops: Counter[str] = field(default_factory=Counter)
    dropped_chars: Counter[str] = field(default_factory=Counter)
    counters: Counter[str] = field(default_factory=Counter)
    histograms: dict[str, Histogram] = field(default_factory=dict)
    examples: list[dict[str, Any]] = field(default_factory=list)
    first_drop: dict[str, str] = field(default_factory=dict)

    def add_example(self, title: str, items: list[dict[str, str]], compare: bool = False) -> None:
        """Record an illustration for the report (ignored once MAX_EXAMPLES are kept). ``compare``:
        the items are versions of one text (e.g. a duplicate cluster, the first one kept); the
        report marks where each differs from the first."""
        if len(self.examples) < self.MAX_EXAMPLES:
            example: dict[str, Any] = {"title": title, "items": items}
            if compare:
                example["compare"] = True
            self.examples.append(example)

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to the named event counter."""
        self.counters[name] += n

    def histogram(self, name: str, edges: list[float]) -> Histogram:
        """The named histogram, created with ``edges`` on first use."""
        h = self.histograms.get(name)
        if h is None:
            h = self.histograms[name] = Histogram(list(edges))
        return h

    def drop(self, reason: str, chars: int, where: str = "") -> None:
        """Count a dropped document of ``chars`` characters; ``where``: where it came from."""
        self.drops[reason] += 1
        self.dropped_chars[reason] += chars
        if where and reason not in self.first_drop:
            self.first_drop[reason] = where

    def merge(self, other: StageStats) -> None:
        self.docs_in += other.docs_in
        self.docs_out += other.docs_out
        self.chars_in += other.chars_in
        self.chars_out += other.chars_out
        self.drops.update(other.drops)
        self.dropped_chars.update(other.dropped_chars)
        self.counters.update(other.counters)
        for name, h in other.histograms.items():
            if name in self.histograms:
                self.histograms[name].merge(h)
            else:
                self.histograms[name] = Histogram(list(h.edges), list(h.counts))
        self.examples += other.examples[: max(self.MAX_EXAMPLES - len(self.examples), 0)]
        for reason, where in other.first_drop.items():
            self.first_drop.setdefault(reason, where)

    def to_json(self) -> dict[str, Any]:
        out = {
            "docs_in": self.docs_in,
            "docs_out": self.docs_out,
            "chars_in": self.chars_in,
            "chars_out": self.chars_out,
            "drops": dict(sorted(self.drops.items())),
            "dropped_chars": dict(sorted(self.dropped_chars.items())),
            "counters": dict(sorted(self.counters.items())),
            "histograms": {k: h.to_json() for k, h in sorted(self.histograms.items())},
        }
        if self.examples:
            out["examples"] = self.examples
        if self.first_drop:
            out["first_drop"] = dict(sorted(self.first_drop.items()))
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StageStats:
        return cls(
            docs_in=d["docs_in"],
            docs_out=d["docs_out"],
            chars_in=d["chars_in"],
            chars_out=d["chars_out"],
            drops=Counter(d["drops"]),
            dropped_chars=Counter(d["dropped_chars"]),
            counters=Counter(d["counters"]),
            histograms={k: Histogram.from_json(h) for k, h in d["histograms"].items()},
            examples=list(d.get("examples", [])),
            first_drop=dict(d.get("first_drop", {})),
        )


class AccountingError(RuntimeError):
    """The document accounting does not add up: a bug, never a data problem."""


def check_accounting(stage_order: list[str], stages: dict[str, StageStats]) -> dict[str, int]:
    """Check docs_in = docs_out + Σ drops per stage and that each stage receives exactly what the
    previous one emitted. Returns {"docs_in", "kept", "dropped"} for the whole chain."""
    problems = []
    previous_out: int | None = None
    for name in stage_order:
        s = stages[name]
        dropped = sum(s.drops.values())
        if s.docs_in != s.docs_out + dropped:
            problems.append(f"{name}: docs_in {s.docs_in} != docs_out {s.docs_out} + dropped {dropped}")
        if previous_out is not None and s.docs_in != previous_out:
            problems.append(
                f"{name}: received {s.docs_in} documents but the previous stage emitted {previous_out}"
            )
        previous_out = s.docs_out
    if problems:
        raise AccountingError("document accounting does not add up:\n  " + "\n  ".join(problems))
    first = stages[stage_order[0]]
    total_dropped = sum(sum(stages[n].drops.values()) for n in stage_order)
    kept = stages[stage_order[-1]].docs_out
    return {"docs_in": first.docs_in, "kept": kept, "dropped": total_dropped}
