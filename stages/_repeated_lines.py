"""Repeated lines and paragraphs for filter_repetition, vectorised over a batch (no stage here).

Lines and paragraphs are ranges of code points of the batch (stripped of ``str.strip``'s
whitespace), hashed in O(1) each from prefix sums (:class:`Prefix`) and grouped by (text, hash);
members of a group are compared code point by code point, so equal means equal, and a text with
a hash collision is scored one by one (``_line_shares``). With ``stages._layout``'s line kinds,
only prose lines count.
"""

from __future__ import annotations

import numpy as np

from stages._charclass import SPACE, BatchChars
from stages._layout import PROSE_LINE, layout

LINE_KEYS = ("dup_line_share", "dup_line_char_share", "dup_para_share", "dup_para_char_share")
MIX = np.uint64(0xC2B2AE3D27D4EB4F)
HASH_MUL = 0x100000001B3  # odd, so it has an inverse modulo 2**64
HASH_INV = pow(HASH_MUL, -1, 2**64)


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


class Prefix:
    """Prefix sums over ``values`` from which the hash of any range is two subtractions: the sum
    of m(c) and the sum of j * m(c) over the range's code points c (j: position in the range),
    m(c) = c * MIX + 1 (mod 2**64), so equal ranges anywhere hash equal."""

    def __init__(self, values: np.ndarray):
        self.values = values
        with np.errstate(over="ignore"):
            m = values.astype(np.uint64) * MIX + np.uint64(1)
            zero = np.zeros(1, dtype=np.uint64)
            self.s1 = np.concatenate([zero, np.cumsum(m)])
            self.s2 = np.concatenate([zero, np.cumsum(m * np.arange(len(values), dtype=np.uint64))])

    def hashes(self, first: np.ndarray, length: np.ndarray) -> np.ndarray:
        """uint64 hash of every range [first, first + length)."""
        end = first + length
        with np.errstate(over="ignore"):
            s1 = self.s1[end] - self.s1[first]
            s2 = self.s2[end] - self.s2[first] - first.astype(np.uint64) * s1
            return s1 * np.uint64(HASH_MUL) + s2 * MIX + length.astype(np.uint64)


def _distinct_pieces(
    prefix: Prefix, first: np.ndarray, length: np.ndarray, doc: np.ndarray
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
        key = prefix.hashes(first, length) + doc.astype(np.uint64) * np.uint64(HASH_INV)
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
    prefix = Prefix(cps)
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
        joined = Prefix(_gather(cps, line_first, line_len))
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
