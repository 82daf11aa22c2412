"""Punctuation filter: long stretches of prose without any sentence punctuation.

Score ``max_unpunctuated``: the longest stretch of prose characters (whitespace not counted)
between two sentence or clause marks (。！？；，、：… and .!?;,:). Code, command listings, tables
and their rules, URLs, Markdown link targets and inline code (``stages._layout``) are not prose:
they count for nothing. A line of code or of a table and a link target also end a stretch, so a
listing, a table or a list of links is never a run of unpunctuated prose, while a sentence goes
on through its URLs and inline code (backticks hide no garbage). With ``newline_breaks`` a line
break ends a stretch too (for corpora whose lines are sentences without marks, e.g. lists of
titles).
Drop ``no_punctuation`` when it exceeds ``max_chars`` (Chinese documents: Han characters are at
least ``chinese_at`` of the non-space characters) or ``max_chars_other`` (other documents:
e-mail and English prose have lists, signatures and code without marks, and a Latin word is
several characters): keyword lists, SEO spam, concatenated menus and name lists, dumps.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import numpy as np

from dataprep.document import Document
from dataprep.stage import param, register
from stages._charclass import HAN_CLASSES, SPACE, batch_chars, sentence_punct_table
from stages._filter_base import RUN_EDGES, CleaningFilter, Columns, rows, shares
from stages._layout import layout, prose_counts


def punctuation_columns(texts: list[str], newline_breaks: bool = False) -> Columns:
    """max_unpunctuated (non-space prose characters of the longest stretch without sentence
    punctuation) and han_share (Han / non-space prose characters) of each text, vectorised over
    the batch."""
    bc = batch_chars(texts)
    cps, starts, cls = bc.cps, bc.starts, bc.cls
    nonspace = cls != SPACE
    breaks = _breaks()[cps]
    if newline_breaks:
        breaks |= cps == 10
    lay = layout(bc)
    hidden = lay.not_sentence_chars
    if len(hidden):
        nonspace[hidden] = False
        # code and table lines and link targets end a stretch; a URL or inline code is part of its
        # sentence (not counted, and its own dots and colons are no sentence marks)
        breaks[hidden] = False
        breaks[lay.nonprose] = True
    breaks[starts[1:] - 1] = True  # the "\n" after each text ends its last stretch
    cum = np.concatenate([[0], np.cumsum(nonspace)])
    pos = np.flatnonzero(breaks)
    prev = np.concatenate([[-1], pos[:-1]])
    seg = cum[pos] - cum[prev + 1]
    doc = bc.doc[pos]
    first = np.flatnonzero(np.concatenate([[True], doc[1:] != doc[:-1]]))
    longest = np.maximum.reduceat(seg, first)
    counts = prose_counts(bc)  # (shared with the other filters)
    doc_nonspace = counts.sum(axis=1) - counts[:, SPACE]
    doc_han = counts[:, list(HAN_CLASSES)].sum(axis=1)
    return {
        "max_unpunctuated": longest.astype(np.int64),
        "han_share": shares(doc_han, doc_nonspace),
    }


@lru_cache(maxsize=1)
def _breaks() -> np.ndarray:
    """bool per code point U+0000-U+10FFFF: sentence punctuation (SENTENCE_PUNCT)."""
    table = np.zeros(0x110000, dtype=bool)
    table[:0x10000] = sentence_punct_table()
    return table


def punctuation_batch_scores(texts: list[str], newline_breaks: bool = False) -> list[dict[str, float]]:
    """max_unpunctuated and han_share of each text (see ``punctuation_columns``)."""
    return rows(punctuation_columns(texts, newline_breaks)) if texts else []


def max_unpunctuated(text: str, newline_breaks: bool = False) -> int:
    """Length in non-space characters of the longest stretch without sentence punctuation."""
    return int(punctuation_batch_scores([text], newline_breaks)[0]["max_unpunctuated"])


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

    def score_columns(self, batch: list[Document]) -> Columns:
        return punctuation_columns([d.text for d in batch], self.params.newline_breaks)

    def may_drop(self, cols: Columns) -> np.ndarray:
        p: PunctuationParams = self.params
        run = cols["max_unpunctuated"]
        limit = np.where(cols["han_share"] >= p.chinese_at, p.max_chars, p.max_chars_other)
        return run > limit

    def decide(self, scores: dict[str, float]) -> tuple[str, float, str] | None:
        p: PunctuationParams = self.params
        run = scores["max_unpunctuated"]
        limit = p.max_chars if scores["han_share"] >= p.chinese_at else p.max_chars_other
        if run > limit:
            return "no_punctuation", run, f"{run:.0f} chars without punctuation > {limit}"
        return None
