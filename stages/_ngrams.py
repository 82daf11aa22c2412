"""Hashed token n-grams and their on-disk index, for benchmark decontamination (``decontaminate``).

Normalisation, the same for benchmark items and corpus documents: every code point through
``_minhash.char_tables`` (NFKC of the character alone: full width -> half width; lower case;
Traditional -> Simplified and variant characters) except digits, which keep their value (``１２``
-> ``12``, not ``00``: numbers tell benchmark items apart); combining marks and format characters
are removed without splitting a word; punctuation, symbols and whitespace only separate tokens.
Tokens: every CJK character (Han, kana, Hangul) is one token, every run of letters and digits one
token. So ``“床前明月光，疑是地上霜。”``, ``床前明月光 疑是地上霜`` and ``牀前明月光,疑是地上霜`` are
the same tokens.

Hashes are 64-bit (a 32-bit hash would collide: millions of benchmark n-grams against billions of
corpus n-grams): token hash = splitmix64 of the code point (CJK) or of a polynomial over the run's
code points and its length (words); the hash of the n tokens from k on is
``(C[k+n] - C[k]) * Q^-k`` with C the prefix sums of ``token * Q^i`` (mod 2^64, Q odd), through
splitmix64 with ``n`` mixed in: O(1) per n-gram for any n, one vectorised pass per batch.

The index (:class:`NgramIndex`): the sorted unique n-gram hashes of every item (``ngrams.npy``,
uint64), the item each comes from (``items.npy``, int32, the lowest item id when several share it)
and a bit filter on the top bits of the hash (``filter.npy``, about 16 bits per n-gram) that turns
away most corpus n-grams before the binary search; all memory-mapped, 12 bytes per n-gram plus the
filter.
"""

from __future__ import annotations

import functools
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stages._minhash import CJK, IGNORED, WORD, char_tables, mix64

U64 = np.uint64
_P_CHAR = U64(0x9E3779B97F4A7C15)
_Q_TOKEN = U64(0xC2B2AE3D27D4EB4F)
_CJK_SALT = U64(0x27D4EB2F165667C5)
_WORD_SALT = U64(0x165667B19E3779F9)
_N_SALT = U64(0xD6E8FEB86659FD93)


@functools.lru_cache(maxsize=1)
def decontamination_tables() -> tuple[np.ndarray, np.ndarray]:
    """(fold, cls) of ``_minhash.char_tables(True)`` with digits given back their value."""
    fold, cls = char_tables(True)
    fold = fold.copy()
    for cp in np.flatnonzero((fold == ord("0")) & (cls == WORD)).tolist():
        s = unicodedata.normalize("NFKC", chr(cp))
        if len(s) == 1 and s.isdigit():
            fold[cp] = ord("0") + unicodedata.digit(s)
    return fold, cls


_POWERS: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _powers(base: U64, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(base^i, base^-i) mod 2^64 for i in [0, >= n), uint64, cached (grown by powers of two)."""
    key = int(base)
    have = _POWERS.get(key)
    if have is None or len(have[0]) < n:
        size = 1 << max(12, int(max(n, 1) - 1).bit_length())
        inv = U64(pow(key, -1, 1 << 64))
        out = []
        for b in (base, inv):
            p = np.empty(size, dtype=np.uint64)
            p[0] = 1
            p[1:] = b
            with np.errstate(over="ignore"):
                np.cumprod(p[1:], out=p[1:])
            out.append(p)
        _POWERS[key] = have = (out[0], out[1])
    return have


@dataclass(frozen=True)
class Tokens:
    """The tokens of a batch of texts.

    hashes: uint64 [T]; start / end: int64 [T], each token's character range in its own text;
    offsets: int64 [texts + 1], text i owns tokens offsets[i]:offsets[i+1]; cjk: int64 [texts],
    CJK tokens per text.
    """

    hashes: np.ndarray
    start: np.ndarray
    end: np.ndarray
    offsets: np.ndarray
    cjk: np.ndarray

    def counts(self) -> np.ndarray:
        return np.diff(self.offsets)


def tokenize(texts: list[str]) -> Tokens:
    """Normalise and tokenise ``texts`` (see the module docstring), all at once."""
    fold, cls_table = decontamination_tables()
    n_docs = len(texts)
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=n_docs)
    text_start = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(lengths + 1, out=text_start[1:])
    joined = "\0".join(texts)
    cps = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    cls = cls_table[cps]
    pos = np.flatnonzero(cls != IGNORED)
    c = cls[pos]
    f = fold[cps[pos]].astype(np.uint64)
    is_cjk = c == CJK
    is_word = c == WORD
    prev_word = np.zeros(len(pos), dtype=bool)
    prev_word[1:] = is_word[:-1]
    word_start = is_word & ~prev_word
    next_word = np.zeros(len(pos), dtype=bool)
    next_word[:-1] = is_word[1:]
    word_stop = is_word & ~next_word  # last character of a run
    starts = np.flatnonzero(is_cjk | word_start)
    token_is_word = is_word[starts]
    stops = np.empty(len(starts), dtype=np.int64)  # index (in pos) of each token's last character
    stops[~token_is_word] = starts[~token_is_word]
    stops[token_is_word] = np.flatnonzero(word_stop)
    hashes = np.empty(len(starts), dtype=np.uint64)
    with np.errstate(over="ignore"):
        hashes[~token_is_word] = mix64(f[starts[~token_is_word]] + _CJK_SALT)
        if token_is_word.any():
            forward, backward = _powers(_P_CHAR, len(pos) + 1)
            prefix = np.zeros(len(pos) + 1, dtype=np.uint64)
            np.cumsum((f + U64(1)) * forward[: len(pos)], out=prefix[1:])
            w_start, w_stop = starts[token_is_word], stops[token_is_word]
            raw = (prefix[w_stop + 1] - prefix[w_start]) * backward[w_start]
            raw ^= (w_stop - w_start + 1).astype(np.uint64) * _WORD_SALT
            hashes[token_is_word] = mix64(raw)
    char_start = pos[starts]
    char_end = pos[stops] + 1
    doc = np.searchsorted(text_start, char_start, side="right") - 1
    offsets = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(np.bincount(doc, minlength=n_docs), out=offsets[1:])
    cjk = np.bincount(doc[~token_is_word], minlength=n_docs).astype(np.int64)
    base = text_start[doc]
    return Tokens(hashes, char_start - base, char_end - base, offsets, cjk)


def ngram_hashes(tokens: Tokens, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(hash, first token index) of every n-gram that lies inside one text, in token order."""
    h = tokens.hashes
    t = len(h)
    if t < n:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    forward, backward = _powers(_Q_TOKEN, t + 1)
    with np.errstate(over="ignore"):
        prefix = np.zeros(t + 1, dtype=np.uint64)
        np.cumsum(h * forward[:t], out=prefix[1:])
        k = np.arange(t - n + 1, dtype=np.int64)
        doc_end = np.repeat(tokens.offsets[1:], tokens.counts())[: t - n + 1]
        k = k[k + n <= doc_end]
        raw = (prefix[k + n] - prefix[k]) * backward[k]
        raw ^= U64(n) * _N_SALT
    return mix64(raw), k


def cjk_mode(tokens: Tokens) -> np.ndarray:
    """bool per text: at least half of its tokens are CJK characters (n-grams of ``ngram_cjk``)."""
    return 2 * tokens.cjk >= np.maximum(tokens.counts(), 1)


# ---------------------------------------------------------------------------------------------
# The index


def index_paths(directory: Path) -> tuple[Path, Path, Path]:
    return directory / "ngrams.npy", directory / "items.npy", directory / "filter.npy"


def filter_bits(count: int) -> int:
    """log2 of the filter's size in bits: about 16 bits per n-gram, 2^16 to 2^32."""
    return min(32, max(16, int(max(count, 1) * 16 - 1).bit_length()))


def build_index(
    item_texts: list[str], ngram_cjk: int, ngram_word: int, directory: Path, chunk: int = 20_000
) -> tuple[int, np.ndarray]:
    """Write the index of ``item_texts`` (item ids = list positions) into ``directory``; returns
    (distinct n-grams, n-grams per item). An item's n-grams are of ``ngram_cjk`` tokens when it is
    in CJK mode, else of ``ngram_word``; an item with fewer tokens has none."""
    hashes: list[np.ndarray] = []
    owners: list[np.ndarray] = []
    per_item = np.zeros(len(item_texts), dtype=np.int64)
    for s in range(0, len(item_texts), chunk):
        tokens = tokenize(item_texts[s : s + chunk])
        mode = cjk_mode(tokens)
        tok_doc = np.repeat(np.arange(len(mode), dtype=np.int64), tokens.counts())
        for n, want in ((ngram_cjk, True), (ngram_word, False)):
            g, k = ngram_hashes(tokens, n)
            item = tok_doc[k]
            sel = mode[item] == want
            hashes.append(g[sel])
            owners.append(item[sel] + s)
            per_item[s : s + len(mode)] += np.bincount(item[sel], minlength=len(mode))
    g = np.concatenate(hashes) if hashes else np.zeros(0, dtype=np.uint64)
    item = np.concatenate(owners) if owners else np.zeros(0, dtype=np.int64)
    order = np.lexsort((item, g))
    g, item = g[order], item[order]
    first = np.ones(len(g), dtype=bool)
    first[1:] = g[1:] != g[:-1]
    g, item = g[first], item[first].astype(np.int32)
    bits = filter_bits(len(g))
    words = np.zeros(max(1, (1 << bits) // 64), dtype=np.uint64)
    top = (g >> U64(64 - bits)).astype(np.int64)
    np.bitwise_or.at(words, top >> 6, U64(1) << (top & 63).astype(np.uint64))
    directory.mkdir(parents=True, exist_ok=True)
    for path, array in zip(index_paths(directory), (g, item, words), strict=True):
        tmp = path.with_name(path.name + ".tmp.npy")
        np.save(tmp, array)
        tmp.replace(path)
    return len(g), per_item


class NgramIndex:
    """The memory-mapped index written by :func:`build_index`."""

    def __init__(self, directory: Path):
        ngrams, items, filt = index_paths(directory)
        self.ngrams = np.load(ngrams, mmap_mode="r")
        self.items = np.load(items, mmap_mode="r")
        self.filter = np.load(filt, mmap_mode="r")
        self.bits = int(len(self.filter) * 64).bit_length() - 1

    def lookup(self, hashes: np.ndarray) -> np.ndarray:
        """int64 item of every hash found, -1 for the others."""
        out = np.full(len(hashes), -1, dtype=np.int64)
        if not len(hashes) or not len(self.ngrams):
            return out
        top = (hashes >> U64(64 - self.bits)).astype(np.int64)
        maybe = np.flatnonzero((self.filter[top >> 6] >> (top & 63).astype(np.uint64)) & U64(1))
        if not len(maybe):
            return out
        q = hashes[maybe]
        at = np.searchsorted(self.ngrams, q)
        at = np.minimum(at, len(self.ngrams) - 1)
        hit = self.ngrams[at] == q
        out[maybe[hit]] = self.items[at[hit]]
        return out
