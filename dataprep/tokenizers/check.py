"""What checks a tokenizer's output compare: fastokens' ids against the tokenizers library's (the
identity check, budgets and mismatch records) and a document's decoded text against its text (the
round trip). Pure functions on ids and strings; the engines and the tokenize stage call them.
:func:`roundtrip_report` gathers the round trip's examples the tokenize stage saved per task
(``<task>.roundtrip.json``) into the manifest's ``tokenizer.roundtrip`` entry."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

CHECK_DOCS = 512  # texts encoded by both engines after loading / use_engine (no run verdict)
CHECK_BYTES = 1 << 20  # ... or fewer, once this many UTF-8 bytes were checked
RUN_CHECK_BYTES = 256 << 10  # UTF-8 bytes of a run's sample checked once (HFTokenizer.check_engine)
ROUNDTRIP_EXAMPLES = 10  # round-trip mismatches shown in the manifest, first tasks first


def first_mismatch(fast: list[np.ndarray], reference: list[np.ndarray]) -> int | None:
    """Index of the first text whose ids differ between the two engines, None when all agree."""
    return next((i for i in range(len(reference)) if not np.array_equal(fast[i], reference[i])), None)


def ids_difference(
    text: str, fast: np.ndarray, reference: np.ndarray, decode: Callable[[list[int]], str]
) -> dict[str, Any]:
    """Where fastokens' ids for ``text`` part from tokenizers': character position (``decode``:
    the reference's decoding of the ids they share), an excerpt around it and the next ids of
    each (the mismatch record of a verdict and of :func:`describe_mismatch`)."""
    k = 0
    while k < min(len(fast), len(reference)) and fast[k] == reference[k]:
        k += 1
    same = decode([int(i) for i in reference[:k]])
    position = 0
    while position < min(len(text), len(same)) and text[position] == same[position]:
        position += 1
    return {
        "position": position,
        "text": text[max(0, position - 20) : position + 20],
        "fastokens": [int(i) for i in fast[k : k + 5]],
        "tokenizers": [int(i) for i in reference[k : k + 5]],
    }


def describe_mismatch(mismatch: dict[str, Any], where: str = "a text") -> str:
    """A mismatch recorded by :func:`ids_difference`, in words."""
    m = mismatch
    return (
        f"fastokens and tokenizers give different ids at character {m['position']} of {where} "
        f"({m['text']!r}: {m['fastokens']} vs {m['tokenizers']})"
    )


def roundtrip_difference(original: str, decoded: str, context: int = 20) -> dict[str, Any] | None:
    """None when equal, else where the texts first differ and a short excerpt of each."""
    if original == decoded:
        return None
    i = 0
    n = min(len(original), len(decoded))
    while i < n and original[i] == decoded[i]:
        i += 1
    lo = max(0, i - context)
    return {
        "position": i,
        "original": original[lo : i + context],
        "decoded": decoded[lo : i + context],
        "original_chars": len(original),
        "decoded_chars": len(decoded),
    }


def roundtrip_report(examples_dir: str | None, task_ids: list[str]) -> dict[str, Any]:
    """The manifest's ``tokenizer.roundtrip`` entry: the first ROUNDTRIP_EXAMPLES mismatches
    (records of :func:`roundtrip_difference` with the document ``id``) of the files
    ``<task>.roundtrip.json`` the tokenize stage left in ``examples_dir``, in ``task_ids`` order."""
    examples: list[dict[str, Any]] = []
    if examples_dir:
        for t in task_ids:
            path = Path(examples_dir) / f"{t}.roundtrip.json"
            if path.exists() and len(examples) < ROUNDTRIP_EXAMPLES:
                examples += json.loads(path.read_text())[: ROUNDTRIP_EXAMPLES - len(examples)]
    return {"examples": examples, "note": "counts: stats.json, stage tokenize, counters roundtrip_*"}


def roundtrip_warning(report: dict[str, Any]) -> str | None:
    """The warning a run prints when :func:`roundtrip_report` found mismatches (its first one as
    the example), else None."""
    if not report["examples"]:
        return None
    ex = report["examples"][0]
    return (
        "warning: the tokenizer does not decode back to the original text on some documents "
        f"(e.g. {ex['id']}: {ex['original']!r} -> {ex['decoded']!r}); "
        "see manifest.json tokenizer.roundtrip"
    )
