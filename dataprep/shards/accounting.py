"""Split accounting: the packers' counts, and each split's manifest entry with its tokens checked.

Per split: tokens written = Σ document tokens + documents (one EOS each) - tail tokens dropped -
truncated tokens; EOS written = documents - EOS dropped. A mismatch is a bug and stops the run
before the manifest is written."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from dataprep.formats.manifest import Dropped, FileEntry, SplitEntry
from dataprep.shards.plan import ShardPlan


@dataclass
class PackStats:
    """What the packers did to a split: ``rows`` made, ``padding`` tokens, ``tail_dropped`` tokens
    and ``eos_dropped`` EOS of a dropped last partial row, ``truncated_tokens`` of
    ``truncated_docs``, ``split_docs`` split over rows with ``hard_cuts`` at no cut point."""

    rows: int = 0
    padding: int = 0
    tail_dropped: int = 0
    eos_dropped: int = 0
    truncated_tokens: int = 0
    truncated_docs: int = 0
    split_docs: int = 0
    hard_cuts: int = 0
    extra: dict[str, int] = field(default_factory=dict)

    def add(self, other: PackStats) -> None:
        """Add another packer's counts (e.g. one task's) to these."""
        for f in dataclasses.fields(self):
            if f.name != "extra":
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        for k, v in other.extra.items():
            self.extra[k] = self.extra.get(k, 0) + v


@dataclass(frozen=True)
class SplitTotals:
    """What the tasks spilled for a split: ``documents`` and their tokens without EOS."""

    documents: int
    doc_tokens: int

    @property
    def stream_tokens(self) -> int:
        """Tokens of the split's stream: every document followed by its EOS."""
        return self.doc_tokens + self.documents


@dataclass(frozen=True)
class SplitWritten:
    """One split as written: ``totals`` its tasks spilled, ``stats`` of its packers, ``counts``
    its files hold (by :data:`dataprep.shards.spool.COUNTS`), the ``plan`` that cut its rows into
    files, and the files' manifest entries."""

    split: str
    totals: SplitTotals
    stats: PackStats
    counts: dict[str, int]
    plan: ShardPlan
    files: list[FileEntry]


def split_entry(done: SplitWritten, row_length: int, stats_counter: Any) -> SplitEntry:
    """The manifest entry of split ``done``, its token accounting checked (rows of ``row_length``
    tokens), its counters counted in ``stats_counter`` (a :class:`dataprep.stats.StageStats`)."""
    L, split = row_length, done.split
    w, t, st = done.counts, done.totals, done.stats
    dropped = Dropped(tail_tokens=st.tail_dropped, truncated_tokens=st.truncated_tokens, eos=st.eos_dropped)
    expected = t.stream_tokens - st.tail_dropped - st.truncated_tokens
    if w["tokens"] != expected or w["eos"] != t.documents - dropped.eos:
        raise RuntimeError(
            f"token accounting ({split}): wrote {w['tokens']} tokens / {w['eos']} EOS, expected "
            f"{expected} / {t.documents - dropped.eos} (a bug: please report it)"
        )
    concat_rows = math.ceil(t.stream_tokens / L)
    entry = SplitEntry(
        rows=w["rows"],
        tokens=w["tokens"],
        documents=t.documents,
        doc_tokens=t.doc_tokens,
        eos_tokens=w["eos"],
        padding_tokens=w["padding"],
        segments=w["segments"],
        dropped=dropped,
        packing={
            "truncated_docs": st.truncated_docs,
            "split_docs": st.split_docs,
            "hard_cuts": st.hard_cuts,
            "concat_rows": concat_rows,
            "rows_vs_concat": round(w["rows"] / concat_rows, 4) if concat_rows else None,
            "padding_fraction": round(w["padding"] / (w["rows"] * L), 6) if w["rows"] else 0.0,
        },
        files=done.files,
    )
    if done.plan.equal:
        plan = done.plan
        entry.equal_files = {"files": len(plan.sizes) - plan.remainder, "rows": plan.sizes[0]}
    for name, value in (
        ("rows", w["rows"]),
        ("tokens_written", w["tokens"]),
        ("eos_written", w["eos"]),
        ("padding_tokens", w["padding"]),
        ("tail_tokens_dropped", st.tail_dropped),
        ("truncated_tokens", st.truncated_tokens),
        ("truncated_docs", st.truncated_docs),
        ("split_docs", st.split_docs),
        ("concat_rows", concat_rows),
    ):
        stats_counter.count(f"{name}.{split}", value)
    return entry
