"""Vectorised character classes for a batch of texts (no stage here).

``encode_batch(texts)`` turns a batch into one array of code points (texts joined by "\\n") with
the offset of each text; ``class_counts`` counts, per text, the characters of each class below
with one table lookup and one bincount, instead of one regex scan per class per document.
``batch_chars(texts)`` returns those arrays (and the classes and counts, computed on first use) for
a batch, cached on the identity of the text objects: the filters that follow one another on the
same texts (or on the texts a previous filter kept) share one computation.

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

import codecs
import operator
import re
import threading
import unicodedata
from collections.abc import Sequence
from functools import cached_property, lru_cache
from itertools import repeat

import numpy as np

from stages._chars import HAN_BEYOND_BMP, HAN_RANGES, utf8_as_gbk_chars

CLASSES = ("space", "alnum", "han", "han_rare", "han_lead", "han_rare_lead", "punct", "symbol", "bad")
SPACE, ALNUM, HAN, HAN_RARE, HAN_LEAD, HAN_RARE_LEAD, PUNCT, SYMBOL, BAD = range(len(CLASSES))
HAN_CLASSES = (HAN, HAN_RARE, HAN_LEAD, HAN_RARE_LEAD)
HAN_MASK = np.zeros(len(CLASSES), dtype=bool)  # HAN_MASK[cls]: is Han
HAN_MASK[list(HAN_CLASSES)] = True
SENTENCE_PUNCT = "。！？；，、：…!?;,:.\uff0e\uff61\uff64"

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


def _encodable(chars: str, codec: str) -> np.ndarray:
    """bool per character of ``chars``: ``c.encode(codec)`` succeeds (one encode call in all)."""
    bad: list[int] = []

    def handler(e: UnicodeError) -> tuple[str, int]:
        assert isinstance(e, UnicodeEncodeError)
        bad.extend(range(e.start, e.end))
        return "", e.end

    name = f"dataprep-probe-{threading.get_ident()}"
    codecs.register_error(name, handler)
    chars.encode(codec, name)
    ok = np.ones(len(chars), dtype=bool)
    ok[bad] = False
    return ok


def _gbk_leads() -> np.ndarray:
    """bool per BMP code point: the first character of UTF-8 text read as GBK (pairs E4-EF + 80-BF)."""
    leads = np.zeros(0x10000, dtype=bool)
    leads[[ord(c) for c in utf8_as_gbk_chars()]] = True
    return leads


@lru_cache(maxsize=1)
def class_table() -> np.ndarray:
    """uint8 class of every BMP code point (built once per process, vectorised).

    Same rules in this order: BAD (surrogates, private use, U+FFFD); Han ranges (HAN when GB2312
    or Big5 can encode it, else HAN_RARE; the _LEAD variants for GBK-mojibake leads); SPACE
    (``str.isspace``); ASCII non-alphanumerics PUNCT; ``str.isalnum`` ALNUM; punctuation ranges
    and categories P* PUNCT; the rest SYMBOL."""
    cp = np.arange(0x10000)
    chars = "".join(map(chr, range(0x10000)))
    space = np.zeros(0x10000, dtype=bool)  # re's \s and \w are str.isspace and str.isalnum (+ "_")
    space[[m.start() for m in re.finditer(r"\s", chars)]] = True
    alnum = np.zeros(0x10000, dtype=bool)
    alnum[[m.start() for m in re.finditer(r"\w", chars)]] = True
    alnum[ord("_")] = False
    bad = ((cp >= 0xD800) & (cp <= 0xDFFF)) | ((cp >= 0xE000) & (cp <= 0xF8FF)) | (cp == 0xFFFD)
    han = np.zeros(0x10000, dtype=bool)
    for a, b in HAN_RANGES:
        han[a : min(b, 0xFFFF) + 1] = a <= 0xFFFF
    han &= ~bad
    common = np.zeros(0x10000, dtype=bool)
    block = chars[0x4E00:0xA000]
    common[0x4E00:0xA000] = _encodable(block, "gb2312") | _encodable(block, "big5")
    leads = _gbk_leads()
    punct = np.zeros(0x10000, dtype=bool)
    for a, b in _PUNCT_RANGES:
        punct[a : b + 1] = True
    other = ~bad & ~han & ~space & ~alnum
    rest = np.flatnonzero(other & (cp >= 0x80) & ~punct)
    punct[rest] = [unicodedata.category(chars[i]).startswith("P") for i in rest]
    table = np.full(0x10000, SYMBOL, dtype=np.uint8)
    table[other & punct] = PUNCT
    table[other & (cp < 0x80)] = PUNCT
    table[~bad & ~han & ~space & alnum] = ALNUM
    table[~bad & ~han & space] = SPACE
    table[han & common & ~leads] = HAN
    table[han & common & leads] = HAN_LEAD
    table[han & ~common & ~leads] = HAN_RARE
    table[han & ~common & leads] = HAN_RARE_LEAD
    table[bad] = BAD
    return table


@lru_cache(maxsize=1)
def full_class_table() -> np.ndarray:
    """uint8 class of every code point U+0000-U+10FFFF: the BMP from ``class_table``; above it Han
    extensions (U+20000-U+323AF, ``_chars.HAN_RANGES``) HAN_RARE, planes 15-16 BAD, the rest SYMBOL."""
    table = np.full(0x110000, SYMBOL, dtype=np.uint8)
    table[:0x10000] = class_table()
    table[HAN_BEYOND_BMP] = HAN_RARE
    table[0xF0000:] = BAD
    return table


@lru_cache(maxsize=1)
def sentence_punct_table() -> np.ndarray:
    table = np.zeros(0x10000, dtype=bool)
    table[[ord(c) for c in SENTENCE_PUNCT]] = True
    return table


def encode_batch(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(code points of the texts, each followed by "\\n", as uint32; start offset of each text + total).
    Lone surrogates (which JSON input can hold) are kept as their code points (class BAD)."""
    joined = "\n".join(texts) + "\n"
    cps = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    lengths = np.fromiter((len(t) + 1 for t in texts), dtype=np.int64, count=len(texts))
    starts = np.concatenate([[0], np.cumsum(lengths)])
    return cps, starts


def classify(cps: np.ndarray) -> np.ndarray:
    """Class of every code point (supplementary planes: Han extensions rare, planes 15-16 bad)."""
    return full_class_table()[cps]


def doc_index(starts: np.ndarray, n: int) -> np.ndarray:
    """Index of the text each of the ``n`` joined positions belongs to."""
    return np.repeat(np.arange(len(starts) - 1), np.diff(starts))[:n]


def class_counts(texts: list[str]) -> np.ndarray:
    """int64 array [len(texts), len(CLASSES)]: characters of each class in each text."""
    return batch_chars(texts).counts


class BatchChars:
    """The code points of a batch of texts and what is derived from them, each computed once.

    cps: uint32 code points of the texts, each followed by "\\n"; starts: int64 offset of each text
    in cps, plus the total; lengths: characters of each text. cls (classes), doc (text index of
    each position) and counts (class counts per text, the joining "\\n" not counted) are computed
    on first use. Arrays are shared: never modify them.
    """

    def __init__(self, texts: Sequence[str], cps: np.ndarray, starts: np.ndarray):
        self.texts = tuple(texts)
        self.cps = cps
        self.starts = starts

    @classmethod
    def of(cls, texts: Sequence[str]) -> BatchChars:
        cps, starts = encode_batch(list(texts))
        return cls(texts, cps, starts)

    @cached_property
    def lengths(self) -> np.ndarray:
        return np.diff(self.starts) - 1

    @cached_property
    def cls(self) -> np.ndarray:
        return classify(self.cps)

    @cached_property
    def doc(self) -> np.ndarray:
        return doc_index(self.starts, len(self.cps))

    @cached_property
    def counts(self) -> np.ndarray:
        n = len(self.texts)
        if not n:
            return np.zeros((0, len(CLASSES)), dtype=np.int64)
        flat = self.doc * len(CLASSES) + self.cls
        counts = np.bincount(flat, minlength=n * len(CLASSES)).reshape(n, len(CLASSES))
        counts[:, SPACE] -= 1  # the joining "\n"
        return counts

    def subset(self, keep: np.ndarray, texts: Sequence[str]) -> BatchChars:
        """The arrays of the texts where ``keep`` (bool per text) is set, which are ``texts``."""
        spans = np.diff(self.starts)
        positions = np.repeat(keep, spans)
        starts = np.concatenate([[0], np.cumsum(spans[keep])])
        out = BatchChars(texts, self.cps[positions], starts)
        cached = self.__dict__
        if "cls" in cached:
            out.cls = cached["cls"][positions]
        if "counts" in cached:
            out.counts = cached["counts"][keep]
        if "layout" in cached:  # (stages._layout)
            out.__dict__["layout"] = cached["layout"].subset(keep, self.starts, starts)
        return out


_last_batch: list[BatchChars] = []  # the most recent batch (one per process; replaced, never mutated)


def batch_chars(texts: Sequence[str]) -> BatchChars:
    """``BatchChars`` of ``texts``, reused when they are the very text objects of the last batch
    asked for, or a subsequence of them (what the previous filter kept)."""
    last = _last_batch[0] if _last_batch else None
    if last is not None:
        old = last.texts
        if len(old) == len(texts) and all(map(operator.is_, old, texts)):
            return last
        if len(texts) < len(old):
            # the old texts are alive (held by ``last``): no other object can have their ids
            where = {id(t): i for i, t in enumerate(old)}
            index = np.fromiter(map(where.get, map(id, texts), repeat(-1)), dtype=np.int64, count=len(texts))
            if len(index) and index.min() >= 0 and (len(index) < 2 or (np.diff(index) > 0).all()):
                keep = np.zeros(len(old), dtype=bool)
                keep[index] = True
                out = last.subset(keep, texts)
                _last_batch[:] = [out]
                return out
    out = BatchChars.of(texts)
    _last_batch[:] = [out]
    return out


def flags_per_text(bc: BatchChars, table: np.ndarray) -> np.ndarray:
    """Bitwise OR over each text of ``table[code point]`` (the joining "\\n" included: give "\\n"
    no bits you test for)."""
    return np.bitwise_or.reduceat(table[bc.cps], bc.starts[:-1])


def count_per_text(bc: BatchChars, mask_table: np.ndarray) -> np.ndarray:
    """Characters of each text whose code point is set in the bool ``mask_table``."""
    return np.add.reduceat(mask_table[bc.cps].astype(np.int64), bc.starts[:-1])


@lru_cache(maxsize=1)
def decimal_low() -> np.ndarray:
    """bool per code point below U+20000: a decimal digit as re's \\d (Unicode category Nd)."""
    table = np.zeros(0x20000, dtype=bool)
    chars = "".join(map(chr, range(0x20000)))
    table[[m.start() for m in re.finditer(r"\d", chars)]] = True
    return table


def decimal_counts(bc: BatchChars) -> np.ndarray:
    """Decimal digits (re's \\d) in each text; code points from U+20000 on (CJK extensions and
    beyond) are looked at one by one."""
    cps = bc.cps
    low = decimal_low()
    counts = np.add.reduceat(low[np.minimum(cps, 0x1FFFF)].astype(np.int64), bc.starts[:-1])
    high = np.flatnonzero(cps >= 0x20000)
    if len(high):
        digit = [bool(re.match(r"\d", chr(c))) for c in cps[high].tolist()]
        if any(digit):
            counts += np.bincount(bc.doc[high[digit]], minlength=len(counts))
    return counts


def mostly_wide(texts: Sequence[str]) -> list[int] | None:
    """None when the per-character passes should cover the whole batch (at least four fifths
    of its characters in texts that are not pure ASCII), else the indices of the texts worth
    them: those with a fair share of non-ASCII characters (at least one in four in their first
    256, counted from the UTF-8 length). For texts of mostly ASCII, such as English e-mail, the
    four bytes per character of the code-point arrays cost more than the scans they save."""
    lengths = list(map(len, texts))
    ascii_only = list(map(str.isascii, texts))
    total = sum(lengths)
    ascii_chars = sum(n for n, a in zip(lengths, ascii_only, strict=True) if a)
    if ascii_chars * 5 <= total:
        return None
    wide = []
    for i, (t, a) in enumerate(zip(texts, ascii_only, strict=True)):
        if not a:
            head = t[:256]  # (the start of a text tells its script well enough)
            if (len(head.encode("utf-8", "surrogatepass")) - len(head)) * 2 >= len(head):
                wide.append(i)
    return wide
