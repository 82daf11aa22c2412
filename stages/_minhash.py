"""MinHash shingles, vectorised with numpy (used by the ``minhash_dedup`` stage; signatures, bands
and candidate pairs are in ``_minhash_lsh``).

Pipeline for a batch of documents (all arrays, no per-shingle Python):

0. With ``fold_regional``: Taiwan / Hong Kong phrasings replaced by the mainland ones
   (``_regional``: OpenCC over a table of OpenCC's regional dictionaries), only in the texts
   a hashed bigram test over the batch's code points says may hold one.
1. Light simplification, one table lookup per code point (:func:`char_tables`): NFKC of the single
   character when it stays a single character (full width -> half width, compatibility
   ideographs -> unified ones), lower case, every decimal digit -> ``0``, and with ``fold_variants``
   Traditional -> Simplified per character (OpenCC ``t2s`` applied to each Han character alone),
   every punctuation mark and symbol -> one mark.
   Every code point then falls in one class: CJK (Han, kana, Hangul), word (letters and digits),
   mark (punctuation and symbols), ignored (combining marks, format characters: removed without
   splitting a word) or separator (spaces, controls).
2. Tokens -> shingles. A document is in CJK mode when its CJK characters are at least half of
   its CJK characters and word runs (maximal runs of letters and digits); one with neither has
   no token. In CJK mode every
   character but separators is a token: the text as read, character by character (punctuation,
   Latin letters and digits included); shingles are ``ngram_cjk`` consecutive tokens. Otherwise
   the tokens are the CJK characters and the word runs, and shingles ``ngram_word`` consecutive
   tokens: Latin text in word n-grams. A document with fewer than n tokens has one shingle (all
   its tokens); one without tokens has none (it is never a duplicate).
3. Shingle hash: 32 bits, never 0 (polynomial over 64-bit token hashes, splitmix64 finaliser). Duplicate
   shingles of a document are removed (sort), so its shingle set is a sorted unique uint32 array.
4. Signature and 5. bands: ``_minhash_lsh`` (:class:`~stages._minhash_lsh.MinHasher`,
   :func:`~stages._minhash_lsh.band_keys`).

Everything is a pure function of (text, parameters, seed): same input, same keys, on any machine
with the same Unicode and OpenCC tables.
"""

from __future__ import annotations

import functools
import itertools
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stages import _regional
from stages._chars import HAN_COMPATIBILITY, HAN_IDEOGRAPH_RANGES, HAN_RANGES

VARIANTS_FILE = Path(__file__).parent / "data" / "variant_characters.tsv"
U64 = np.uint64
MASK32 = U64(0xFFFFFFFF)
# Character classes after folding.
SEPARATOR, CJK, WORD, IGNORED, MARK = 0, 1, 2, 3, 4
MARK_TOKEN = ord("。")  # what every punctuation mark and symbol folds to: where one stands counts, not which
TABLE_SIZE = 0x110000
_SCANNED = 0x40000  # planes 0-3 hold every script with letters; higher planes are separators
_CJK_RANGES = (
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3100, 0x312F),  # Bopomofo
    (0x3130, 0x318F),  # Hangul compatibility Jamo
    (0x31A0, 0x31FF),  # Bopomofo ext, Katakana ext
    (0xA960, 0xA97F),  # Hangul Jamo ext A
    (0xAC00, 0xD7FF),  # Hangul syllables, Jamo ext B
    *HAN_RANGES,  # Han: radicals, ext A, unified, compatibility, ext B-H (stages._chars)
)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on a uint64 array (a bijection with good avalanche)."""
    return mix64_inplace(np.array(x, dtype=np.uint64))


def mix64_inplace(x: np.ndarray) -> np.ndarray:
    """:func:`mix64` overwriting ``x`` (a uint64 array the caller owns), which it returns."""
    with np.errstate(over="ignore"):
        x ^= x >> U64(30)
        x *= U64(0xBF58476D1CE4E5B9)
        x ^= x >> U64(27)
        x *= U64(0x94D049BB133111EB)
        x ^= x >> U64(31)
    return x


@functools.lru_cache(maxsize=1)
def _cjk_mask() -> np.ndarray:
    """bool [0x110000]: the code point is in one of _CJK_RANGES."""
    mask = np.zeros(TABLE_SIZE, dtype=bool)
    for lo, hi in _CJK_RANGES:
        mask[lo : hi + 1] = True
    return mask


@functools.lru_cache(maxsize=1)
def _variant_folded_mask() -> np.ndarray:
    """bool [0x110000]: the Han letters that t2s and the variant classes may fold
    (``_chars.HAN_IDEOGRAPH_RANGES`` but the compatibility block: NFKC already folded its
    ideographs, and the twelve unified ones there, such as U+FA11, are left as they are)."""
    mask = np.zeros(TABLE_SIZE, dtype=bool)
    for lo, hi in HAN_IDEOGRAPH_RANGES:
        mask[lo : hi + 1] = (lo, hi) != HAN_COMPATIBILITY
    return mask


def _text(cps: np.ndarray) -> str:
    """The string of the code points ``cps`` (lone surrogates included)."""
    return cps.astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")


def _code_points(text: str) -> np.ndarray:
    """int64 code point of every character of ``text`` (lone surrogates included)."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4").astype(np.int64)


def _each_alone(convert: Callable[[str], str], cps: np.ndarray, separator: str) -> np.ndarray:
    """int64 code point of ``convert(chr(c))`` for every code point ``c`` of ``cps`` taken alone,
    -1 where that is not exactly one character. One ``convert`` call on the characters joined by
    ``separator``, which must be a character ``cps`` does not hold and that no character of
    theirs combines with nor turns into (U+0000 for NFKC and lower case: a starter with no
    composition, neither cased nor case-ignorable); -1 everywhere when the result does not have
    one separator between two characters."""
    out = np.full(len(cps), -1, dtype=np.int64)
    if not len(cps):
        return out
    joined = np.full(2 * len(cps) - 1, ord(separator), dtype=np.int64)
    joined[::2] = cps
    converted = _code_points(convert(_text(joined)))
    ends = np.flatnonzero(converted == ord(separator))
    if len(ends) != len(cps) - 1:
        return out
    ends = np.append(ends, len(converted))
    starts = np.concatenate([[0], ends[:-1] + 1])
    single = ends - starts == 1
    out[single] = converted[starts[single]]
    return out


_CATEGORIES = (
    *("Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Cf", "Cn", "Co", "Cs"),
    *("Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So"),
)
_OTHER_CATEGORY = len(_CATEGORIES)  # any category not listed (its class is SEPARATOR)
_ND = _CATEGORIES.index("Nd")
_UNUSED = np.array([c in ("Cn", "Co", "Cs") for c in _CATEGORIES] + [False])  # unassigned, private, surrogate
_LETTER_OR_NUMBER = np.array([c[0] in "LN" for c in _CATEGORIES] + [False])
_MARK_OR_FORMAT = np.array([c[0] == "M" or c == "Cf" for c in _CATEGORIES] + [False])
_PUNCTUATION_OR_SYMBOL = np.array([c[0] in "PS" for c in _CATEGORIES] + [False])


def _category_codes(chars: str) -> np.ndarray:
    """uint8 index into _CATEGORIES (or _OTHER_CATEGORY) of every character of ``chars``."""
    index = {c: i for i, c in enumerate(_CATEGORIES)}
    codes = map(index.get, map(unicodedata.category, chars), itertools.repeat(_OTHER_CATEGORY))
    return np.fromiter(codes, dtype=np.uint8, count=len(chars))


@functools.lru_cache(maxsize=4)
def char_tables(fold_variants: bool) -> tuple[np.ndarray, np.ndarray]:
    """(fold, cls): uint32 [0x110000] code point -> folded code point, uint8 -> class of the
    folded code point (SEPARATOR, CJK, WORD, IGNORED, MARK). Built once per process, vectorised.

    For each assigned code point below 0x40000 that is not private use (U+0000 and the others
    fold to themselves and are separators): NFKC of the character alone when it stays one
    character, then its lower case when that is one character, then ``0`` for a decimal digit and
    MARK_TOKEN for a punctuation mark or symbol (``，`` ``,`` ``、`` ``「`` ``“`` alike).
    The class follows the category of the folded character (letter or number: CJK when in
    _CJK_RANGES, else WORD; mark or format: IGNORED; punctuation or symbol: MARK). With
    ``fold_variants`` the CJK Han
    characters then take OpenCC ``t2s``'s conversion of their folded form when it is one CJK
    character (one OpenCC call on them all, one per line), then the representative of its class
    of variant characters (:func:`variant_characters`) when it has one."""
    fold = np.arange(TABLE_SIZE, dtype=np.uint32)
    cls = np.zeros(TABLE_SIZE, dtype=np.uint8)
    category = _category_codes(_text(np.arange(_SCANNED)))
    assigned = ~_UNUSED[category]
    assigned[0] = False  # U+0000 (the separator below) folds to itself, a separator as before
    cps = np.flatnonzero(assigned)
    nfkc = _each_alone(functools.partial(unicodedata.normalize, "NFKC"), cps, "\0")
    folded = np.where(nfkc >= 0, nfkc, cps)
    lower = _each_alone(str.lower, folded, "\0")
    folded = np.where(lower >= 0, lower, folded)
    changed = np.flatnonzero(folded != cps)
    folded_category = category[cps]
    folded_category[changed] = _category_codes(_text(folded[changed]))
    folded[folded_category == _ND] = ord("0")
    folded[_PUNCTUATION_OR_SYMBOL[folded_category]] = MARK_TOKEN
    letter_or_number = _LETTER_OR_NUMBER[folded_category]
    cjk = letter_or_number & _cjk_mask()[folded]
    fold[cps] = folded
    cls[cps] = np.select(
        [cjk, letter_or_number, _MARK_OR_FORMAT[folded_category], _PUNCTUATION_OR_SYMBOL[folded_category]],
        [CJK, WORD, IGNORED, MARK],
        SEPARATOR,
    )
    if fold_variants:
        han = cps[cjk & _variant_folded_mask()[folded]]
        if len(han):
            import opencc

            converter = opencc.OpenCC("t2s")
            simplified = _each_alone(converter.convert, fold[han], "\n")
            take = simplified >= 0
            take[take] = _cjk_mask()[simplified[take]]
            fold[han[take]] = simplified[take]
            fold[han] = variant_characters()[fold[han]]
    return fold, cls


@functools.lru_cache(maxsize=1)
def variant_characters() -> np.ndarray:
    """uint32 [0x110000]: code point -> the representative of its class of variant characters
    (``stages/data/variant_characters.tsv``: Unihan kZVariant / kSemanticVariant classes, see
    bench/make_chinese_folds.py); itself when it has none."""
    table = np.arange(TABLE_SIZE, dtype=np.uint32)
    for line in VARIANTS_FILE.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            variant, rep = line.split("\t")
            table[ord(variant)] = ord(rep)
    return table


@functools.lru_cache(maxsize=4)
def _packed_table(fold_variants: bool) -> np.ndarray:
    """fold | class << 22 | regional trigger bits << 25 (``_regional.Triggers.chars`` of the
    folded character) in one uint32 table: one gather per code point instead of three."""
    fold, cls = char_tables(fold_variants)
    triggers = _regional_triggers(fold_variants).chars[fold].astype(np.uint32)
    return fold | (cls.astype(np.uint32) << np.uint32(22)) | (triggers << np.uint32(25))


@functools.lru_cache(maxsize=1)
def _cjk_token_values() -> np.ndarray:
    """uint64 [_SCANNED]: the token value of a character token (CJK, or any in CJK mode) by its
    folded code point (the splitmix64 of code point + _CJK_SALT; characters that are not
    separators fold to code points below _SCANNED), one gather per character instead of the mix
    (2 MB, shared by all batches)."""
    values = np.arange(_SCANNED, dtype=np.uint64)
    values += _CJK_SALT
    return mix64_inplace(values)


@dataclass(frozen=True)
class ShingleBatch:
    """Shingle sets of a batch of documents.

    hashes: uint32, the sorted unique shingle hashes of document 0, then document 1, ...
    offsets: int64 [docs + 1]; document i owns hashes[offsets[i]:offsets[i+1]].
    cjk: bool [docs], True when the document was shingled in CJK mode.
    """

    hashes: np.ndarray
    offsets: np.ndarray
    cjk: np.ndarray

    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def shingles(self, i: int) -> np.ndarray:
        return self.hashes[self.offsets[i] : self.offsets[i + 1]]


_P_CHAR = U64(0x9E3779B97F4A7C15)  # odd multipliers (invertible mod 2^64)
P_TOKEN = U64(0xC2B2AE3D27D4EB4F)
_WORD_SALT = U64(0x165667B19E3779F9)
_CJK_SALT = U64(0x27D4EB2F165667C5)


_POWER_TABLES: list[np.ndarray] = []


def _power_tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(P^i, P^-i) mod 2^32 for i in [0, >= n), uint32; kept for the largest batch seen (8 bytes
    per code point: 16 MB for MAX_BATCH_CHARS), grown by powers of two."""
    if not _POWER_TABLES or len(_POWER_TABLES[0]) < n:
        size = 1 << max(16, int(n - 1).bit_length())
        p = int(_P_CHAR) & 0xFFFFFFFF
        forward = (_powers(p, size) & MASK32).astype(np.uint32)
        backward = (_powers(pow(p, -1, 1 << 32), size) & MASK32).astype(np.uint32)
        _POWER_TABLES[:] = [forward, backward]
    return _POWER_TABLES[0], _POWER_TABLES[1]


def _powers(base: int, n: int) -> np.ndarray:
    """base**i mod 2^64 for i in [0, n), as uint64."""
    out = np.empty(max(n, 1), dtype=np.uint64)
    out[0] = 1
    if n > 1:
        out[1:] = U64(base)
        with np.errstate(over="ignore"):
            np.cumprod(out[1:], out=out[1:])
    return out[:n]


MAX_BATCH_CHARS = 1 << 21  # code points processed at once (~50 bytes of work space each)


def shingle_batch(
    texts: list[str],
    ngram_cjk: int = 5,
    ngram_word: int = 5,
    fold_variants: bool = True,
    fold_regional: bool = False,
) -> ShingleBatch:
    """Simplify, tokenise and shingle ``texts`` (see the module docstring); returns their shingle
    sets as sorted unique uint32 hashes. Long batches are cut into groups of documents of about
    MAX_BATCH_CHARS code points (a longer document alone), so work space stays bounded."""
    groups: list[list[str]] = [[]]
    size = 0
    for t in texts:
        if groups[-1] and size + len(t) > MAX_BATCH_CHARS:
            groups.append([])
            size = 0
        groups[-1].append(t)
        size += len(t) + 1
    if len(groups) == 1:
        return _shingle_group(texts, ngram_cjk, ngram_word, fold_variants, fold_regional)
    parts = [_shingle_group(g, ngram_cjk, ngram_word, fold_variants, fold_regional) for g in groups]
    sizes = np.concatenate([p.sizes() for p in parts])
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return ShingleBatch(
        np.concatenate([p.hashes for p in parts]), offsets, np.concatenate([p.cjk for p in parts])
    )


@functools.lru_cache(maxsize=2)
def _regional_triggers(fold_variants: bool) -> _regional.Triggers:
    return _regional.Triggers(char_tables(fold_variants)[0])


def _fold_regional(
    texts: list[str], packed: np.ndarray, lengths: np.ndarray, fold_variants: bool
) -> np.ndarray:
    """``packed`` (the batch's packed code points, each document followed by a separator) with the
    documents whose regional phrasings ``_regional`` folds replaced by their folded text;
    ``lengths`` (code points plus separator) is updated in place. Entries are looked up only
    where the triggers say one may start, and only the changed documents are looked up again."""
    cp = packed & np.uint32(0x3FFFFF)
    candidates = _regional_triggers(fold_variants).candidates(cp, (packed >> np.uint32(25)).astype(np.uint8))
    del cp
    changed = _regional.replace(texts, lengths, candidates) if len(candidates) else []
    if not changed:
        return packed
    starts = (np.cumsum(lengths) - lengths).tolist()
    joined = "\n".join([*(t for _, t in changed), ""])
    folded = _packed_table(fold_variants)[np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)]
    pieces: list[np.ndarray] = []
    at = done = 0
    for i, text in changed:
        pieces += [packed[at : starts[i]], folded[done : done + len(text) + 1]]
        at = starts[i] + int(lengths[i])
        done += len(text) + 1
        lengths[i] = len(text) + 1
    pieces.append(packed[at:])
    return np.concatenate(pieces)


def _shingle_group(
    texts: list[str], ngram_cjk: int, ngram_word: int, fold_variants: bool, fold_regional: bool
) -> ShingleBatch:
    n_docs = len(texts)
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=n_docs) + 1
    joined = "\n".join([*texts, ""])  # every document ends with a separator
    packed = _packed_table(fold_variants)[np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)]
    del joined
    if fold_regional:
        packed = _fold_regional(texts, packed, lengths, fold_variants)
    cls = ((packed >> np.uint32(22)) & np.uint32(7)).astype(np.uint8)
    cp = packed & np.uint32(0x3FFFFF)
    del packed
    keep = cls != IGNORED
    if not keep.all():
        starts = np.zeros(n_docs, dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        lengths = np.add.reduceat(keep, starts).astype(np.int64)
        cp, cls = cp[keep], cls[keep]
    doc_end = np.cumsum(lengths)  # position after each document's separator
    is_word = cls == WORD
    is_cjk = cls == CJK
    # word runs [start, stop): where the WORD class changes (the batch ends with "\n", no WORD)
    change = np.flatnonzero(is_word[1:] != is_word[:-1]) + 1
    if is_word.size and is_word[0]:
        change = np.concatenate([np.zeros(1, dtype=change.dtype), change])
    run_starts, run_stops = change[0::2], change[1::2]
    # the mode of each document: CJK characters against CJK characters and word runs
    cjk_before = np.cumsum(is_cjk, dtype=np.int64)[doc_end - 1] if cp.size else np.zeros(n_docs, np.int64)
    n_cjk = np.diff(cjk_before, prepend=0)
    n_runs = np.diff(np.searchsorted(run_starts, doc_end, side="left"), prepend=0)
    doc_cjk = (2 * n_cjk >= n_cjk + n_runs) & (n_cjk + n_runs > 0)  # no letters: no tokens at all
    char_mode = np.repeat(doc_cjk, lengths) if not doc_cjk.all() else None  # None: every document
    # tokens: in CJK mode every character but separators, else CJK characters and word runs
    if char_mode is None:
        token_at = cls != SEPARATOR
    else:
        token_at = is_cjk | ((cls != SEPARATOR) & char_mode)
        word_runs = run_starts[~char_mode[run_starts]]  # the runs of documents in word mode
        token_at[word_runs] = True
    token_pos = np.flatnonzero(token_at)
    del token_at
    values = np.empty(token_pos.size, dtype=np.uint64)
    by_char = is_cjk[token_pos] if char_mode is not None else None
    if by_char is not None:
        by_char |= char_mode[token_pos]
        values[by_char] = _cjk_token_values()[cp[token_pos[by_char]]]
    else:
        values[:] = _cjk_token_values()[cp[token_pos]]
    if char_mode is not None and len(word_runs):
        # hash of each word run: sum_i (c_i + 1) * P^(i - start) mod 2^32 over its code points, from
        # prefix sums of (c_i + 1) * P^i over the whole batch (one pass), then with the run length
        # through splitmix64
        stops = run_stops[~char_mode[run_starts]]
        with np.errstate(over="ignore"):
            forward, backward = _power_tables(cp.size)
            prefix = np.empty(cp.size + 1, dtype=np.uint32)  # prefix[i]: sum over code points < i
            prefix[0] = 0
            body = prefix[1:]
            np.add(cp, np.uint32(1), out=body)
            np.multiply(body, forward[: cp.size], out=body)
            np.cumsum(body, dtype=np.uint32, out=body)
            raw = ((prefix[stops] - prefix[word_runs]) * backward[word_runs]).astype(np.uint64)
            del prefix, body
            run_len = (stops - word_runs).astype(np.uint64)
            run_len *= _WORD_SALT
            raw ^= run_len
            assert by_char is not None
            values[~by_char] = mix64_inplace(raw)
    # tokens per document (token positions are sorted; a document ends after its separator)
    tok_end = np.searchsorted(token_pos, doc_end, side="left")
    n_tok = np.diff(tok_end, prepend=0)
    tok_doc = np.repeat(np.arange(n_docs, dtype=np.int64), n_tok)
    doc_n = np.where(doc_cjk, ngram_cjk, ngram_word).astype(np.int64)
    # shingle k spans tokens k .. k+n-1 of one document; docs shorter than n: one shingle at their start
    n_tokens = values.size
    tok_start = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(n_tok, out=tok_start[1:])
    k_last = (np.minimum(doc_n, n_tok) - 1)[tok_doc]  # offset of the last token of a shingle
    end_in_doc = tok_start[1:][tok_doc] - np.arange(n_tokens)  # tokens from k to the doc end
    valid = end_in_doc >= k_last + 1
    del end_in_doc
    # acc_k = v_k, then acc_k = acc_k * P + v_(k+m) for m = 1 .. k_last (0 past the batch's end),
    # in place: unmasked while every token takes its m-th neighbour
    acc = values.copy()
    max_n = int(max(ngram_cjk, ngram_word))
    k_min = int(k_last.min()) if n_tokens else max_n
    with np.errstate(over="ignore"):
        for m in range(1, max_n):
            use = None if m <= k_min else m <= k_last
            if use is None:
                acc *= P_TOKEN
            else:
                np.multiply(acc, P_TOKEN, out=acc, where=use)
            if m < n_tokens:
                head = acc[:-m]
                np.add(head, values[m:], out=head, where=True if use is None else use[:-m])
        shingle = mix64_inplace(acc) >> U64(32)
        shingle[shingle == 0] = 1  # 0 is a fixed point of every permutation: never a shingle hash
    # short documents: only their first token starts a shingle
    short = (n_tok < doc_n)[tok_doc]
    first_of_doc = np.zeros(n_tokens, dtype=bool)
    if n_tokens:
        first_of_doc[tok_start[:-1][n_tok > 0]] = True
    valid &= ~short | first_of_doc
    keys = (tok_doc[valid].astype(np.uint64) << U64(32)) | shingle[valid]
    keys.sort()
    if keys.size:
        distinct = np.empty(keys.size, dtype=bool)
        distinct[0] = True
        np.not_equal(keys[1:], keys[:-1], out=distinct[1:])
        keys = keys[distinct]
    key_doc = (keys >> U64(32)).astype(np.int64)
    offsets = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(np.bincount(key_doc, minlength=n_docs), out=offsets[1:])
    return ShingleBatch((keys & MASK32).astype(np.uint32), offsets, doc_cjk)


def shingle_strings(
    text: str,
    ngram_cjk: int = 5,
    ngram_word: int = 5,
    fold_variants: bool = True,
    fold_regional: bool = False,
) -> list[str]:
    """The same shingles as :func:`shingle_batch`, as strings (tokens joined by a space); slow,
    for reference implementations (datasketch in tests and benchmarks) and for reading."""
    if fold_regional:
        text = _regional.fold_regional([text])[0]
    fold, cls_table = char_tables(fold_variants)
    chars = [(chr(int(fold[ord(ch)])), int(cls_table[ord(ch)])) for ch in text]
    chars = [(c, k) for c, k in chars if k != IGNORED]
    words: list[str] = []  # CJK characters and word runs: what decides the mode
    cjk_tokens = 0
    word: list[str] = []
    for c, k in chars:
        if k == WORD:
            word.append(c)
            continue
        if word:
            words.append("".join(word))
            word = []
        if k == CJK:
            words.append(c)
            cjk_tokens += 1
    if word:
        words.append("".join(word))
    cjk_mode = bool(words) and 2 * cjk_tokens >= len(words)
    tokens = [c for c, k in chars if k != SEPARATOR] if cjk_mode else words
    if not tokens:
        return []
    n = ngram_cjk if cjk_mode else ngram_word
    if len(tokens) < n:
        return [" ".join(tokens)]
    return sorted({" ".join(tokens[i : i + n]) for i in range(len(tokens) - n + 1)})
