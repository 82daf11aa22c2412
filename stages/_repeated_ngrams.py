"""Repeated n-grams of units for filter_repetition, vectorised over a batch (no stage here).

Units: every Han, kana or hangul character is one unit; a run of other letters and digits (a
Latin word, a number) is one unit (code, tables, link targets and inline code hold none:
``stages._layout``). ``ngram_columns`` gives per text ``top_{2,3,4}gram`` (characters covered by
the most frequent n-gram occurring at least twice / characters of all units), ``dup_10gram``
(characters covered by any repeated 10-gram) and ``han_units`` (share of units that are Han):
every n-gram keyed by (text, top 44 bits of its hash), one sort per n-gram size.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from stages._charclass import ALNUM, HAN_MASK, batch_chars, full_class_table
from stages._filter_base import Columns, rows
from stages._layout import layout
from stages._repeated_lines import HASH_INV, HASH_MUL, MIX

TOP_NS = (2, 3, 4)
DUP_N = 10
DOC_BITS = 20  # documents per batch < 2**20


@lru_cache(maxsize=1)
def unit_table() -> np.ndarray:
    """uint8 kind of every code point: bit 1 a unit of its own (Han, kana, hangul), bit 2 a
    letter or digit of another script (part of a word unit), bit 4 Han; 0 anything else."""
    table = np.zeros(0x110000, dtype=np.uint8)
    cls = full_class_table()
    table[cls == ALNUM] = WORD
    table[HAN_MASK[cls]] = SINGLE | HAN_UNIT
    for a, b in KANA_RANGES:
        table[a : b + 1] = SINGLE
    return table


SINGLE, WORD, HAN_UNIT = 1, 2, 4
KANA_RANGES = ((0x3040, 0x31FF), (0xAC00, 0xD7AF), (0x1100, 0x11FF))


def _units(
    texts: Sequence[str], min_units: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(unit ids uint64, unit lengths, unit text index, unit is Han, units per text) for a
    batch, vectorised, only for the texts of at least ``min_units`` units (their index compacted
    to 0, 1, ... in order). A Han/kana/hangul character is one unit (id: its code point); a run of
    other letters and digits is one unit (id: a polynomial hash of its code points, top bit set)."""
    bc = batch_chars(texts)
    cps = bc.cps
    kind = unit_table()[cps]
    no_words = layout(bc).no_words
    if len(no_words):
        kind[no_words] = 0  # code, tables, link targets, inline code: no units
    word = (kind & WORD) != 0
    # word runs: starts and ends, found on the word characters only
    wpos = np.flatnonzero(word)
    gap = np.ones(len(wpos) + 1, dtype=bool)
    if len(wpos):
        gap[1:-1] = wpos[1:] != wpos[:-1] + 1
    run_first = np.flatnonzero(gap[:-1])  # index into wpos of each run's first character
    run_last = np.flatnonzero(gap[1:])
    run_start = wpos[run_first]
    start = (kind & SINGLE) != 0
    start[run_start] = True
    per_doc = np.add.reduceat(start, bc.starts[:-1]) if len(texts) else np.zeros(0, dtype=np.int64)
    keep_doc = per_doc >= min_units
    if not keep_doc.all():  # leave out the texts with too few units
        start &= np.repeat(keep_doc, np.diff(bc.starts))
        kept = keep_doc[bc.doc[run_start]]
        run_first, run_last, run_start = run_first[kept], run_last[kept], run_start[kept]
    run_len = run_last - run_first + 1
    # sum of cps[start + j] * M**j over each run (mod 2**64), from prefix sums over word characters
    with np.errstate(over="ignore"):
        k = len(wpos)
        powers = np.cumprod(np.full(k, HASH_MUL, dtype=np.uint64))  # M^1 .. M^k
        inverse = np.cumprod(np.full(k, HASH_INV, dtype=np.uint64))  # M^-1 .. M^-k
        prefix = np.concatenate([[np.uint64(0)], np.cumsum(cps[wpos].astype(np.uint64) * powers)])
        word_ids = ((prefix[run_last + 1] - prefix[run_first]) * inverse[run_first]) | np.uint64(1 << 63)
    pos = np.flatnonzero(start)
    ids = cps[pos].astype(np.uint64)
    lens = np.ones(len(pos), dtype=np.int64)
    at = np.searchsorted(pos, run_start)
    ids[at] = word_ids
    lens[at] = run_len
    is_han = (kind[pos] & HAN_UNIT) != 0
    doc = bc.doc[pos]
    if not keep_doc.all():
        doc = (np.cumsum(keep_doc) - 1)[doc]
    return ids, lens, doc, is_han, per_doc


def _gram_hashes(hashes: dict[int, np.ndarray], mixed: np.ndarray, n: int) -> np.ndarray:
    """Hashes of every n-gram of units: sum of mixed[i + j] * M**(j + 1) over j < n (mod 2**64),
    built from shorter ones kept in ``hashes`` (the value the prefix-sum form of this hash has)."""

    def power(k: int) -> np.uint64:
        return np.uint64(pow(HASH_MUL, k, 2**64))

    if n == 2:
        g = mixed[:-1] * power(1) + mixed[1:] * power(2)
    elif n - 1 in hashes:
        g = hashes[n - 1][:-1] + mixed[n - 1 :] * power(n)
    else:  # 10 = 4 + 4 + 2
        g4, g2, m = hashes[4], hashes[2], len(mixed) - n + 1
        g = g4[:m] + g4[4 : 4 + m] * power(4) + g2[8 : 8 + m] * power(8)
    hashes[n] = g
    return g


def _positions(mask: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Positions in ``mask`` of the ``idx``-th set elements (``np.flatnonzero(mask)[idx]``)."""
    unset = np.flatnonzero(~mask)
    if not len(unset):
        return idx
    # the k-th set element lies after the unset ones u with u - (their rank) <= k
    return idx + np.searchsorted(unset - np.arange(len(unset)), idx, side="right")


def _top_counts_sorted(
    doc: np.ndarray,
    doc_key: np.ndarray,
    g: np.ndarray,
    same: np.ndarray,
    csum: np.ndarray,
    n: int,
    ndocs: int,
) -> np.ndarray:
    """Per text, the largest (occurrences x characters) over the n-grams that occur at least
    twice, keys (text, top 44 bits of g) grouped with an argsort; the characters are those of the
    group's first n-gram in that order."""
    out = np.zeros(ndocs)
    key = (doc_key[: len(g)] | (g >> np.uint64(DOC_BITS)))[same]
    order = np.argsort(key)
    skey = key[order]
    starts = np.flatnonzero(np.concatenate([[True], skey[1:] != skey[:-1]]))
    run_len = np.diff(np.concatenate([starts, [len(skey)]]))
    many = run_len >= 2
    if many.any():
        first = _positions(same, order[starts[many]])
        value = run_len[many] * (csum[first + n] - csum[first])
        run_doc = doc[first]
        seg = np.flatnonzero(np.concatenate([[True], run_doc[1:] != run_doc[:-1]]))
        out[run_doc[seg]] = np.maximum.reduceat(value, seg)
    return out


def _top_counts(
    doc: np.ndarray,
    doc_high: np.ndarray,
    doc_bits: int,
    g: np.ndarray,
    same: np.ndarray,
    csum: np.ndarray,
    n: int,
    ndocs: int,
) -> np.ndarray | None:
    """``_top_counts_sorted`` without an argsort: text (``doc_high``: the text index in the top
    ``doc_bits`` bits), key and the n-gram's characters packed in one integer, sorted by value.
    None when some key holds n-grams of different lengths (which of them counts then depends on
    the argsort order), or the characters do not fit."""
    char_bits = 64 - (64 - DOC_BITS) - doc_bits
    if char_bits < 8:
        return None
    m = len(g)
    chars = csum[n : n + m] - csum[:m]  # uint64
    limit = np.uint64((1 << char_bits) - 1)
    if chars.max(initial=0) >= limit:
        return None
    packed = g >> np.uint64(DOC_BITS)
    packed <<= np.uint64(char_bits)
    packed |= doc_high[:m]
    packed |= chars
    packed = packed[same]
    packed.sort()
    step = packed[1:] ^ packed[:-1]
    equal = step == 0
    if np.count_nonzero(step <= limit) != np.count_nonzero(equal):  # same key, other length
        return None
    out = np.zeros(ndocs)
    at = np.flatnonzero(equal)  # the second and later members of every repeated group
    if not len(at):
        return out
    first = np.flatnonzero(np.concatenate([[True], at[1:] != at[:-1] + 1]))
    count = np.diff(np.concatenate([first, [len(at)]])) + 1
    value = packed[at[first]]
    group_doc = (value >> np.uint64(64 - doc_bits)).astype(np.int64)
    group_value = count * (value & limit).astype(np.int64)
    seg = np.flatnonzero(np.concatenate([[True], group_doc[1:] != group_doc[:-1]]))
    out[group_doc[seg]] = np.maximum.reduceat(group_value, seg)
    return out


def _repeated_cover(key: np.ndarray, same: np.ndarray, n: int, units: int) -> np.ndarray | None:
    """bool per unit: inside an n-gram (of one text) whose key occurs at least twice; None when
    no key repeats."""
    keys = key[same]
    ordered = np.sort(keys)
    dup = ordered[1:][ordered[1:] == ordered[:-1]]
    if not len(dup):
        return None
    repeated = np.unique(dup)
    # only the n-grams of texts with a repeated key are looked up
    doc = keys >> np.uint64(64 - DOC_BITS)
    texts = np.zeros(int(doc[-1]) + 1, dtype=bool)
    texts[(repeated >> np.uint64(64 - DOC_BITS)).astype(np.int64)] = True
    look = np.flatnonzero(texts[doc.astype(np.int64)])
    hit = np.minimum(np.searchsorted(repeated, keys[look]), len(repeated) - 1)
    first_pos = np.flatnonzero(same)[look[repeated[hit] == keys[look]]]
    size = units + n
    delta = np.bincount(first_pos, minlength=size) - np.bincount(first_pos + n, minlength=size)
    return np.cumsum(delta)[:units] > 0


def ngram_columns(texts: Sequence[str], min_units: int) -> Columns:
    """top_{2,3,4}gram, dup_10gram and han_units per text (zeros below ``min_units`` units), as
    arrays: every n-gram of the texts of at least ``min_units`` units is keyed by (text, top 44
    bits of its hash) and grouped with one sort per n-gram size (the keys and sorts of before, so
    even hash collisions group as they did)."""
    count = len(texts)
    out = {f"top_{n}gram": np.zeros(count) for n in TOP_NS}
    out[f"dup_{DUP_N}gram"] = np.zeros(count)
    out["han_units"] = np.zeros(count)
    if not count or max(len(t) for t in texts) < min_units:
        return out
    ids, lens, doc, is_han, per_doc = _units(texts, min_units)
    keep_doc = per_doc >= min_units  # (never true below min_units characters)
    if not keep_doc.any():
        return out
    owners = np.flatnonzero(keep_doc)
    ndocs = len(owners)
    han_units = np.bincount(doc, weights=is_han, minlength=ndocs) / per_doc[keep_doc]
    total_chars = np.bincount(doc, weights=lens, minlength=ndocs)
    csum = np.concatenate([[0], np.cumsum(lens)])
    csum_u = csum.astype(np.uint64)
    out_top = {n: np.zeros(ndocs) for n in TOP_NS}
    dup_cover = np.zeros(ndocs)
    units = len(ids)
    # first unit of every text but the first: an n-gram starting less than n units before one
    # spans two texts
    boundary = np.flatnonzero(doc[1:] != doc[:-1]) + 1
    doc_bits = max(1, (ndocs - 1).bit_length())
    doc_u = doc.astype(np.uint64)
    doc_high = doc_u << np.uint64(64 - doc_bits)
    with np.errstate(over="ignore"):
        mixed = ids * MIX + np.uint64(0x9E3779B97F4A7C15)  # spread small ids (code points)
        hashes: dict[int, np.ndarray] = {}
        for n in (*TOP_NS, DUP_N):
            m = units - n + 1
            if m <= 0:
                continue
            g = _gram_hashes(hashes, mixed, n)  # hash of units i .. i+n-1, for every i < m
            same = np.ones(m, dtype=bool)  # n-grams inside one text
            cross = (boundary[:, None] - np.arange(1, n)).ravel()
            same[cross[(cross >= 0) & (cross < m)]] = False
            if n == DUP_N:
                key = (doc_u[:m] << np.uint64(64 - DOC_BITS)) | (g >> np.uint64(DOC_BITS))
                covered = _repeated_cover(key, same, n, units)
                if covered is not None:
                    dup_cover = np.bincount(doc[covered], weights=lens[covered], minlength=ndocs)
                continue
            top = _top_counts(doc, doc_high, doc_bits, g, same, csum_u, n, ndocs)
            if top is None:  # n-grams of different lengths share a key: group as before
                doc_key = doc_u << np.uint64(64 - DOC_BITS)
                top = _top_counts_sorted(doc, doc_key, g, same, csum, n, ndocs)
            out_top[n] = top
    with np.errstate(divide="ignore", invalid="ignore"):
        for n in TOP_NS:
            out[f"top_{n}gram"][owners] = np.where(total_chars > 0, out_top[n] / total_chars, 0.0)
        out[f"dup_{DUP_N}gram"][owners] = np.where(total_chars > 0, dup_cover / total_chars, 0.0)
    out["han_units"][owners] = han_units
    return out


def ngram_scores(texts: list[str], min_units: int) -> list[dict[str, float]]:
    """top_{2,3,4}gram, dup_10gram and han_units for each text (zeros below ``min_units`` units)."""
    return rows(ngram_columns(texts, min_units)) if texts else []
