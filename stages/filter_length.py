"""Length filter: document size in characters and in non-empty lines.

Scores: ``chars`` (characters of the text), ``lines`` (non-empty lines). Drops below/above the
bounds as too_short / too_long / too_few_lines / too_many_lines (0 disables a maximum).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from dataprep.document import Document
from dataprep.stage import param, register
from dataprep.stats import LENGTH_EDGES
from stages._charclass import SPACE, BatchChars, batch_chars, full_class_table
from stages._filter_base import CleaningFilter, Columns


def nonempty_lines(bc: BatchChars) -> np.ndarray:
    """Non-empty lines per text: lines whose first character other than space, tab and U+3000 is
    not whitespace. Vectorised over line starts; the few lines that start with one of those three
    characters are looked at in Python."""
    cps = bc.cps
    line_start = np.flatnonzero(cps == 0x0A) + 1
    line_start = np.concatenate([[0], line_start[:-1]])  # (the last "\n" ends the batch)
    doc = np.searchsorted(bc.starts, line_start, side="right") - 1
    first = cps[line_start]
    lead = (first == 0x20) | (first == 0x09) | (first == 0x3000)
    counted = ~lead & (full_class_table()[first] != SPACE)
    for k in np.flatnonzero(lead).tolist():
        d = int(doc[k])
        text, start = bc.texts[d], int(line_start[k] - bc.starts[d])
        end = text.find("\n", start)
        rest = text[start : end if end >= 0 else len(text)].lstrip(" \t\u3000")
        counted[k] = bool(rest) and not rest[0].isspace()
    return np.bincount(doc[counted], minlength=len(bc.texts))


@dataclass
class LengthParams:
    min_chars: int = param(8, help="fewer characters -> too_short")
    max_chars: int = param(2_000_000, help="more characters -> too_long (0: no maximum)")
    min_lines: int = param(1, help="fewer non-empty lines -> too_few_lines")
    max_lines: int = param(100_000, help="more non-empty lines -> too_many_lines (0: no maximum)")
    keep_scores: bool = param(False, help="store the scores in doc.meta['scores']")

    def validate(self) -> None:
        if self.min_chars < 0 or self.min_lines < 0:
            raise ValueError("minimums must be >= 0")
        if 0 < self.max_chars < self.min_chars or 0 < self.max_lines < self.min_lines:
            raise ValueError("a maximum is below its minimum")


@register
class FilterLength(CleaningFilter):
    """Drop documents outside the character and line bounds."""

    name = "filter_length"
    Params = LengthParams
    score_edges: ClassVar[dict[str, list[float]]] = {"chars": LENGTH_EDGES, "lines": LENGTH_EDGES}

    def score_columns(self, batch: list[Document]) -> Columns:
        bc = batch_chars([d.text for d in batch])
        return {"chars": bc.lengths, "lines": nonempty_lines(bc)}

    def may_drop(self, cols: Columns) -> np.ndarray:
        p: LengthParams = self.params
        chars, lines = cols["chars"], cols["lines"]
        mask = (chars < p.min_chars) | (lines < p.min_lines)
        if p.max_chars:
            mask |= chars > p.max_chars
        if p.max_lines:
            mask |= lines > p.max_lines
        return mask

    def decide(self, scores: dict[str, float]) -> tuple[str, float, str] | None:
        p: LengthParams = self.params
        chars, lines = scores["chars"], scores["lines"]
        if chars < p.min_chars:
            return "too_short", chars, f"{chars:.0f} chars < {p.min_chars}"
        if p.max_chars and chars > p.max_chars:
            return "too_long", chars, f"{chars:.0f} chars > {p.max_chars}"
        if lines < p.min_lines:
            return "too_few_lines", lines, f"{lines:.0f} lines < {p.min_lines}"
        if p.max_lines and lines > p.max_lines:
            return "too_many_lines", lines, f"{lines:.0f} lines > {p.max_lines}"
        return None
