"""Loading and querying fastText models, for every stage that uses one (``lang_id``,
``quality_classifier``).

Two PyPI packages install the module ``fasttext``: ``fasttext-predict`` (a runtime dependency,
prediction only) and ``fasttext-wheel`` (with training; the ``train`` and ``dev`` extras). Only
what both provide alike is used here: ``fasttext.load_model(path)`` and the pybind object's
``f.predict(line, k, threshold, on_unicode_error)``, one line at a time (``fasttext-predict``
0.9.2.4's batch call, ``multilinePredict``, returns the labels in place of the probabilities).
"""

from __future__ import annotations

from typing import Any


def module() -> Any:
    """The ``fasttext`` module (ImportError without it), its load-time warning silenced
    (fasttext-wheel warns on every load that ``load_model``'s return type changed)."""
    import fasttext

    if getattr(getattr(fasttext, "FastText", None), "eprint", None) is not None:
        fasttext.FastText.eprint = lambda *a, **k: None
    return fasttext


def load_model(path: str) -> Any:
    """The fastText model at ``path`` (.bin or quantized .ftz); ImportError without the module."""
    return module().load_model(path)


def predict(model: Any, lines: list[str], k: int) -> list[list[tuple[float, str]]]:
    """The top ``k`` (probability, label) of every line (``k = -1``: all labels); a line must not
    hold a line break."""
    f = model.f  # the pybind object: one C++ call per line, no Python wrapper around it
    return [f.predict(line + "\n", k, 0.0, "replace") for line in lines]
