"""Training of the quality classifier (``dataprep train-quality``): fastText on the features of
``stages/_quality_features``, held-out figures, and the model card written next to the model.
"""

from __future__ import annotations

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

from stages import _quality_linear
from stages._quality_features import DEFAULT_MAX_CHARS, LINE_BREAK, NEGATIVE, POSITIVE, feature_lines
from stages._quality_model import load_model, score_texts

TRAIN_INSTALL = "pip install 'fasttext-wheel==0.9.2' (or: pip install 'dataprep[train]')"


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
    from dataprep.tokenizers.corpus import iter_texts

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
