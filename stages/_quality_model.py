"""fastText quality classifier: features, training (``dataprep train-quality``) and batch scoring
(used by the ``quality_classifier`` stage).

Features (the same at training and at scoring, no word segmenter): each text, cut to its first
``max_chars`` characters, folded one code point at a time with ``_minhash.char_tables`` (width,
case, every digit -> ``0``, Traditional -> Simplified and variant characters), then written as
space-separated tokens: every CJK character (Han, kana, Hangul) one token, every run of letters and
digits one token, every punctuation mark or symbol one token (as written: ``，`` and ``,`` differ),
every line break the token ``¶``; combining marks and format characters are removed. fastText's
word n-grams (``wordNgrams``, default 2) then give character bigrams for Chinese and word bigrams
for Latin text; fastText's subword n-grams are off (``minn = maxn = 0``).

Labels: ``__label__hq`` (positive, "quality") and ``__label__lq``; the score of a text is the
model's probability of ``hq``, in [0, 1].

Model files: ``.npz``, the model as one float per vocabulary word and bigram bucket
(``stages/_quality_linear``, what ``train-quality`` writes by default), scored in numpy; or a
fastText ``.bin`` / ``.ftz``, scored by fastText's ``predict`` one line at a time through
``stages/_fasttext`` (what ``fasttext-predict``, a runtime dependency, and ``fasttext-wheel``,
training, the ``train`` extra, both provide under the module name ``fasttext``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

POSITIVE = "__label__hq"
NEGATIVE = "__label__lq"
LINE_BREAK = "¶"
DEFAULT_MAX_CHARS = 4000
TRAIN_INSTALL = "pip install 'fasttext-wheel==0.9.2' (or: pip install 'dataprep[train]')"


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


def load_model(path: str | Path) -> Any:
    """The model at ``path``: a :class:`stages._quality_linear.LinearModel` for an ``.npz``,
    else the fastText model (a .bin or quantized .ftz)."""
    from stages import _quality_linear

    if _quality_linear.is_linear_file(path):
        return _quality_linear.load(path)
    from stages._fasttext import load_model as _load

    return _load(str(path))


def predict_scores(model: Any, lines: list[str]) -> np.ndarray:
    """float64 [len(lines)]: fastText's probability of ``__label__hq`` for every feature line."""
    from stages._fasttext import predict

    out = np.zeros(len(lines), dtype=np.float64)
    for j, pairs in enumerate(predict(model, lines, -1)):
        for q, lab in pairs:
            if lab == POSITIVE:
                out[j] = q
                break
    return np.clip(out, 0.0, 1.0)


def score_texts(model: Any, texts: list[str], max_chars: int = DEFAULT_MAX_CHARS) -> np.ndarray:
    """float64 [len(texts)]: the score of every text (numpy for a linear model, else fastText)."""
    from stages import _quality_linear

    if isinstance(model, _quality_linear.LinearModel):
        return _quality_linear.score_texts(model, texts, max_chars)
    return predict_scores(model, feature_lines(texts, max_chars))


# ---------------------------------------------------------------------------------------------
# Training


@dataclass
class TrainOptions:
    """fastText hyper-parameters of ``train-quality`` (defaults: small, fast, deterministic)."""

    epoch: int = 10
    lr: float = 0.5
    dim: int = 32
    word_ngrams: int = 2
    min_count: int = 2
    bucket: int = 1 << 19
    seed: int = 0
    max_chars: int = DEFAULT_MAX_CHARS
    cutoff: int = 100_000  # words and n-grams kept in a quantized .ftz


@dataclass
class Figures:
    """Held-out figures at the 0.5 threshold (positive class = quality)."""

    precision: float
    recall: float
    auc: float
    accuracy: float
    positives: int
    negatives: int
    per_category: dict[str, dict[str, float]] = field(default_factory=dict)


def auc_score(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC (Mann-Whitney U with average ranks for ties); 0.5 when a class is missing."""
    labels = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if not n_pos or not n_neg:
        return 0.5
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores), dtype=np.float64)
    sorted_scores = np.asarray(scores)[order]
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    avg = first + (counts - 1) / 2.0 + 1.0
    ranks[order] = np.repeat(avg, counts)
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def figures(labels: np.ndarray, scores: np.ndarray, threshold: float = 0.5) -> Figures:
    labels = np.asarray(labels, dtype=bool)
    pred = np.asarray(scores) >= threshold
    tp = int((pred & labels).sum())
    fp = int((pred & ~labels).sum())
    fn = int((~pred & labels).sum())
    return Figures(
        precision=tp / (tp + fp) if tp + fp else 0.0,
        recall=tp / (tp + fn) if tp + fn else 0.0,
        auc=auc_score(labels, scores),
        accuracy=float((pred == labels).mean()) if len(labels) else 0.0,
        positives=int(labels.sum()),
        negatives=int((~labels).sum()),
    )


def heldout_by_hash(text: str, fraction: float) -> bool:
    """True for the texts of the held-out split: sha1 of the text, read as a fraction, < fraction."""
    digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def train_model(
    train: list[tuple[str, bool]], out: Path, options: TrainOptions, work_dir: Path | None = None
) -> Any:
    """Train on (text, is_positive) pairs and save the model at ``out``; returns the loaded model.
    By the suffix of ``out``: ``.ftz`` fastText quantized (pruned to ``options.cutoff``,
    product-quantized), ``.bin`` fastText as trained, anything else (``.npz``) the linear form
    (``stages/_quality_linear``). Deterministic: one thread, ``options.seed``."""
    from stages import _quality_linear
    from stages._fasttext import module

    try:
        trainer = module().train_supervised
    except (ImportError, AttributeError):
        raise RuntimeError(
            f"training needs fastText's training library, which is not installed: {TRAIN_INSTALL}"
        ) from None
    lines = feature_lines([t for t, _ in train], options.max_chars)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        data = Path(tmp) / "train.txt"
        with data.open("w", encoding="utf-8") as f:
            for line, (_, positive) in zip(lines, train, strict=True):
                f.write(f"{POSITIVE if positive else NEGATIVE} {line}\n")
        model = trainer(
            input=str(data),
            epoch=options.epoch,
            lr=options.lr,
            dim=options.dim,
            wordNgrams=options.word_ngrams,
            minCount=options.min_count,
            minn=0,
            maxn=0,
            bucket=options.bucket,
            loss="softmax",
            thread=1,
            seed=options.seed,
            verbose=0,
        )
        if out.suffix == ".ftz":
            model.quantize(input=str(data), qnorm=True, retrain=False, cutoff=options.cutoff)
    if out.suffix in (".ftz", ".bin"):
        model.save_model(str(out))
    else:
        linear, why = _quality_linear.from_fasttext(model, options.max_chars)
        if linear is None:  # cannot happen for a model trained here
            raise RuntimeError(f"the trained model has no linear form: {why}")
        _quality_linear.save(linear, out)
    return load_model(out)


_FILE_KINDS = {
    ".npz": "File: the model's linear form (`stages/_quality_linear`: one float per vocabulary word and "
    "bigram bucket, with the vocabulary), scored in numpy a batch at a time, as fastText would score it.",
    ".bin": "File: fastText's own format, as trained (the stage converts it to the linear form).",
    ".ftz": "File: fastText's quantized format (pruned, product-quantized), scored by fastText's predict.",
}


def card_path(model_path: Path) -> Path:
    """Where the model card of ``model_path`` goes: ``<model>.card.md`` next to it."""
    return model_path.with_name(model_path.name + ".card.md")


def write_card(
    model_path: Path,
    data: dict[str, Any],
    options: TrainOptions,
    heldout: Figures,
    meaning: str = "",
    extra: str = "",
) -> Path:
    """The model card next to the model (Markdown, with the figures also as a JSON block)."""
    size = model_path.stat().st_size
    sha = hashlib.sha256(model_path.read_bytes()).hexdigest()
    lines = [
        f"# Quality model `{model_path.name}`",
        "",
        "fastText supervised classifier trained by `dataprep train-quality`; the score of a document",
        f"is the probability of `{POSITIVE}` (its first {options.max_chars} characters are read).",
        "",
        _FILE_KINDS.get(model_path.suffix, _FILE_KINDS[".npz"]),
        "",
    ]
    if meaning:
        lines += ['## What "quality" means here', "", meaning, ""]
    lines += ["## Data", ""]
    for key, value in data.items():
        lines.append(f"- {key}: {value}")
    lines += ["", "## Features and training", ""]
    lines += [
        "Text folded with `stages/_minhash.char_tables` (width, case, digits -> 0, Traditional -> "
        "Simplified), one token per CJK character, per run of letters and digits, per punctuation "
        f"mark, `{LINE_BREAK}` per line break; fastText word n-grams up to {options.word_ngrams} "
        "(character bigrams for Chinese), no subword n-grams; one thread, fixed seed.",
        "",
        f"Hyper-parameters: `{json.dumps(asdict(options), sort_keys=True)}`",
        "",
        "## Held-out figures (threshold 0.5, positive = quality)",
        "",
        "| precision | recall | AUC | accuracy | positives | negatives |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {heldout.precision:.3f} | {heldout.recall:.3f} | {heldout.auc:.3f} | {heldout.accuracy:.3f} "
        f"| {heldout.positives} | {heldout.negatives} |",
        "",
    ]
    if heldout.per_category:
        lines += ["| category | documents | kept at 0.5 | mean score |", "|---|---:|---:|---:|"]
        for cat, row in sorted(heldout.per_category.items()):
            lines.append(f"| {cat} | {int(row['docs'])} | {row['kept']:.3f} | {row['mean']:.3f} |")
        lines.append("")
    if extra:
        lines += [extra, ""]
    lines += [f"Model file: {size:,} bytes, sha256 `{sha}`.", ""]
    lines += ["```json", json.dumps({"heldout": asdict(heldout)}, indent=1, sort_keys=True), "```", ""]
    path = card_path(model_path)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def _texts(paths: list[str]) -> list[str]:
    from dataprep.formats.train_corpus import iter_texts

    return [t for t in iter_texts(paths) if t.strip()]


def train_quality_command(
    positive: list[str],
    negative: list[str],
    out: str,
    lang: str = "zh",
    heldout_fraction: float = 0.2,
    valid_positive: Iterable[str] = (),
    valid_negative: Iterable[str] = (),
    options: TrainOptions | None = None,
) -> int:
    """``dataprep train-quality``: train, print held-out precision / recall / AUC, write the card."""
    options = options or TrainOptions()
    try:
        import fasttext

        if not hasattr(fasttext, "train_supervised"):
            raise ImportError
    except ImportError:
        print(f"error: train-quality needs fastText's training library: {TRAIN_INSTALL}", file=sys.stderr)
        return 2
    pos, neg = _texts(positive), _texts(negative)
    if not pos or not neg:
        print("error: train-quality needs documents in both --positive and --negative", file=sys.stderr)
        return 2
    valid_pos, valid_neg = list(valid_positive), list(valid_negative)
    if valid_pos or valid_neg:
        train = [(t, True) for t in pos] + [(t, False) for t in neg]
        held = [(t, True) for t in _texts(valid_pos)] + [(t, False) for t in _texts(valid_neg)]
    else:
        labelled = [(t, True) for t in pos] + [(t, False) for t in neg]
        train = [x for x in labelled if not heldout_by_hash(x[0], heldout_fraction)]
        held = [x for x in labelled if heldout_by_hash(x[0], heldout_fraction)]
    out_path = Path(out)
    model = train_model(
        train, out_path, options, work_dir=out_path.parent if out_path.parent.exists() else None
    )
    labels = np.array([p for _, p in held], dtype=bool)
    scores = score_texts(model, [t for t, _ in held], options.max_chars) if held else np.zeros(0)
    fig = figures(labels, scores)
    data = {
        "positive inputs": ", ".join(positive),
        "negative inputs": ", ".join(negative),
        "language": lang,
        "training documents": f"{sum(p for _, p in train)} positive, {sum(not p for _, p in train)} negative",
        "held-out documents": f"{fig.positives} positive, {fig.negatives} negative"
        + (" (given files)" if valid_pos or valid_neg else f" (sha1 of the text < {heldout_fraction})"),
    }
    card = write_card(out_path, data, options, fig)
    print(
        f"held-out: precision {fig.precision:.3f} recall {fig.recall:.3f} AUC {fig.auc:.3f} "
        f"({fig.positives} positive, {fig.negatives} negative documents)"
    )
    print(f"model: {out_path} ({os.path.getsize(out_path):,} bytes); card: {card}")
    return 0
