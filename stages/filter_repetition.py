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
All documents of a batch are scored together with numpy (one sort per n-gram size); so are the
line and paragraph shares (lines and paragraphs as ranges of code points, grouped by hash and
compared code point by code point, so equal means equal).
``han_units``: share of units that are Han characters. From ``chinese_at`` on a document is
measured against the ``*_zh`` n-gram limits: a character 2-gram is about one Chinese word, so
Gopher's word limits (0.20/0.18/0.16) would drop real prose ("和平进程" four times in one sentence)
and classical poetry with refrains (诗经).

Drops: ``repeated_lines``, ``repeated_paragraphs``, ``repeated_ngrams`` (top or dup n-grams).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import numpy as np

from dataprep.document import Document
from dataprep.stage import param, register
from stages._charclass import ALNUM, HAN_MASK, SPACE, BatchChars, batch_chars, full_class_table
from stages._filter_base import SHARE_EDGES, CleaningFilter, Columns, rows
from stages._layout import PROSE_LINE, layout

TOP_NS = (2, 3, 4)
LINE_KEYS = ("dup_line_share", "dup_line_char_share", "dup_para_share", "dup_para_char_share")
DUP_N = 10
_MIX = np.uint64(0xC2B2AE3D27D4EB4F)
DOC_BITS = 20  # documents per batch < 2**20
_HASH_MUL = 0x100000001B3  # odd, so it has an inverse modulo 2**64
_HASH_INV = pow(_HASH_MUL, -1, 2**64)


def _dup_shares(pieces: list[str]) -> tuple[float, float]:
    """(share of pieces repeating an earlier one, share of their characters). Every piece but
    the first occurrence of each distinct one repeats: counted from the set of distinct pieces."""
    if not pieces:
        return 0.0, 0.0
    distinct = set(pieces)
    dup = len(pieces) - len(distinct)
    if not dup:
        return 0.0, 0.0
    total_chars = sum(map(len, pieces))
    dup_chars = total_chars - sum(map(len, distinct))
    return dup / len(pieces), (dup_chars / total_chars if total_chars else 0.0)


def _prose_pieces(text: str, kinds: np.ndarray | None) -> tuple[list[str], list[str]]:
    """(lines, paragraphs) of ``text``, stripped: with ``kinds`` (``stages._layout`` line kinds,
    one per line) only its prose lines, a paragraph being the prose lines between empty lines."""
    if kinds is None:
        return list(map(str.strip, text.split("\n"))), list(map(str.strip, text.split("\n\n")))
    lines: list[str] = []
    paras: list[str] = []
    para: list[str] = []
    for line, kind in zip(text.split("\n"), kinds.tolist(), strict=True):
        if not line:
            paras.append("\n".join(para))
            para = []
        elif kind == PROSE_LINE:
            line = line.strip()
            lines.append(line)
            para.append(line)
    paras.append("\n".join(para))
    return lines, paras


def _line_shares(
    text: str, min_line_chars: int, kinds: np.ndarray | None = None
) -> tuple[float, float, float, float]:
    """The LINE_KEYS scores of ``text``, in that order, over its prose lines (all lines when
    ``kinds`` is None)."""
    all_lines, all_paras = _prose_pieces(text, kinds)
    lines = [s for s in all_lines if len(s) >= min_line_chars]
    paras = [s for s in all_paras if s]
    dp, dpc = _dup_shares(paras) if len(paras) > 1 else (0.0, 0.0)
    return (*_dup_shares(lines), dp, dpc)


def _gather(cps: np.ndarray, first: np.ndarray, length: np.ndarray) -> np.ndarray:
    """The code points of the ranges [first, first + length) of ``cps``, concatenated."""
    total = int(length.sum())
    offsets = np.cumsum(length) - length
    return cps[np.repeat(first - offsets, length) + np.arange(total, dtype=np.int64)]


class _Prefix:
    """Prefix sums over ``values`` from which the hash of any range is two subtractions: the sum
    of m(c) and the sum of j * m(c) over the range's code points c (j: position in the range),
    m(c) = c * _MIX + 1 (mod 2**64), so equal ranges anywhere hash equal."""

    def __init__(self, values: np.ndarray):
        self.values = values
        with np.errstate(over="ignore"):
            m = values.astype(np.uint64) * _MIX + np.uint64(1)
            zero = np.zeros(1, dtype=np.uint64)
            self.s1 = np.concatenate([zero, np.cumsum(m)])
            self.s2 = np.concatenate([zero, np.cumsum(m * np.arange(len(values), dtype=np.uint64))])

    def hashes(self, first: np.ndarray, length: np.ndarray) -> np.ndarray:
        """uint64 hash of every range [first, first + length)."""
        end = first + length
        with np.errstate(over="ignore"):
            s1 = self.s1[end] - self.s1[first]
            s2 = self.s2[end] - self.s2[first] - first.astype(np.uint64) * s1
            return s1 * np.uint64(_HASH_MUL) + s2 * _MIX + length.astype(np.uint64)


def _distinct_pieces(
    prefix: _Prefix, first: np.ndarray, length: np.ndarray, doc: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(bool per piece: the first of the equal pieces of its text, sorted indices of the texts
    for which that is not known). Pieces are the ranges [first, first + length) of
    ``prefix.values``, of text ``doc``. They are grouped by a key of (text, hash) and every member
    of a group is compared with the one before it, text, length and code points; a text with a
    group whose members differ (a hash collision) is returned as not known."""
    m = len(length)
    head = np.ones(m, dtype=bool)
    none = np.zeros(0, dtype=np.int64)
    if m < 2:
        return head, none
    with np.errstate(over="ignore"):
        key = prefix.hashes(first, length) + doc.astype(np.uint64) * np.uint64(_HASH_INV)
    order = np.argsort(key)
    sk = key[order]
    pair = np.flatnonzero(sk[1:] == sk[:-1])
    if not len(pair):
        return head, none
    later, earlier = order[pair + 1], order[pair]
    head[later] = False
    size = length[later]
    differ = (doc[later] != doc[earlier]) | (size != length[earlier])
    fine = np.flatnonzero(~differ)
    values = prefix.values
    a = _gather(values, first[later[fine]], size[fine])
    b = _gather(values, first[earlier[fine]], size[fine])
    if len(a):
        mismatch = np.zeros(len(fine), dtype=bool)
        mismatch[np.repeat(np.arange(len(fine)), size[fine])[a != b]] = True
        differ[fine[mismatch]] = True
    if not differ.any():
        return head, none
    return head, np.unique(np.concatenate([doc[later[differ]], doc[earlier[differ]]]))


def _dup_share_columns(
    doc: np.ndarray, length: np.ndarray, head: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``_dup_shares`` of every text at once, from its pieces (text index, characters, first of
    the equal pieces of its text), plus the number of pieces of each text."""
    count = np.bincount(doc, minlength=n)
    share = np.zeros(n)
    char_share = np.zeros(n)
    dup = count - np.bincount(doc[head], minlength=n)
    has = dup > 0
    if not has.any():
        return share, char_share, count
    total = np.bincount(doc, weights=length, minlength=n)
    dup_chars = total - np.bincount(doc[head], weights=length[head], minlength=n)
    share[has] = dup[has] / count[has]
    chars = has & (total > 0)
    char_share[chars] = dup_chars[chars] / total[chars]
    return share, char_share, count


def line_share_columns(bc: BatchChars, min_line_chars: int) -> np.ndarray:
    """float64 [texts, 4]: the LINE_KEYS scores of every text of ``bc`` (``_line_shares`` with the
    line kinds of ``stages._layout``), vectorised: lines and paragraphs are ranges of code points
    (stripped with ``str.strip``'s whitespace), grouped with ``_distinct_pieces`` (equal means equal)."""
    cps, n = bc.cps, len(bc.texts)
    out = np.zeros((n, 4))
    if not n:
        return out
    lay = layout(bc)
    space = bc.cls == SPACE  # str.isspace
    non_space = np.flatnonzero(~space)
    # every line of every text (text.split("\n")): [start, end), end its "\n"
    end = np.flatnonzero(cps == 0x0A)
    start = np.concatenate([[0], end[:-1] + 1])
    line_doc = bc.doc[end]
    analysed = np.zeros(n, dtype=bool)
    analysed[lay.line_doc] = True
    in_analysed = analysed[line_doc]
    kind = np.full(len(end), PROSE_LINE, dtype=np.uint8)
    kind[in_analysed] = lay.line_kind

    def stripped(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(first, length) of the ranges [a, b) without leading and trailing whitespace."""
        i = np.searchsorted(non_space, a)
        j = np.searchsorted(non_space, b) - 1
        lo = non_space[np.minimum(i, len(non_space) - 1)] if len(non_space) else a
        hi = non_space[np.maximum(j, 0)] + 1 if len(non_space) else a
        length = np.where((j >= i) & (i < len(non_space)), hi - lo, 0)
        return np.where(length > 0, lo, a), length

    first, length = stripped(start, end)
    # lines: all of them (texts not analysed), or the prose ones
    take = (~in_analysed | (kind == PROSE_LINE)) & (length >= min_line_chars)
    prefix = _Prefix(cps)
    head, unknown = _distinct_pieces(prefix, first[take], length[take], line_doc[take])
    out[:, 0], out[:, 1], _ = _dup_share_columns(line_doc[take], length[take], head, n)
    # paragraphs of the texts not analysed: text.split("\n\n") stripped, non-empty ones; the
    # pieces between runs of two or more newlines (a run's odd newline is stripped away)
    newline = cps == 0x0A
    newline[bc.starts[1:] - 1] = False  # (the joining "\n")
    run = newline.copy()
    run[1:] &= ~newline[:-1]
    run_start = np.flatnonzero(run)
    stop = newline.copy()
    stop[:-1] &= ~newline[1:]
    run_end = np.flatnonzero(stop) + 1
    long_run = run_end - run_start >= 2
    seg_first = np.sort(np.concatenate([bc.starts[:-1], run_end[long_run]]))
    seg_end = np.sort(np.concatenate([bc.starts[1:] - 1, run_start[long_run]]))
    seg_doc = bc.doc[seg_first] if len(cps) else seg_first
    seg_first, seg_len = stripped(seg_first, seg_end)
    plain = (seg_len > 0) & ~analysed[seg_doc]
    para_doc, para_len = seg_doc[plain], seg_len[plain]
    head, unknown_paras = _distinct_pieces(prefix, seg_first[plain], para_len, para_doc)
    # paragraphs of the analysed texts: their prose lines between empty lines, stripped and
    # joined by "\n" (each line but a paragraph's last followed by its own "\n"), gathered
    empty = (end == start) & in_analysed
    group = np.cumsum(empty | np.concatenate([[True], line_doc[1:] != line_doc[:-1]]))
    prose = np.flatnonzero(in_analysed & (kind == PROSE_LINE))
    if len(prose):
        g = group[prose]
        last = np.concatenate([g[1:] != g[:-1], [True]])
        line_first = np.stack([first[prose], end[prose]], axis=1).ravel()
        line_len = np.stack([length[prose], (~last).astype(np.int64)], axis=1).ravel()
        heads = np.flatnonzero(np.concatenate([[True], g[1:] != g[:-1]]))
        sizes = np.add.reduceat(length[prose] + ~last, heads)
        joined = _Prefix(_gather(cps, line_first, line_len))
        docs = line_doc[prose][heads]
        joined_head, unknown_joined = _distinct_pieces(joined, np.cumsum(sizes) - sizes, sizes, docs)
        para_doc = np.concatenate([para_doc, docs])
        para_len = np.concatenate([para_len, sizes])
        head = np.concatenate([head, joined_head])
        unknown_paras = np.union1d(unknown_paras, unknown_joined)
    share, char_share, count = _dup_share_columns(para_doc, para_len, head, n)
    several = count > 1
    out[several, 2], out[several, 3] = share[several], char_share[several]
    for i in np.union1d(unknown, unknown_paras).tolist():  # hash collisions: one by one
        out[i] = _line_shares(bc.texts[i], min_line_chars, lay.kinds_of(i))
    return out


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
        powers = np.cumprod(np.full(k, _HASH_MUL, dtype=np.uint64))  # M^1 .. M^k
        inverse = np.cumprod(np.full(k, _HASH_INV, dtype=np.uint64))  # M^-1 .. M^-k
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
        return np.uint64(pow(_HASH_MUL, k, 2**64))

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
        mixed = ids * _MIX + np.uint64(0x9E3779B97F4A7C15)  # spread small ids (code points)
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
