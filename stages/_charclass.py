"""Vectorised character classes for a batch of texts (no stage here).

``encode_batch(texts)`` turns a batch into one array of code points (texts joined by "\\n") with
the offset of each text; ``class_counts`` counts, per text, the characters of each class below
with one table lookup and one bincount, instead of one regex scan per class per document.

Classes (``CLASSES``):
  space        whitespace
  alnum        letters and digits of scripts other than Han (Latin, Greek, Cyrillic, kana, hangul, ...)
  han          Han characters encodable in GB2312 or Big5 (the common ones)
  han_rare     other Han characters (extensions, compatibility, rare GBK characters)
  han_lead     as han, and the first character of UTF-8 text read as GBK (a GBK pair E4-EF + 80-BF)
  han_rare_lead  as han_rare, and such a lead character
  punct        punctuation: ASCII punctuation, general punctuation, CJK and full-width punctuation
  symbol       everything else (emoji, box drawing, arithmetic, currency, ...)
  bad          U+FFFD, private-use characters, lone surrogates
"""

from __future__ import annotations

import contextlib
import unicodedata
from functools import lru_cache

import numpy as np

CLASSES = ("space", "alnum", "han", "han_rare", "han_lead", "han_rare_lead", "punct", "symbol", "bad")
SPACE, ALNUM, HAN, HAN_RARE, HAN_LEAD, HAN_RARE_LEAD, PUNCT, SYMBOL, BAD = range(len(CLASSES))
HAN_CLASSES = (HAN, HAN_RARE, HAN_LEAD, HAN_RARE_LEAD)
HAN_MASK = np.zeros(len(CLASSES), dtype=bool)  # HAN_MASK[cls]: is Han
HAN_MASK[list(HAN_CLASSES)] = True
SENTENCE_PUNCT = "。！？；，、：…!?;,:.\uff0e\uff61\uff64"

_HAN_RANGES = ((0x2E80, 0x2FDF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x3134F))
_PUNCT_RANGES = (
    (0x2010, 0x2027),
    (0x2030, 0x205E),
    (0x3001, 0x303F),
    (0xFE10, 0xFE1F),
    (0xFE30, 0xFE4F),
    (0xFF01, 0xFF0F),
    (0xFF1A, 0xFF20),
    (0xFF3B, 0xFF40),
    (0xFF5B, 0xFF65),
)


def _common_han() -> set[int]:
    common = set()
    for cp in range(0x4E00, 0xA000):
        c = chr(cp)
        for codec in ("gb2312", "big5"):
            try:
                c.encode(codec)
            except UnicodeEncodeError:
                continue
            common.add(cp)
            break
    return common


def _gbk_leads() -> set[int]:
    leads = set()
    for lead in range(0xE4, 0xF0):
        for trail in range(0x80, 0xC0):
            with contextlib.suppress(UnicodeDecodeError):
                leads.add(ord(bytes([lead, trail]).decode("gbk")))
    return leads


@lru_cache(maxsize=1)
def class_table() -> np.ndarray:
    """uint8 class of every BMP code point (built once per process, about 0.1 s)."""
    table = np.full(0x10000, SYMBOL, dtype=np.uint8)
    common, leads = _common_han(), _gbk_leads()
    for cp in range(0x10000):
        c = chr(cp)
        if 0xD800 <= cp <= 0xDFFF or 0xE000 <= cp <= 0xF8FF or cp == 0xFFFD:
            table[cp] = BAD
        elif any(a <= cp <= b for a, b in _HAN_RANGES):
            rare = cp not in common
            lead = cp in leads
            table[cp] = (HAN_RARE_LEAD if lead else HAN_RARE) if rare else (HAN_LEAD if lead else HAN)
        elif c.isspace():
            table[cp] = SPACE
        elif cp < 0x80 and not c.isalnum():
            table[cp] = PUNCT
        elif c.isalnum():
            table[cp] = ALNUM
        elif any(a <= cp <= b for a, b in _PUNCT_RANGES) or unicodedata.category(c).startswith("P"):
            table[cp] = PUNCT
    return table


@lru_cache(maxsize=1)
def sentence_punct_table() -> np.ndarray:
    table = np.zeros(0x10000, dtype=bool)
    table[[ord(c) for c in SENTENCE_PUNCT]] = True
    return table


def encode_batch(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(code points of the texts, each followed by "\\n", as uint32; start offset of each text + total)."""
    joined = "\n".join(texts) + "\n"
    cps = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)
    lengths = np.fromiter((len(t) + 1 for t in texts), dtype=np.int64, count=len(texts))
    starts = np.concatenate([[0], np.cumsum(lengths)])
    return cps, starts


def classify(cps: np.ndarray) -> np.ndarray:
    """Class of every code point (supplementary planes: Han extensions rare, planes 15-16 bad)."""
    table = class_table()
    cls = table[np.minimum(cps, 0xFFFF)]
    high = cps > 0xFFFF
    if high.any():
        hi = cps[high]
        cls[high] = np.where(
            (hi >= 0x20000) & (hi <= 0x3134F), HAN_RARE, np.where(hi >= 0xF0000, BAD, SYMBOL)
        )
    return cls


def doc_index(starts: np.ndarray, n: int) -> np.ndarray:
    """Index of the text each of the ``n`` joined positions belongs to."""
    return np.repeat(np.arange(len(starts) - 1), np.diff(starts))[:n]


def class_counts(texts: list[str]) -> np.ndarray:
    """int64 array [len(texts), len(CLASSES)]: characters of each class in each text."""
    if not texts:
        return np.zeros((0, len(CLASSES)), dtype=np.int64)
    cps, starts = encode_batch(texts)
    cls = classify(cps).astype(np.int64)
    doc = doc_index(starts, len(cps))
    counts = np.bincount(doc * len(CLASSES) + cls, minlength=len(texts) * len(CLASSES))
    counts = counts.reshape(len(texts), len(CLASSES))
    counts[:, SPACE] -= 1  # the joining "\n"
    return counts
