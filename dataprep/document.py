"""The record that flows through every stage."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

_META_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)  # reused: dumps(**kw) builds one a call
_PLAIN = frozenset({str, int, bool, float, type(None)})  # values whose type and value fix their JSON
_META_CACHE: dict[tuple[Any, ...], str] = {}  # flat metadata -> its JSON text (bounded)
_META_CACHE_SIZE = 4096


def _meta_text(meta: dict[str, Any]) -> str:
    """``_META_ENCODER.encode(meta)``, reused for metadata equal to one encoded before. Only
    flat dicts of str keys and str / int / bool / float / None values are kept (not a float
    equal to 0, whose sign equality ignores), keyed by their items and value types, so a
    match has the very keys, types and values. Documents of one source mostly share their
    metadata: their texts are then one object, which pickle writes once per frame."""
    try:
        key = (*meta.items(), *map(type, meta.values()))
        text = _META_CACHE.get(key)
    except TypeError:  # (an unhashable value)
        return _META_ENCODER.encode(meta)
    if text is None:
        text = _META_ENCODER.encode(meta)
        if (
            all(k.__class__ is str for k in meta)
            and _PLAIN.issuperset(key[len(meta) :])
            and not any(v == 0 for v in meta.values() if v.__class__ is float)
        ):
            if len(_META_CACHE) >= _META_CACHE_SIZE:
                _META_CACHE.clear()
            _META_CACHE[key] = text
    return text


class Document:
    """One document.

    id: stable identifier, taken from the input when it has one, else ``"<file>:<line>"``.
    text: the document text (str, never bytes).
    source: where it came from (input path relative to the input root given on the command line).
    meta: free-form JSON-serialisable metadata; stages may add keys (namespaced by stage name).
    tokens: token ids (1-D int array) once a tokenizer stage has run, else None.

    A document read back from a pass's files keeps its metadata as the stored JSON text until a
    stage touches ``meta``, and :meth:`meta_json` hands that text back unchanged, so documents
    whose metadata no stage reads are never decoded nor encoded again.
    """

    __slots__ = ("_meta", "_meta_json", "id", "source", "text", "tokens")

    def __init__(
        self, id: str, text: str, source: str = "", meta: dict[str, Any] | None = None, tokens: Any = None
    ):
        self.id = id
        self.text = text
        self.source = source
        self.tokens = tokens
        self._meta: dict[str, Any] | None = {} if meta is None else meta
        self._meta_json: str | None = None

    @classmethod
    def stored(cls, id: str, text: str, source: str, meta_json: str, tokens: Any = None) -> Document:
        """A document whose metadata is the JSON text ``meta_json`` ("" for none), decoded lazily."""
        doc = cls.__new__(cls)
        doc.id, doc.text, doc.source, doc.tokens = id, text, source, tokens
        doc._meta, doc._meta_json = None, meta_json
        return doc

    @property
    def meta(self) -> dict[str, Any]:
        if self._meta is None:
            self._meta = json.loads(self._meta_json) if self._meta_json else {}
        return self._meta

    @meta.setter
    def meta(self, value: dict[str, Any]) -> None:
        self._meta, self._meta_json = value, None

    def meta_get(self, key: str, default: Any = None) -> Any:
        """``meta.get(key, default)``, without decoding stored metadata that cannot hold ``key``."""
        if self._meta is None and f'"{key}"' not in (self._meta_json or ""):
            return default
        return self.meta.get(key, default)

    def meta_json(self) -> str:
        """The metadata as stored between passes: JSON text, or "" when empty."""
        if self._meta is None:
            return self._meta_json or ""
        return _meta_text(self._meta) if self._meta else ""

    @property
    def where(self) -> str:
        """Where the document came from: ``file:line`` when its id says so (documents without an id
        of their own), else ``file (id X)``."""
        if self.source and self.id.startswith(f"{self.source}:"):
            return self.id
        return f"{self.source} (id {self.id})" if self.source else self.id

    def _key(self) -> tuple[Any, ...]:
        return (self.id, self.text, self.source, self.meta, self.tokens)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it replaces

    def __repr__(self) -> str:
        return (
            f"Document(id={self.id!r}, text={self.text!r}, source={self.source!r}, "
            f"meta={self.meta!r}, tokens={self.tokens!r})"
        )


def meta_values(docs: Sequence[Document], key: str, default: Any = None) -> list[Any]:
    """``[d.meta_get(key, default) for d in docs]``, with the stored metadata that may hold ``key``
    decoded in one ``json.loads`` call for the batch (a few times cheaper than one call per
    document); the documents themselves are left as they were (nothing decoded is kept)."""
    out = [default] * len(docs)
    needle = f'"{key}"'
    waiting: list[int] = []
    stored: list[str] = []
    for i, doc in enumerate(docs):
        if doc._meta is not None:
            out[i] = doc._meta.get(key, default)
        elif doc._meta_json and needle in doc._meta_json:
            waiting.append(i)
            stored.append(doc._meta_json)
    if stored:
        for i, meta in zip(waiting, json.loads(f"[{','.join(stored)}]"), strict=True):
            out[i] = meta.get(key, default)
    return out


def texts_within_bytes(texts: Iterable[str], max_bytes: int) -> list[str]:
    """The first ``texts`` holding up to ``max_bytes`` UTF-8 bytes in all, the one that crosses the
    budget cut there (at a character boundary); ``texts`` is consumed only that far."""
    out: list[str] = []
    size = 0
    for text in texts:
        if size >= max_bytes:
            break
        data = text.encode("utf-8")[: max_bytes - size]
        out.append(data.decode("utf-8", "ignore"))
        size += len(data)
    return out


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
