"""The quality model as one number per input row: fastText's prediction, in numpy, for a batch.

A fastText supervised model with softmax loss over two labels and no subword n-grams
(``minn = maxn = 0``, what ``dataprep train-quality`` trains) scores a line as follows (fastText
``Dictionary::getLine``, ``Model::predict``, ``SoftmaxLoss``):

- the line's tokens are its whitespace-separated words, then the end-of-line token ``</s>``;
- its input rows: the id of every token in the vocabulary (a token outside it adds no row), and
  for every run of 2..``wordNgrams`` consecutive tokens (``</s>`` included) the row
  ``nwords + h % bucket``, where ``h`` starts at the first token's hash, ``h = h * 116049371 +
  hash`` for each following one, in 64 bits from the 32-bit hashes read as signed integers;
  a token's hash is 32-bit FNV-1a over its UTF-8 bytes, each byte read as a signed char;
- hidden = the mean of those rows of the input matrix A; p = softmax(B · hidden), so with two
  labels p(hq) = sigmoid(mean of s[row]) with ``s = A · (B[hq] - B[lq])``: one float per row;
- fastText returns exp(log(p + 1e-5)), i.e. p + 1e-5 (clipped here to 1); a line without any
  row has no prediction: score 0 (an empty text still has ``</s>``, a row when in the vocabulary).

So the whole model is ``s`` (nwords + bucket floats) and the vocabulary. :class:`LinearModel`
holds them, saved as ``.npz`` (:func:`save`, :func:`load`); :func:`from_fasttext` makes one from
an unquantized fastText model (``None`` with the reason when the model is not of that kind).
:func:`score_texts` scores texts straight from :func:`stages._quality_features.tokens` with no
per-token Python: the hash of a one-character token from a table per code point, of a longer one
over its UTF-8 bytes, one character position at a time for all tokens at once (tokens longer than
``LONG_TOKEN`` characters, rare, one at a time); the vocabulary id of a one-character token from
a table per code point, of a longer one from an open-addressing table of the vocabulary's longer
words by hash, confirmed character by character (so a hash shared by two words never mixes them
up, nor makes an unknown word known); the sums per text with ``np.add.reduceat``. Scores equal
fastText's ``predict`` on the same model to float32 rounding (``tests/test_quality_linear.py``),
whatever the batches.
"""

from __future__ import annotations

import functools
import io
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stages._quality_features import DEFAULT_MAX_CHARS, NEGATIVE, POSITIVE, Tokens, tokens

FORMAT = "dataprep-quality-linear"
VERSION = 1
EOS = "</s>"
FNV_OFFSET = np.uint32(2166136261)
FNV_PRIME = np.uint32(16777619)
NGRAM_PRIME = np.uint64(116049371)
PLUS = 1e-5  # fastText's std_log adds it to every probability
LONG_TOKEN = 64  # characters; longer tokens are hashed one at a time
TABLE_SIZE = 0x110000


def _signed_byte(b: np.ndarray) -> np.ndarray:
    """uint32: the byte read as a signed char, then as uint32 (0x80..0xFF -> 0xFFFFFF80..)."""
    return np.where(b >= 0x80, b | np.uint32(0xFFFFFF00), b)


def fnv_step(h: np.ndarray, cp: np.ndarray) -> np.ndarray:
    """uint32: the FNV-1a hashes ``h`` continued over the UTF-8 bytes of code points ``cp``
    (uint32 arrays of one shape)."""
    cp = cp.astype(np.uint32, copy=False)
    if not len(cp) or cp.max() < 0x80:  # ASCII: one byte, below 0x80 (no sign to extend)
        return (h ^ cp) * FNV_PRIME
    n = 1 + (cp >= 0x80) + (cp >= 0x800) + (cp >= 0x10000)
    lead = (cp >> (6 * (n - 1)).astype(np.uint32)) | _LEAD_BITS[n - 1]
    h = (h ^ _signed_byte(lead)) * FNV_PRIME
    for k in (1, 2, 3):  # continuation bytes: byte k of an n-byte sequence
        more = n > k
        if not more.any():
            break
        shift = (6 * np.maximum(n - 1 - k, 0)).astype(np.uint32)
        byte = np.uint32(0x80) | ((cp >> shift) & np.uint32(0x3F))
        h = np.where(more, (h ^ _signed_byte(byte)) * FNV_PRIME, h)
    return h


_LEAD_BITS = np.array([0, 0xC0, 0xE0, 0xF0], dtype=np.uint32)  # of a 1..4-byte UTF-8 sequence


def fnv_str(word: str) -> int:
    """fastText's hash of ``word`` (one at a time, for long tokens and checks)."""
    h = 2166136261
    for b in word.encode("utf-8", "surrogatepass"):
        h = ((h ^ (b | 0xFFFFFF00 if b >= 0x80 else b)) * 16777619) & 0xFFFFFFFF
    return h


@functools.lru_cache(maxsize=1)
def _single_hashes() -> np.ndarray:
    """uint32 [0x110000]: fastText's hash of every one-character token."""
    cps = np.arange(TABLE_SIZE, dtype=np.uint32)
    return fnv_step(np.full(TABLE_SIZE, FNV_OFFSET, dtype=np.uint32), cps)


def token_hashes(tok: Tokens, h: np.ndarray | None = None) -> np.ndarray:
    """uint32 [T]: fastText's hash of every token (``h``: that of every token's first character,
    when the caller has it; it is overwritten)."""
    if h is None:
        h = _single_hashes()[tok.chars[tok.starts]]
    lengths = tok.lengths
    multi = np.flatnonzero(lengths > 1)
    if not len(multi):
        return h
    # longest first (a radix sort of small keys): the tokens still going at position p are a prefix
    clipped = np.minimum(lengths[multi], LONG_TOKEN + 1)
    order = multi[np.argsort((LONG_TOKEN + 1 - clipped).astype(np.uint8), kind="stable")]
    lens = lengths[order]
    going = np.cumsum(np.bincount(clipped, minlength=LONG_TOKEN + 2)[::-1])[::-1]  # [p]: length >= p
    n_long = int(going[LONG_TOKEN + 1])  # lens[:n_long] > LONG_TOKEN
    starts = tok.starts[order]
    at = starts.copy()  # the character each token is at
    hs = h[order]
    for p in range(1, LONG_TOKEN):
        end = int(going[p + 1])  # lens[:end] > p
        if end <= n_long:
            break
        pointer, seg = at[n_long:end], hs[n_long:end]
        pointer += 1
        cp = tok.chars.take(pointer)
        wide = np.flatnonzero(cp >= 0x80)
        before = seg[wide]
        np.bitwise_xor(seg, cp, out=seg)  # ASCII, the common case: one byte, no sign to extend
        np.multiply(seg, FNV_PRIME, out=seg)
        if len(wide):
            seg[wide] = fnv_step(before, cp[wide])
    for i in range(n_long):  # the few long tokens, one at a time
        s, n = int(starts[i]), int(lens[i])
        word = tok.chars[s : s + n].astype("<u4").tobytes().decode("utf-32-le")
        hs[i] = fnv_str(word)
    h[order] = hs
    return h


@dataclass
class LinearModel:
    """A two-label softmax fastText model without subwords as one float per input row.

    rows: float32 [nwords + bucket], ``A[row] · (B[positive] - B[other])``; words: the
    vocabulary (fastText's word ids are the indices); bucket, word_ngrams: fastText's;
    max_chars: characters the features were made from at training (information);
    labels: (positive, other)."""

    rows: np.ndarray
    words: list[str]
    bucket: int
    word_ngrams: int
    max_chars: int = DEFAULT_MAX_CHARS
    labels: tuple[str, str] = (POSITIVE, NEGATIVE)
    _lookup: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def nwords(self) -> int:
        return len(self.words)

    def lookup(self) -> dict[str, Any]:
        """Tables built once per model: per code point, its one-character token's hash and word
        id + 1 (0: not a word) as ``hash | (id + 1) << 32``; the longer words by hash in an
        open-addressing table, with their ids, lengths and code points; ``</s>``'s id and hash;
        the rows as float64 (words, then a 0 for "no word") and float32 (buckets)."""
        if self._lookup:
            return self._lookup
        single = np.full(TABLE_SIZE, -1, dtype=np.int64)
        lengths = np.fromiter(map(len, self.words), dtype=np.int64, count=len(self.words))
        eos = self.words.index(EOS) if EOS in self.words else -1
        is_multi = lengths > 1
        if eos >= 0:
            is_multi[eos] = False  # looked up apart: no token written from text is "</s>"
        for wid in np.flatnonzero(lengths == 1).tolist():
            single[ord(self.words[wid])] = wid
        multi_ids = np.flatnonzero(is_multi)
        text = "".join(self.words[i] for i in multi_ids.tolist())
        chars = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
        offsets = np.zeros(len(multi_ids) + 1, dtype=np.int64)
        np.cumsum(lengths[multi_ids], out=offsets[1:])
        vocab = Tokens(chars, offsets[:-1], np.zeros(1, dtype=np.int64))
        hashes = token_hashes(vocab) if len(multi_ids) else np.zeros(0, dtype=np.uint32)
        # open addressing, linear probing, at most a quarter full: slot = hash | (k + 1) << 32
        # for the k-th longer word, 0 for an empty slot
        size = 1 << max(4, (4 * len(multi_ids)).bit_length())
        slots = [0] * size
        for k, hv in enumerate(hashes.tolist()):
            at = hv & (size - 1)
            while slots[at]:
                at = (at + 1) & (size - 1)
            slots[at] = hv | (k + 1) << 32
        self._lookup = {
            "single": _single_hashes().astype(np.uint64) | ((single + 1).astype(np.uint64) << np.uint64(32)),
            "slots": np.array(slots, dtype=np.uint64),
            "ids": multi_ids,
            "starts": offsets[:-1],
            "lengths": lengths[multi_ids],
            "chars": chars,
            "eos": eos,
            "eos_hash": fnv_str(EOS),
            "eos_wide": int(_widen(np.array([fnv_str(EOS)], dtype=np.uint32))[0]),
            "word_rows": np.append(self.rows[: self.nwords].astype(np.float64), 0.0),  # [-1]: no row
            "bucket_rows": np.ascontiguousarray(self.rows[self.nwords :], dtype=np.float32),
        }
        return self._lookup


def first_chars(model: LinearModel, tok: Tokens) -> tuple[np.ndarray, np.ndarray]:
    """(uint32 hash, int64 word id or -1) of every token's first character as a token alone."""
    packed = model.lookup()["single"][tok.chars[tok.starts]]
    return packed.astype(np.uint32), (packed >> np.uint64(32)).view(np.int64) - 1


def word_ids(model: LinearModel, tok: Tokens, hashes: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """int64 [T]: fastText's vocabulary id of every token, -1 outside the vocabulary (``ids``:
    those of the tokens' first characters, from :func:`first_chars`; overwritten)."""
    t = model.lookup()
    lengths = tok.lengths
    multi = np.flatnonzero(lengths > 1)
    ids[multi] = -1
    if not len(multi) or not len(t["ids"]):
        return ids
    h, n = hashes[multi], lengths[multi]
    mask = np.uint64(len(t["slots"]) - 1)
    slot = h.astype(np.uint64) & mask
    pending = np.arange(len(multi))  # probe until the word or an empty slot (a quarter full: ~1.2 probes)
    while len(pending):
        entry = t["slots"][slot[pending]]
        occupied = entry != 0
        pending, entry = pending[occupied], entry[occupied]
        k = (entry >> np.uint64(32)).astype(np.int64) - 1
        candidate = np.flatnonzero((entry.astype(np.uint32) == h[pending]) & (t["lengths"][k] == n[pending]))
        if len(candidate):  # same hash and length: compare the characters
            tokens_at, words_at = tok.starts[multi[pending[candidate]]], t["starts"][k[candidate]]
            size = n[pending[candidate]]
            within = np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size, size)
            differ = (
                tok.chars[np.repeat(tokens_at, size) + within]
                != t["chars"][np.repeat(words_at, size) + within]
            )
            equal = (
                np.bincount(
                    np.repeat(np.arange(len(candidate)), size), weights=differ, minlength=len(candidate)
                )
                == 0
            )
            found = candidate[equal]
            ids[multi[pending[found]]] = t["ids"][k[found]]
            keep = np.ones(len(pending), dtype=bool)
            keep[found] = False
            pending = pending[keep]
        slot[pending] = (slot[pending] + np.uint64(1)) & mask
    return ids


def score_texts(model: LinearModel, texts: list[str], max_chars: int = DEFAULT_MAX_CHARS) -> np.ndarray:
    """float64 [len(texts)]: the probability of the positive label of every text, as fastText's
    ``predict`` gives it on the same model (p + 1e-5, at most 1; 0 for a text without any row)."""
    if not texts:
        return np.zeros(0)
    t = model.lookup()
    tok = tokens(texts, max_chars)
    n_tok = len(tok.starts)
    first_hash, first_id = first_chars(model, tok)
    hashes = token_hashes(tok, first_hash)
    ids = word_ids(model, tok, hashes, first_id)
    values = t["word_rows"][ids]  # 0 outside the vocabulary
    in_vocab = ids >= 0
    if model.word_ngrams == 2:  # every token with the next one, or with "</s>" after a text's last
        wide = _widen(hashes)
        following = np.empty(n_tok, dtype=np.uint64)
        following[:-1] = wide[1:]
        present = tok.counts > 0
        following[tok.first[present] + tok.counts[present] - 1] = np.uint64(t["eos_wide"])
        wide *= NGRAM_PRIME
        wide += following
        values += t["bucket_rows"][_bucket(wide, model.bucket)]
        rows = tok.counts + _per_doc(tok, in_vocab.astype(np.int32))
    elif model.word_ngrams > 2:
        values, extra = _longer_ngrams(model, tok, hashes, values)
        rows = _per_doc(tok, in_vocab + extra)
    else:
        rows = _per_doc(tok, in_vocab.astype(np.int64))
    total = _per_doc(tok, values)
    if t["eos"] >= 0:
        total += t["word_rows"][t["eos"]]
        rows += 1
    mean = total / np.maximum(rows, 1)
    score = np.minimum(1.0 / (1.0 + np.exp(-mean)) + PLUS, 1.0)
    return np.where(rows > 0, score, 0.0)


def _per_doc(tok: Tokens, values: np.ndarray) -> np.ndarray:
    """The sum of ``values`` (one per token) over every text's tokens (0 for a text without)."""
    padded = np.append(values, values.dtype.type(0))  # a text without tokens sums the 0 here
    sums = np.add.reduceat(padded, np.minimum(tok.first, len(values)))
    return np.where(tok.counts > 0, sums, 0)


def _widen(h: np.ndarray) -> np.ndarray:
    """uint64: 32-bit hashes read as int32 and widened (fastText's int32 -> uint64)."""
    return h.view(np.int32).astype(np.int64).view(np.uint64)


def _bucket(h: np.ndarray, bucket: int) -> np.ndarray:
    """int64: ``h % bucket`` of uint64 n-gram hashes."""
    if bucket & (bucket - 1) == 0:
        return (h & np.uint64(bucket - 1)).view(np.int64)
    return (h % np.uint64(bucket)).view(np.int64)


def _longer_ngrams(
    model: LinearModel, tok: Tokens, hashes: np.ndarray, values: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(``values`` with the rows of the n-grams of 2..word_ngrams tokens starting at every token
    added, int64 how many such n-grams start there): a text's tokens are followed by "</s>"."""
    t = model.lookup()
    n_docs, n_tok = tok.n_docs, len(hashes)
    at = np.arange(n_tok) + tok.doc  # every token's place in the texts' tokens each then "</s>"
    ext = np.full(n_tok + n_docs, t["eos_hash"], dtype=np.uint32)
    ext[at] = hashes
    ext_doc = np.repeat(np.arange(n_docs), tok.counts + 1)
    wide = _widen(ext)
    h = wide[at]
    rows = np.zeros(n_tok, dtype=np.int64)
    for k in range(1, model.word_ngrams):
        nxt = np.minimum(at + k, len(ext) - 1)
        inside = (ext_doc[nxt] == tok.doc) & (at + k < len(ext))
        h = h * NGRAM_PRIME + wide[nxt]
        values = values + np.where(inside, t["bucket_rows"][_bucket(h, model.bucket)], 0.0)
        rows += inside
    return values, rows


# ---------------------------------------------------------------------------------------------
# From fastText, to and from .npz


def from_fasttext(ft: Any, max_chars: int = DEFAULT_MAX_CHARS) -> tuple[LinearModel | None, str]:
    """(the linear form of the fastText model ``ft``, "") or (None, why it has none): it needs a
    supervised softmax model over ``__label__hq`` / ``__label__lq``, no subword n-grams, not
    quantized, and fastText's training library's matrix access (fasttext-wheel)."""
    f = getattr(ft, "f", ft)
    try:
        args = f.getArgs()
        if f.isQuant():
            return None, "quantized"
        loss, kind = args.loss.name, args.model.name
        maxn, word_ngrams, bucket = int(args.maxn), int(args.wordNgrams), int(args.bucket)
        labels = list(f.getLabels("strict")[0]) if hasattr(f, "getLabels") else ft.get_labels()
        words = list(f.getVocab("strict")[0])
        a = np.array(f.getInputMatrix(), dtype=np.float32, copy=False)
        b = np.array(f.getOutputMatrix(), dtype=np.float32, copy=False)
    except (AttributeError, TypeError, ValueError, UnicodeDecodeError) as e:
        return None, f"its matrices cannot be read here ({type(e).__name__}: {e})"
    if kind != "supervised" or loss != "softmax":
        return None, f"{kind} model with {loss} loss (needs supervised, softmax)"
    if sorted(labels) != sorted([POSITIVE, NEGATIVE]):
        return None, f"labels {labels} (needs {POSITIVE} and {NEGATIVE})"
    if maxn > 0:
        return None, f"subword n-grams (maxn {maxn})"
    if word_ngrams > 1 and bucket <= 0:
        return None, "word n-grams without buckets"
    if a.shape[0] != len(words) + bucket or b.shape[0] != 2:
        return None, f"unexpected matrix shapes {a.shape}, {b.shape}"
    pos = labels.index(POSITIVE)
    direction = b[pos].astype(np.float64) - b[1 - pos].astype(np.float64)
    rows = np.empty(len(a), dtype=np.float32)
    for i in range(0, len(a), 1 << 16):  # in slices: no float64 copy of the whole matrix
        rows[i : i + (1 << 16)] = a[i : i + (1 << 16)].astype(np.float64) @ direction
    return LinearModel(rows, words, bucket, word_ngrams, max_chars), ""


def save(model: LinearModel, path: str | Path) -> None:
    """Write ``model`` at ``path`` (:func:`to_bytes`)."""
    tmp = Path(str(path) + ".tmp")
    tmp.write_bytes(to_bytes(model))
    tmp.replace(path)


def to_bytes(model: LinearModel) -> bytes:
    """``model`` as ``.npz`` (a zip of ``.npy`` arrays, readable without pickle, the same
    bytes for the same model): ``rows`` (float32 [nwords + bucket]), ``vocabulary`` (uint8: the
    words' UTF-8 joined by U+0000) and ``meta`` (a JSON string: format, version, nwords, bucket,
    word_ngrams, max_chars, labels)."""
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "nwords": model.nwords,
        "bucket": model.bucket,
        "word_ngrams": model.word_ngrams,
        "max_chars": model.max_chars,
        "labels": list(model.labels),
    }
    arrays = {
        "meta": np.array(json.dumps(meta, sort_keys=True)),
        "vocabulary": np.frombuffer("\0".join(model.words).encode("utf-8", "surrogatepass"), dtype=np.uint8),
        "rows": np.ascontiguousarray(model.rows, dtype="<f4"),
    }
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with z.open(info, "w") as f:
                np.lib.format.write_array(f, array, allow_pickle=False)
    return buf.getvalue()


def is_linear_file(path: str | Path) -> bool:
    """True when ``path`` starts like a zip archive (an ``.npz``), not like a fastText model."""
    with open(path, "rb") as f:
        return f.read(4) == b"PK\x03\x04"


def load(path: str | Path) -> LinearModel:
    """The model :func:`save` wrote (ValueError when ``path`` is not one)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            rows = z["rows"].astype(np.float32)
            vocab = z["vocabulary"].tobytes().decode("utf-8", "surrogatepass")
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as e:  # JSONDecodeError: a ValueError
        raise ValueError(f"not a {FORMAT} model: {e}") from None
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise ValueError(f"not a {FORMAT} v{VERSION} model: {meta.get('format')} {meta.get('version')}")
    words = vocab.split("\0") if meta["nwords"] else []
    if len(words) != meta["nwords"] or len(rows) != meta["nwords"] + meta["bucket"]:
        raise ValueError("inconsistent model file: vocabulary, rows and bucket disagree")
    return LinearModel(
        rows,
        words,
        int(meta["bucket"]),
        int(meta["word_ngrams"]),
        int(meta["max_chars"]),
        tuple(meta["labels"]),
    )


def convert(source: str | Path, out: str | Path, max_chars: int = DEFAULT_MAX_CHARS) -> LinearModel:
    """Write the linear form of the fastText model at ``source`` to ``out`` (``.npz``);
    ValueError when it has none."""
    from stages._fasttext import load_model as load_fasttext

    model, why = from_fasttext(load_fasttext(str(source)), max_chars)
    if model is None:
        raise ValueError(f"{source} has no linear form: {why}")
    save(model, out)
    return model


if __name__ == "__main__":  # python -m stages._quality_linear MODEL.bin OUT.npz
    import sys

    if len(sys.argv) != 3:
        sys.exit("usage: python -m stages._quality_linear MODEL.bin OUT.npz")
    try:
        converted = convert(sys.argv[1], sys.argv[2])
    except ValueError as e:
        sys.exit(f"error: {e}")
    print(f"{sys.argv[2]}: {converted.nwords:,} words, {converted.bucket:,} buckets")
