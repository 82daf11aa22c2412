"""Length filter: document size in characters and in non-empty lines.

Scores: ``chars`` (characters of the text), ``lines`` (non-empty lines). Drops below/above the
bounds as too_short / too_long / too_few_lines / too_many_lines (0 disables a maximum).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from dataprep.document import Document
from dataprep.stage import param, register
from dataprep.stats import LENGTH_EDGES
from stages._filter_base import CleaningFilter

NONEMPTY_LINE = re.compile(r"^[ \t\u3000]*\S", re.MULTILINE)


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

    def score(self, doc: Document) -> dict[str, float]:
        text = doc.text
        return {"chars": len(text), "lines": len(NONEMPTY_LINE.findall(text))}

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
