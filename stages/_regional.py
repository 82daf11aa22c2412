"""Regional phrasing folded to the mainland's, for the text that near-duplicate detection hashes.

OpenCC ``t2s`` converts characters: a Taiwanese translation converted to Simplified still says
``资讯`` / ``伺服器`` / ``档案`` / ``外挂`` where the mainland one says ``信息`` / ``服务器`` / ``文件`` /
``插件``, so the two copies of one document differ on every such word. :func:`fold_regional`
replaces each Taiwan / Hong Kong phrasing (and regional variant character) by the mainland
phrasing, by forward maximum matching (OpenCC's segmentation: at each position the longest
entry that starts there) over the table ``stages/data/regional_phrases.tsv``, built from
OpenCC's own reverse regional dictionaries (bench/make_regional_phrases.py). The result is only
ever hashed, never kept: mainland words that happen to be entries (``档案`` -> ``文件``) are
folded the same way in every copy.

Only texts that may hold an entry go through OpenCC. :class:`Triggers` tests that on code points
already folded character by character (the MinHash shingler's table: a text holding an entry
holds its folded form): a table by code point marks the characters that start an entry, and a
hashed bigram table checks the first one or two bigrams of the entries there.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

PHRASES_FILE = Path(__file__).parent / "data" / "regional_phrases.tsv"
BITMAP_BITS = 20  # hashed bigram table: 1M cells for ~1,400 entries, ~0.2% false hits per bigram
_M1, _M2 = np.uint32(0x9E3779B1), np.uint32(0x85EBCA77)
ONE_CHAR_KEY, STARTS_A_KEY, SECOND_OF_A_KEY = 1, 2, 4  # what a character can be (Triggers.chars)
PAIR, FIRST, SECOND = 1, 2, 4  # what a hashed bigram can be (Triggers.bigrams)


@lru_cache(maxsize=1)
def entries() -> tuple[tuple[str, str], ...]:
    """(regional phrasing, mainland phrasing) of every line of the table."""
    out = []
    for line in PHRASES_FILE.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            key, value = line.split("\t")
            out.append((key, value))
    return tuple(out)


@lru_cache(maxsize=1)
def table_version() -> str:
    """A short hash of the table (recorded with the MinHash settings in the manifest)."""
    return hashlib.blake2b(PHRASES_FILE.read_bytes(), digest_size=8).hexdigest()


@lru_cache(maxsize=1)
def _converter() -> Any:
    """OpenCC with the table as its only dictionary (segmentation and conversion: OpenCC's forward
    maximum matching). OpenCC reads its config and dictionary when it is built: they are written
    to a temporary directory, removed right after."""
    import opencc

    folder = Path(tempfile.mkdtemp(prefix="dataprep-regional-"))
    try:
        (folder / "phrases.txt").write_text("".join(f"{k}\t{v}\n" for k, v in entries()), encoding="utf-8")
        dictionary = {"type": "text", "file": str(folder / "phrases.txt")}
        config = {
            "name": "regional phrasing to mainland phrasing (Simplified)",
            "segmentation": {"type": "mmseg", "dict": dictionary},
            "conversion_chain": [{"dict": dictionary}],
        }
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
        return opencc.OpenCC(str(folder / "config.json"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def convert(texts: list[str]) -> list[str]:
    """The texts with their regional phrasings replaced (one OpenCC call for them all: no entry
    holds a line break, so each text keeps its own)."""
    if not texts:
        return []
    lines = _converter().convert("\n".join(texts)).split("\n")
    out = []
    at = 0
    for text in texts:
        n = text.count("\n") + 1
        out.append("\n".join(lines[at : at + n]))
        at += n
    return out


def _bigram_hash(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """A hash of the pair of code points into BITMAP_BITS bits (the top bits of the xor of two
    multiply-shift hashes)."""
    first, second = np.asarray(first, dtype=np.uint32), np.asarray(second, dtype=np.uint32)
    with np.errstate(over="ignore"):
        return ((first * _M1) ^ (second * _M2)) >> np.uint32(32 - BITMAP_BITS)


class Triggers:
    """Where an entry of the table may start, in text folded character by character with
    ``fold`` (uint32 [0x110000]: code point -> folded code point; the identity for raw text).

    chars: uint8 [0x110000] by folded code point, ONE_CHAR_KEY / STARTS_A_KEY / SECOND_OF_A_KEY
    bits.
    bigrams: uint8 [2**BITMAP_BITS] by hashed bigram of folded code points, PAIR (a whole
    two-character entry), FIRST / SECOND (the first / second bigram of a longer one).
    """

    def __init__(self, fold: np.ndarray):
        self.chars = np.zeros(len(fold), dtype=np.uint8)
        self.bigrams = np.zeros(1 << BITMAP_BITS, dtype=np.uint8)
        # a one-character entry that maps to itself changes nothing and covers only itself
        # (no later match can start inside it): never a candidate, as if it were not there
        keys = [key for key, value in entries() if len(key) > 1 or value != key]
        size = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
        # the folded first three code points of every key (0 past its end), all keys at once
        head = np.zeros((len(keys), 3), dtype=np.int64)
        for k in range(3):
            has = size > k
            head[has, k] = fold[[ord(key[k]) for key in keys if len(key) > k]]
        first, second, third = head[:, 0], head[:, 1], head[:, 2]
        one, pair, longer = size == 1, size == 2, size > 2
        np.bitwise_or.at(self.chars, first[one], ONE_CHAR_KEY)
        np.bitwise_or.at(self.chars, first[~one], STARTS_A_KEY)
        np.bitwise_or.at(self.chars, second[~one], SECOND_OF_A_KEY)
        np.bitwise_or.at(self.bigrams, _bigram_hash(first[pair], second[pair]), PAIR)
        np.bitwise_or.at(self.bigrams, _bigram_hash(first[longer], second[longer]), FIRST)
        np.bitwise_or.at(self.bigrams, _bigram_hash(second[longer], third[longer]), SECOND)

    def candidates(self, cps: np.ndarray, char_bits: np.ndarray) -> np.ndarray:
        """Sorted positions in ``cps`` where an entry may start (every position where one does is
        among them, but for the one-character entries that map to themselves). cps: folded code
        points of documents, each followed by one separator (which starts no entry); char_bits:
        ``self.chars[cps]`` (the caller may have it already)."""
        # a one-character key, or a character that starts a key followed by one that can be second
        follows = (char_bits[1:] >> 1) & STARTS_A_KEY
        follows |= ONE_CHAR_KEY
        follows &= char_bits[:-1]
        pos = np.flatnonzero(follows)
        if not len(pos):
            return pos
        bits = follows[pos]
        found = (bits & ONE_CHAR_KEY).astype(bool)
        start = np.flatnonzero(bits & STARTS_A_KEY)
        at = pos[start]  # never the last code point: that is a separator
        pair = self.bigrams[_bigram_hash(cps[at], cps[at + 1])]
        ok = (pair & PAIR).astype(bool)
        longer = np.flatnonzero((pair & FIRST).astype(bool) & (at + 2 < len(cps)))
        nxt = at[longer] + 1
        ok[longer] |= (self.bigrams[_bigram_hash(cps[nxt], cps[nxt + 1])] & SECOND).astype(bool)
        found[start[ok]] = True
        return pos[found]


@lru_cache(maxsize=1)
def _by_first_character() -> dict[str, tuple[int, ...]]:
    """{first character: the lengths of the entries that start with it, longest first}."""
    lengths: dict[str, set[int]] = {}
    for key, _ in entries():
        lengths.setdefault(key[0], set()).add(len(key))
    return {c: tuple(sorted(ls, reverse=True)) for c, ls in lengths.items()}


def replace(texts: list[str], lengths: np.ndarray, candidates: np.ndarray) -> list[tuple[int, str]]:
    """(document, folded text) of the documents whose text changes, in document order, given the
    positions where an entry may start in the documents joined with one separator each
    (``lengths``: code points of each document plus its separator). Forward maximum matching, as
    OpenCC's segmentation does: from left to right, at each candidate position not covered by
    the previous match, the longest entry that starts there."""
    table = dict(entries())
    starts_with = _by_first_character()
    ends = np.cumsum(lengths)
    docs = np.searchsorted(ends, candidates, side="right")
    offsets = candidates - (ends - lengths)[docs]
    out: list[tuple[int, str]] = []
    k = 0
    n = len(candidates)
    docs_l, offsets_l = docs.tolist(), offsets.tolist()
    while k < n:
        d = docs_l[k]
        text = texts[d]
        parts: list[str] = []
        done = 0  # text[:done] is in parts
        covered = 0  # text[:covered] is settled: no entry may start before it
        while k < n and docs_l[k] == d:
            at = offsets_l[k]
            k += 1
            if at < covered:
                continue
            for size in starts_with.get(text[at], ()):
                key = text[at : at + size]
                value = table.get(key)
                if value is not None:  # an entry that maps to itself is still taken whole
                    if value != key:
                        parts += [text[done:at], value]
                        done = at + size
                    covered = at + size
                    break
        if parts:
            parts.append(text[done:])
            out.append((d, "".join(parts)))
    return out


@lru_cache(maxsize=1)
def _raw_triggers() -> Triggers:
    return Triggers(np.arange(0x110000, dtype=np.uint32))


def fold_regional(texts: list[str]) -> list[str]:
    """Each text with its regional phrasings replaced by the mainland ones (forward maximum
    matching, non-overlapping, left to right); the others are returned as they are."""
    if not texts:
        return texts
    triggers = _raw_triggers()
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)) + 1
    cps = np.frombuffer("\n".join([*texts, ""]).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    out = list(texts)
    for d, text in replace(texts, lengths, triggers.candidates(cps, triggers.chars[cps])):
        out[d] = text
    return out
