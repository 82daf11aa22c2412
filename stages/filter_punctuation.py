"""Punctuation filter: long stretches of text without any sentence punctuation.

Score ``max_unpunctuated``: the longest stretch of characters (whitespace not counted) between two
sentence or clause marks (。！？；，、：… and .!?;,:). With ``newline_breaks`` a line break ends a
stretch too (for corpora whose lines are sentences without marks, e.g. lists of titles).
Drop ``no_punctuation`` when it exceeds ``max_chars``: keyword lists, SEO spam, concatenated
menus, dumps of identifiers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from dataprep.document import Document
from dataprep.stage import param, register
from stages._chars import SENTENCE_PUNCT
from stages._filter_base import RUN_EDGES, CleaningFilter

PUNCT_SPLIT = re.compile(f"[{re.escape(SENTENCE_PUNCT)}]")
PUNCT_OR_NEWLINE_SPLIT = re.compile(f"[{re.escape(SENTENCE_PUNCT)}\\n]")
SPACES = re.compile(r"\s+")


def max_unpunctuated(text: str, newline_breaks: bool = False) -> int:
    """Length in non-space characters of the longest stretch without sentence punctuation."""
    splitter = PUNCT_OR_NEWLINE_SPLIT if newline_breaks else PUNCT_SPLIT
    longest = max(splitter.split(text), key=len, default="")
    if len(longest) <= 8 or not (" " in longest or "\n" in longest or "\t" in longest):
        return len(longest)
    # spaces do not count; the longest raw piece may shrink below another one, so recheck them
    best = 0
    for piece in splitter.split(text):
        if len(piece) > best:
            best = max(best, len(piece) - sum(map(len, SPACES.findall(piece))))
    return best


@dataclass
class PunctuationParams:
    max_chars: int = param(300, help="longer stretch without sentence punctuation -> no_punctuation")
    newline_breaks: bool = param(False, help="a line break also ends a stretch")
    keep_scores: bool = param(False, help="store the scores in doc.meta['scores']")

    def validate(self) -> None:
        if self.max_chars < 1:
            raise ValueError("max_chars must be positive")


@register
class FilterPunctuation(CleaningFilter):
    """Drop documents with a long stretch that has no sentence punctuation."""

    name = "filter_punctuation"
    Params = PunctuationParams
    score_edges: ClassVar[dict[str, list[float]]] = {"max_unpunctuated": RUN_EDGES}

    def score(self, doc: Document) -> dict[str, float]:
        return {"max_unpunctuated": max_unpunctuated(doc.text, self.params.newline_breaks)}

    def decide(self, scores: dict[str, float]) -> tuple[str, float, str] | None:
        run = scores["max_unpunctuated"]
        if run > self.params.max_chars:
            return "no_punctuation", run, f"{run:.0f} chars without punctuation > {self.params.max_chars}"
        return None
