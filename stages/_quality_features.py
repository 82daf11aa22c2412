"""Features of the quality classifier, the same at training and at scoring (no word segmenter).

Each text, cut to its first ``max_chars`` characters, is folded one code point at a time with
``_minhash.char_tables`` (width, case, every digit -> ``0``, Traditional -> Simplified and variant
characters), then written as space-separated tokens: every CJK character (Han, kana, Hangul) one
token, every run of letters and digits one token, every punctuation mark or symbol one token (as
written: ``，`` and ``,`` differ), every line break the token ``¶``; combining marks and format
characters are removed. fastText's word n-grams (``wordNgrams``, default 2) then give character
bigrams for Chinese and word bigrams for Latin text; fastText's subword n-grams are off
(``minn = maxn = 0``).

Labels: ``__label__hq`` (positive, "quality") and ``__label__lq``; the score of a text is the
model's probability of ``hq``, in [0, 1].
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

POSITIVE = "__label__hq"
NEGATIVE = "__label__lq"
LINE_BREAK = "¶"
DEFAULT_MAX_CHARS = 4000


_SEPARATOR, _IGNORED, _WORD, _SINGLE = 0, 1, 2, 3  # kinds of code point, in _token_table
_KIND_SHIFT = 21  # code points < 0x110000 < 2**21
_CP_MASK = (1 << _KIND_SHIFT) - 1


@functools.lru_cache(maxsize=1)
def _token_table() -> np.ndarray:
    """uint32 [0x110000]: code point -> the code point written for it | its kind << 21.

    Kinds: _WORD (letters and digits: runs of them are one token), _SINGLE (a CJK character, a
    punctuation mark or symbol, a line break: one token each), _IGNORED (combining and format
    characters: removed, no break), _SEPARATOR (everything else: removed, breaks a word).
    Written: the folded code point (``_minhash.char_tables``), a punctuation mark or symbol as
    it stands, ``¶`` for a line break."""
    from stages._minhash import CJK, IGNORED, MARK, WORD, char_tables

    fold, cls = char_tables(True)
    out = np.where(cls == MARK, np.arange(len(fold), dtype=np.uint32), fold).astype(np.uint32)
    kind = np.select(
        [cls == WORD, (cls == CJK) | (cls == MARK), cls == IGNORED], [_WORD, _SINGLE, _IGNORED], _SEPARATOR
    ).astype(np.uint32)
    out[10], kind[10] = ord(LINE_BREAK), _SINGLE
    return out | (kind << np.uint32(_KIND_SHIFT))


@dataclass
class Tokens:
    """The tokens of a batch of texts (see the module docstring), as arrays.

    chars: uint32 [K], the code points of all tokens one after the other (texts in order);
    starts: int64 [T], the index in ``chars`` of every token's first code point (increasing);
    first: int64 [D], the index of every text's first token (non-decreasing; a text without
    tokens: the next text's)."""

    chars: np.ndarray
    starts: np.ndarray
    first: np.ndarray

    @property
    def n_docs(self) -> int:
        return len(self.first)

    @functools.cached_property
    def lengths(self) -> np.ndarray:
        """int64 [T]: code points of every token."""
        return np.diff(self.starts, append=len(self.chars))

    @functools.cached_property
    def counts(self) -> np.ndarray:
        """int64 [D]: tokens of every text."""
        return np.diff(self.first, append=len(self.starts))

    @functools.cached_property
    def doc(self) -> np.ndarray:
        """int64 [T]: the text of every token (non-decreasing)."""
        return np.repeat(np.arange(self.n_docs), self.counts)


def tokens(texts: list[str], max_chars: int = DEFAULT_MAX_CHARS) -> Tokens:
    """The tokens of every text's first ``max_chars`` characters, vectorised over the batch."""
    sizes = np.array(list(map(len, texts)), dtype=np.int64)
    if len(texts) and sizes.max() > max_chars:
        texts = [t[:max_chars] for t in texts]
        sizes = np.minimum(sizes, max_chars)
    # U+0000 (a separator) between texts: no token spans two texts
    joined = "\0".join(texts)
    packed = _token_table()[np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype="<u4")]
    kept = np.flatnonzero(packed >= np.uint32(_WORD << _KIND_SHIFT))
    chars = packed[kept]
    word = chars < np.uint32(_SINGLE << _KIND_SHIFT)
    chars &= np.uint32(_CP_MASK)
    cont = word[1:] & word[:-1]  # a word character after a word character ...
    pairs = np.flatnonzero(cont)
    far = pairs[kept[pairs + 1] - kept[pairs] > 1]
    if len(far):  # ... with removed characters between: a continuation if none is a separator
        kind = packed >> np.uint32(_KIND_SHIFT)
        if (kind == _IGNORED).any():
            seps = np.cumsum(kind == _SEPARATOR, dtype=np.int64)
            cont[far] = seps[kept[far + 1]] == seps[kept[far]]
        else:
            cont[far] = False
    start = np.ones(len(kept), dtype=bool)
    start[1:] = ~cont
    starts = np.flatnonzero(start)
    begins = np.zeros(len(texts), dtype=np.int64)  # where every text starts in ``joined``
    np.cumsum(sizes[:-1] + 1, out=begins[1:])
    first = np.searchsorted(starts, np.searchsorted(kept, begins))
    return Tokens(chars, starts, first)


def feature_lines(texts: list[str], max_chars: int = DEFAULT_MAX_CHARS) -> list[str]:
    """The fastText input line of every text: its tokens (:func:`tokens`) joined by spaces."""
    if not texts:
        return []
    tok = tokens(texts, max_chars)
    k, t = len(tok.chars), len(tok.starts)
    present = np.flatnonzero(tok.counts)  # the texts with a token
    is_first = np.zeros(t, dtype=bool)  # the first token of its text
    is_first[tok.first[present]] = True
    # every token preceded by a space, every text's first token by a line break (split on below)
    result = np.empty(k + t, dtype=np.uint32)
    inserted = np.zeros(k, dtype=np.int64)
    inserted[tok.starts] = 1
    pos = np.arange(k) + np.cumsum(inserted)
    result[pos] = tok.chars
    result[pos[tok.starts] - 1] = np.where(is_first, 10, 32)
    lines = result.astype("<u4").tobytes().decode("utf-32-le").split("\n")
    # texts without any token have no line of their own: put them back in order
    out = [""] * len(texts)
    for i, line in zip(present.tolist(), lines[1:], strict=True):
        out[i] = line
    return out
