"""Script-mix filter: the share of Chinese among the text, and the share of non-text symbols.

Scores (shares of characters, whitespace never counted):
- ``han_share``: Han characters / word characters (letters and digits of any script, Han
  included). 1.0 for pure Chinese, 0.0 for pure English.
- ``symbol_share``: characters that are neither word characters nor punctuation (emoji, box
  drawing, arithmetic and currency signs, private-use characters, U+FFFD) / non-space characters.

Decisions:
- ``too_many_symbols`` when symbol_share > max_symbol_share (documents of at least
  ``min_chars`` non-space characters).
- ``low_han_share`` (the "非中文字符占比过高" rule) when a document is Chinese but not Chinese
  enough: ``chinese_at`` <= han_share < ``min_han_share``. Documents below ``chinese_at`` are
  treated as non-Chinese (English e-mail with a Chinese name stays). Set ``chinese_at: 0`` for
  a Chinese-only corpus, so that English text is dropped as well.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from dataprep.document import Document
from dataprep.stage import param, register
from stages._charclass import ALNUM, BAD, HAN_CLASSES, SPACE, SYMBOL, batch_chars
from stages._filter_base import SHARE_EDGES, CleaningFilter, Columns, shares


def script_columns(texts: list[str]) -> Columns:
    """han_share, symbol_share and nonspace of each text (see the module docstring), as arrays."""
    counts = batch_chars(texts).counts
    han = counts[:, list(HAN_CLASSES)].sum(axis=1)
    words = han + counts[:, ALNUM]
    nonspace = counts.sum(axis=1) - counts[:, SPACE]
    symbols = counts[:, SYMBOL] + counts[:, BAD]
    return {"han_share": shares(han, words), "symbol_share": shares(symbols, nonspace), "nonspace": nonspace}


@dataclass
class ScriptParams:
    min_han_share: float = param(0.15, help="Chinese documents with a lower Han share -> low_han_share")
    chinese_at: float = param(0.05, help="a document is Chinese from this Han share on (0: all are)")
    max_symbol_share: float = param(0.25, help="higher share of non-text symbols -> too_many_symbols")
    min_chars: int = param(20, help="documents with fewer non-space characters are not judged")
    keep_scores: bool = param(False, help="store the scores in doc.meta['scores']")

    def validate(self) -> None:
        for name in ("min_han_share", "chinese_at", "max_symbol_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be between 0 and 1")


@register
class FilterScript(CleaningFilter):
    """Drop Chinese documents with too little Chinese, and symbol-heavy documents."""

    name = "filter_script"
    Params = ScriptParams
    score_edges: ClassVar[dict[str, list[float]]] = {"han_share": SHARE_EDGES, "symbol_share": SHARE_EDGES}

    def score_columns(self, batch: list[Document]) -> Columns:
        return script_columns([d.text for d in batch])

    def may_drop(self, cols: Columns) -> np.ndarray:
        p: ScriptParams = self.params
        han, sym = cols["han_share"], cols["symbol_share"]
        chinese_low = (p.chinese_at <= han) & (han < p.min_han_share) & ((han > 0) | (p.chinese_at == 0))
        return (cols["nonspace"] >= p.min_chars) & ((sym > p.max_symbol_share) | chinese_low)

    def decide(self, scores: dict[str, float]) -> tuple[str, float, str] | None:
        p: ScriptParams = self.params
        if scores["nonspace"] < p.min_chars:
            return None
        sym = scores["symbol_share"]
        if sym > p.max_symbol_share:
            return "too_many_symbols", sym, f"symbol_share {sym:.3f} > {p.max_symbol_share}"
        han = scores["han_share"]
        if p.chinese_at <= han < p.min_han_share and (han > 0 or p.chinese_at == 0):
            return "low_han_share", han, f"han_share {han:.3f} < {p.min_han_share}"
        return None
