"""The quality classifier's front door: load a model file and score texts with it (used by the
``quality_classifier`` stage; features in ``stages/_quality_features``, training in
``stages/_quality_training``).

Model files: ``.npz``, the model as one float per vocabulary word and bigram bucket
(``stages/_quality_linear``, what ``train-quality`` writes by default), scored in numpy; or a
fastText ``.bin`` / ``.ftz``, scored by fastText's ``predict`` one line at a time through
``stages/_fasttext`` (what ``fasttext-predict``, a runtime dependency, and ``fasttext-wheel``,
training, the ``train`` extra, both provide under the module name ``fasttext``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from stages import _quality_linear
from stages._quality_features import DEFAULT_MAX_CHARS, POSITIVE, feature_lines


def load_model(path: str | Path) -> Any:
    """The model at ``path``: a :class:`stages._quality_linear.LinearModel` for an ``.npz``,
    else the fastText model (a .bin or quantized .ftz)."""
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
    if isinstance(model, _quality_linear.LinearModel):
        return _quality_linear.score_texts(model, texts, max_chars)
    return predict_scores(model, feature_lines(texts, max_chars))
