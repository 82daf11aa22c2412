"""The record that flows through every stage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Document:
    """One document.

    id: stable identifier, taken from the input when it has one, else ``"<file>:<line>"``.
    text: the document text (str, never bytes).
    source: where it came from (input path relative to the input root given on the command line).
    meta: free-form JSON-serialisable metadata; stages may add keys (namespaced by stage name).
    tokens: token ids (1-D int array) once a tokenizer stage has run, else None.
    """

    id: str
    text: str
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    tokens: Any = None


@dataclass(slots=True)
class Drop:
    """A stage's decision to remove ``doc``; it is counted under ``reason`` and written to rejected/.

    score: the statistic the decision was based on, when there is one (kept for threshold tuning).
    detail: short human-readable context (e.g. the survivor of a duplicate cluster).
    extra: optional structured, JSON-serialisable fields for rejected/ (e.g. cluster and survivor
      ids); written as the record's "extra" object when not empty.
    """

    doc: Document
    reason: str
    score: float | None = None
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
