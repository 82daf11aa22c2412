"""Repetition filter (after Gopher, Rae et al. 2021), with Chinese measured on characters.

Units: every Han, kana or hangul character is one unit; a run of other letters and digits (a
Latin word, a number) is one unit. Characters of a unit: its length.

Scores (all shares in [0, 1]):
- ``dup_line_share`` / ``dup_line_char_share``: lines (of at least ``min_line_chars``
  characters) that repeat an earlier line of the document, by count and by characters. Shorter
  lines are ignored: a ci poem repeats 长相思。 by design.
- ``dup_para_share`` / ``dup_para_char_share``: the same for paragraphs (separated by a blank line).
- ``top_2gram``, ``top_3gram``, ``top_4gram``: characters covered by the most frequent unit
  n-gram (counted at every occurrence, only when it occurs at least twice) / characters of all
  units. For Chinese these are character n-grams.
- ``dup_10gram``: characters of units covered by any unit 10-gram that occurs more than once.
The n-gram scores are computed for documents of at least ``min_units`` units (0 below).
All documents of a batch are scored together with numpy (one sort per n-gram size).
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
from stages._charclass import ALNUM, HAN_MASK, classify, encode_batch
from stages._filter_base import SHARE_EDGES, CleaningFilter

TOP_NS = (2, 3, 4)
LINE_KEYS = ("dup_line_share", "dup_line_char_share", "dup_para_share", "dup_para_char_share")
DUP_N = 10
_MIX = np.uint64(0xC2B2AE3D27D4EB4F)
DOC_BITS = 20  # documents per batch < 2**20
_HASH_MUL = 0x100000001B3  # odd, so it has an inverse modulo 2**64
_HASH_INV = pow(_HASH_MUL, -1, 2**64)


def _dup_shares(pieces: list[str]) -> tuple[float, float]:
    """(share of pieces repeating an earlier one, share of their characters)."""
    seen: set[str] = set()
    dup = dup_chars = total_chars = 0
    for p in pieces:
        total_chars += len(p)
        if p in seen:
            dup += 1
            dup_chars += len(p)
        else:
            seen.add(p)
    if not pieces:
        return 0.0, 0.0
    return dup / len(pieces), (dup_chars / total_chars if total_chars else 0.0)


def line_scores(text: str, min_line_chars: int = 5) -> dict[str, float]:
    """Duplicate line and paragraph shares; lines shorter than ``min_line_chars`` are ignored."""
    lines = [s for s in (line.strip() for line in text.split("\n")) if len(s) >= min_line_chars]
    paras = [s for s in (p.strip() for p in text.split("\n\n")) if s]
    dl, dlc = _dup_shares(lines)
    dp, dpc = _dup_shares(paras) if len(paras) > 1 else (0.0, 0.0)
    return {
        "dup_line_share": dl,
        "dup_line_char_share": dlc,
        "dup_para_share": dp,
        "dup_para_char_share": dpc,
    }


def _units(texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(unit ids uint64, unit lengths, unit text index, unit is Han) for a batch, vectorised.
    A Han/kana/hangul character is one unit (id: its code point); a run of other letters and
    digits is one unit (id: a polynomial hash of its code points, top bit set)."""
    cps, starts = encode_batch(texts)
    cls = classify(cps)
    han = HAN_MASK[cls]
    kana = (
        ((cps >= 0x3040) & (cps <= 0x31FF))
        | ((cps >= 0xAC00) & (cps <= 0xD7AF))
        | ((cps >= 0x1100) & (cps <= 0x11FF))
    )
    single = han | kana
    word = (cls == ALNUM) & ~kana
    prev_word = np.concatenate([[False], word[:-1]])
    next_word = np.concatenate([word[1:], [False]])
    run_start = np.flatnonzero(word & ~prev_word)
    run_end = np.flatnonzero(word & ~next_word) + 1
    with np.errstate(over="ignore"):
        powers = np.cumprod(np.full(len(cps), _HASH_MUL, dtype=np.uint64))  # M^1 .. M^n mod 2^64
        inverse = np.cumprod(np.full(len(cps), _HASH_INV, dtype=np.uint64))  # M^-1 .. M^-n
        prefix = np.concatenate([[np.uint64(0)], np.cumsum(cps.astype(np.uint64) * powers)])
        word_ids = ((prefix[run_end] - prefix[run_start]) * inverse[run_start]) | np.uint64(1 << 63)
    # units in text order without a sort: mark unit starts, place ids/lengths at their positions
    start = single.copy()
    start[run_start] = True
    pos = np.flatnonzero(start)
    id_at = cps.astype(np.uint64)
    id_at[run_start] = word_ids
    len_at = np.ones(len(cps), dtype=np.int64)
    len_at[run_start] = run_end - run_start
    ids, lens, is_han = id_at[pos], len_at[pos], han[pos]
    doc = np.searchsorted(starts, pos, side="right") - 1
    return ids, lens, doc, is_han


def ngram_scores(texts: list[str], min_units: int) -> list[dict[str, float]]:
    """top_{2,3,4}gram, dup_10gram and han_units for each text (zeros below ``min_units`` units)."""
    zero = {**{f"top_{n}gram": 0.0 for n in TOP_NS}, f"dup_{DUP_N}gram": 0.0, "han_units": 0.0}
    results = [dict(zero) for _ in texts]
    candidates = [i for i, t in enumerate(texts) if len(t) >= min_units]
    if not candidates:
        return results
    ids, lens, doc, is_han = _units([texts[i] for i in candidates])
    per_doc = np.bincount(doc, minlength=len(candidates))
    keep_doc = per_doc >= min_units
    if not keep_doc.any():
        return results
    keep = keep_doc[doc]
    ids, lens, doc, is_han = ids[keep], lens[keep], doc[keep], is_han[keep]
    owners = [candidates[i] for i in np.flatnonzero(keep_doc)]
    ndocs = len(owners)
    doc = np.cumsum(keep_doc)[doc] - 1  # compact text index 0..ndocs-1
    han_units = np.bincount(doc, weights=is_han, minlength=ndocs) / per_doc[keep_doc]
    total_chars = np.bincount(doc, weights=lens, minlength=ndocs)
    csum = np.concatenate([[0], np.cumsum(lens)])
    out_top = {n: np.zeros(ndocs) for n in TOP_NS}
    dup_cover = np.zeros(ndocs)
    with np.errstate(over="ignore"):
        mixed = ids * _MIX + np.uint64(0x9E3779B97F4A7C15)  # spread small ids (code points)
        powers = np.cumprod(np.full(len(ids), _HASH_MUL, dtype=np.uint64))
        inv_pow = np.concatenate([[np.uint64(1)], np.cumprod(np.full(len(ids), _HASH_INV, dtype=np.uint64))])
        prefix = np.concatenate([[np.uint64(0)], np.cumsum(mixed * powers)])
        for n in (*TOP_NS, DUP_N):
            m = len(ids) - n + 1
            if m <= 0:
                continue
            g = (prefix[n : n + m] - prefix[:m]) * inv_pow[:m]  # hash of units i .. i+n-1
            pos = np.flatnonzero(doc[:m] == doc[n - 1 : n - 1 + m])
            key = (doc[pos].astype(np.uint64) << np.uint64(64 - DOC_BITS)) | (g[pos] >> np.uint64(DOC_BITS))
            order = np.argsort(key)
            skey = key[order]
            starts = np.flatnonzero(np.concatenate([[True], skey[1:] != skey[:-1]]))
            run_len = np.diff(np.concatenate([starts, [len(skey)]]))
            if n == DUP_N:
                first_pos = pos[order[np.repeat(run_len, run_len) >= 2]]
                size = len(ids) + n
                delta = np.bincount(first_pos, minlength=size) - np.bincount(first_pos + n, minlength=size)
                covered = np.cumsum(delta)[: len(ids)] > 0
                dup_cover = np.bincount(doc[covered], weights=lens[covered], minlength=ndocs)
                continue
            many = run_len >= 2
            if not many.any():
                continue
            first = pos[order[starts[many]]]
            value = run_len[many] * (csum[first + n] - csum[first])
            run_doc = doc[first]
            seg = np.flatnonzero(np.concatenate([[True], run_doc[1:] != run_doc[:-1]]))
            out_top[n][run_doc[seg]] = np.maximum.reduceat(value, seg)
    for k, i in enumerate(owners):
        tc = total_chars[k]
        r = results[i]
        r["han_units"] = float(han_units[k])
        for n in TOP_NS:
            r[f"top_{n}gram"] = float(out_top[n][k] / tc) if tc else 0.0
        r[f"dup_{DUP_N}gram"] = float(dup_cover[k] / tc) if tc else 0.0
    return results


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

    def score_batch(self, batch: list[Document]) -> list[dict[str, float]]:
        grams = ngram_scores([d.text for d in batch], self.params.min_units)
        out = []
        for doc, g in zip(batch, grams, strict=True):
            if doc.text.count("\n") + 1 >= self.params.min_lines:  # cheap bound on non-empty lines
                g.update(line_scores(doc.text, self.params.min_line_chars))
            else:
                g.update(dict.fromkeys(LINE_KEYS, 0.0))
            out.append(g)
        return out

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
