"""Repetition filter (after Gopher, Rae et al. 2021), with Chinese measured on characters.

Measured on prose only (``stages._layout``): lines of code, command listings and tables (their
rules above all) are neither lines nor units here, and Markdown link targets and inline code
hold no units, so a manual's table rules, repeated commands and option names are not repetition
(a URL's words are units: a page repeating one URL is repetition).

Units: every Han, kana or hangul character is one unit; a run of other letters and digits (a
Latin word, a number) is one unit. Characters of a unit: its length.

Scores (all shares in [0, 1]):
- ``dup_line_share`` / ``dup_line_char_share``: prose lines (of at least ``min_line_chars``
  characters) that repeat an earlier line of the document, by count and by characters. Shorter
  lines are ignored: a ci poem repeats 长相思。 by design.
- ``dup_para_share`` / ``dup_para_char_share``: the same for paragraphs (separated by a blank line).
- ``top_2gram``, ``top_3gram``, ``top_4gram``: characters covered by the most frequent unit
  n-gram (counted at every occurrence, only when it occurs at least twice) / characters of all
  units. For Chinese these are character n-grams.
- ``dup_10gram``: characters of units covered by any unit 10-gram that occurs more than once.
The n-gram scores are computed for documents of at least ``min_units`` units (0 below).
All documents of a batch are scored together with numpy (one sort per n-gram size:
``_repeated_ngrams``); so are the line and paragraph shares (lines and paragraphs as ranges of
code points, grouped by hash and compared code point by code point, so equal means equal:
``_repeated_lines``).
``han_units``: share of units that are Han characters. From ``chinese_at`` on a document is
measured against the ``*_zh`` n-gram limits: a character 2-gram is about one Chinese word, so
Gopher's word limits (0.20/0.18/0.16) would drop real prose ("和平进程" four times in one sentence)
and classical poetry with refrains (诗经).

Drops: ``repeated_lines``, ``repeated_paragraphs``, ``repeated_ngrams`` (top or dup n-grams).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from dataprep.document import Document
from dataprep.stage import param, register
from stages._charclass import batch_chars
from stages._filter_base import SHARE_EDGES, CleaningFilter, Columns
from stages._repeated_lines import LINE_KEYS, line_share_columns
from stages._repeated_ngrams import DUP_N, ngram_columns


@dataclass
class RepetitionParams:
    max_dup_line_share: float = param(0.3, help="share of repeated lines above this -> repeated_lines")
    max_dup_line_char_share: float = param(0.25, help="characters in repeated lines -> repeated_lines")
    max_dup_para_share: float = param(0.3, help="share of repeated paragraphs -> repeated_paragraphs")
    max_dup_para_char_share: float = param(0.2, help="characters in repeated paragraphs")
    max_top_2gram: float = param(0.2, help="coverage of the most frequent 2-gram -> repeated_ngrams")
    max_top_3gram: float = param(0.18, help="coverage of the most frequent 3-gram -> repeated_ngrams")
    max_top_4gram: float = param(0.16, help="coverage of the most frequent 4-gram -> repeated_ngrams")
    max_dup_10gram: float = param(0.5, help="coverage of repeated 10-grams -> repeated_ngrams")
    chinese_at: float = param(0.5, help="documents with this share of Han units use the *_zh limits")
    max_top_2gram_zh: float = param(0.4, help="Chinese documents: top character 2-gram coverage")
    max_top_3gram_zh: float = param(0.4, help="Chinese documents: top character 3-gram coverage")
    max_top_4gram_zh: float = param(0.4, help="Chinese documents: top character 4-gram coverage")
    max_dup_10gram_zh: float = param(0.7, help="Chinese documents: repeated character 10-grams")
    min_units: int = param(50, help="n-gram scores only for documents of at least this many units")
    min_lines: int = param(5, help="line scores only for documents of at least this many lines")
    min_line_chars: int = param(5, help="shorter lines (refrains like 长相思。, '>' quote marks) are ignored")
    keep_scores: bool = param(False, help="store the scores in doc.meta['scores']")


@register
class FilterRepetition(CleaningFilter):
    """Drop documents made of repeated lines, paragraphs or n-grams (Gopher-style)."""

    name = "filter_repetition"
    Params = RepetitionParams
    score_edges: ClassVar[dict[str, list[float]]] = {
        k: SHARE_EDGES
        for k in (
            "dup_line_share",
            "dup_line_char_share",
            "dup_para_share",
            "dup_para_char_share",
            "top_2gram",
            "top_3gram",
            "top_4gram",
            "dup_10gram",
        )
    }

    def score_columns(self, batch: list[Document]) -> Columns:
        p: RepetitionParams = self.params
        texts = [d.text for d in batch]
        cols = ngram_columns(texts, p.min_units)
        bc = batch_chars(texts)
        newlines = np.bincount(bc.doc[bc.cps == 10], minlength=len(texts)) - 1  # not the joining "\n"
        scored = newlines + 1 >= p.min_lines  # cheap bound on non-empty lines
        shares = line_share_columns(bc, p.min_line_chars) if scored.any() else np.zeros((len(texts), 4))
        shares[~scored] = 0.0
        for k, key in enumerate(LINE_KEYS):
            cols[key] = np.ascontiguousarray(shares[:, k])
        return cols

    def may_drop(self, cols: Columns) -> np.ndarray:
        p: RepetitionParams = self.params
        zh = cols["han_units"] >= p.chinese_at
        mask = (
            (cols["dup_line_share"] > p.max_dup_line_share)
            | (cols["dup_line_char_share"] > p.max_dup_line_char_share)
            | (cols["dup_para_share"] > p.max_dup_para_share)
            | (cols["dup_para_char_share"] > p.max_dup_para_char_share)
        )
        for key, limit, limit_zh in (
            ("top_2gram", p.max_top_2gram, p.max_top_2gram_zh),
            ("top_3gram", p.max_top_3gram, p.max_top_3gram_zh),
            ("top_4gram", p.max_top_4gram, p.max_top_4gram_zh),
            (f"dup_{DUP_N}gram", p.max_dup_10gram, p.max_dup_10gram_zh),
        ):
            mask |= cols[key] > np.where(zh, limit_zh, limit)
        return mask

    def decide(self, scores: dict[str, float]) -> tuple[str, float, str] | None:
        p: RepetitionParams = self.params
        zh = scores["han_units"] >= p.chinese_at
        checks = (
            ("repeated_lines", "dup_line_share", p.max_dup_line_share),
            ("repeated_lines", "dup_line_char_share", p.max_dup_line_char_share),
            ("repeated_paragraphs", "dup_para_share", p.max_dup_para_share),
            ("repeated_paragraphs", "dup_para_char_share", p.max_dup_para_char_share),
            ("repeated_ngrams", "top_2gram", p.max_top_2gram_zh if zh else p.max_top_2gram),
            ("repeated_ngrams", "top_3gram", p.max_top_3gram_zh if zh else p.max_top_3gram),
            ("repeated_ngrams", "top_4gram", p.max_top_4gram_zh if zh else p.max_top_4gram),
            ("repeated_ngrams", f"dup_{DUP_N}gram", p.max_dup_10gram_zh if zh else p.max_dup_10gram),
        )
        for reason, key, limit in checks:
            v = scores[key]
            if v > limit:
                return reason, v, f"{key} {v:.3f} > {limit}"
        return None
