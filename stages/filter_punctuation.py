"""Punctuation filter: long stretches of text without any sentence punctuation.

Score ``max_unpunctuated``: the longest stretch of characters (whitespace not counted) between two
sentence or clause marks (。！？；，、：… and .!?;,:). With ``newline_breaks`` a line break ends a
stretch too (for corpora whose lines are sentences without marks, e.g. lists of titles).
Drop ``no_punctuation`` when it exceeds ``max_chars`` (Chinese documents: Han characters are at
least ``chinese_at`` of the non-space characters) or ``max_chars_other`` (other documents:
e-mail and English prose have lists, signatures and code without marks, and a Latin word is
several characters): keyword lists, SEO spam, concatenated menus and name lists, dumps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from dataprep.document import Document
from dataprep.stage import param, register
from stages._chars import HAN, SENTENCE_PUNCT
from stages._filter_base import RUN_EDGES, CleaningFilter

PUNCT_SPLIT = re.compile(f"[{re.escape(SENTENCE_PUNCT)}]")
PUNCT_OR_NEWLINE_SPLIT = re.compile(f"[{re.escape(SENTENCE_PUNCT)}\\n]")
SPACES = re.compile(r"\s+")
HAN_RUN = re.compile(f"[{HAN}]+")


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
    max_chars: int = param(300, help="Chinese documents: longer stretch without punctuation -> drop")
    max_chars_other: int = param(600, help="other documents: longer stretch without punctuation -> drop")
    chinese_at: float = param(0.3, help="share of Han among non-space characters for a Chinese document")
    newline_breaks: bool = param(False, help="a line break also ends a stretch")
    keep_scores: bool = param(False, help="store the scores in doc.meta['scores']")

    def validate(self) -> None:
        if self.max_chars < 1 or self.max_chars_other < 1:
            raise ValueError("max_chars and max_chars_other must be positive")


@register
class FilterPunctuation(CleaningFilter):
    """Drop documents with a long stretch that has no sentence punctuation."""

    name = "filter_punctuation"
    Params = PunctuationParams
    score_edges: ClassVar[dict[str, list[float]]] = {"max_unpunctuated": RUN_EDGES}

    def score(self, doc: Document) -> dict[str, float]:
        text = doc.text
        han = 0.0
        if not text.isascii():
            nonspace = len(text) - sum(map(len, SPACES.findall(text)))
            han = sum(map(len, HAN_RUN.findall(text))) / nonspace if nonspace else 0.0
        return {"max_unpunctuated": max_unpunctuated(text, self.params.newline_breaks), "han_share": han}

    def decide(self, scores: dict[str, float]) -> tuple[str, float, str] | None:
        p: PunctuationParams = self.params
        run = scores["max_unpunctuated"]
        limit = p.max_chars if scores["han_share"] >= p.chinese_at else p.max_chars_other
        if run > limit:
            return "no_punctuation", run, f"{run:.0f} chars without punctuation > {limit}"
        return None
