"""The deterministic text sample a tokenizer trains on.

:class:`TextSample` keeps the documents with the smallest 64-bit hashes of their text until the
byte budget is reached; that is a uniform sample that depends only on the texts, not on their
order, the worker count or a seed, and holds at most the budget in memory. The tokenize stage
samples per task, writes each task's items sorted by hash (a JSON array) and merges them
(:func:`merge_sorted_samples`); the documents past the training budget are held out
(:func:`split_heldout`, :func:`heldout_budget`) to measure the trained tokenizer.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any


def heldout_budget(train_bytes: int) -> int:
    """UTF-8 bytes of text held out from training to measure the tokenizer: a quarter of the
    training sample, between 256 KiB and 1 MiB."""
    return min(max(train_bytes // 4, 1 << 18), 1 << 20)


def utf8_hash() -> Callable[[bytes], int]:
    """The sample's hash of a text's UTF-8 bytes (64-bit xxh3), as a function to keep at hand."""
    import xxhash

    return xxhash.xxh3_64_intdigest


def text_hash(text: str) -> int:
    return utf8_hash()(text.encode("utf-8"))


class TextSample:
    """Bottom-k-by-hash sample of texts bounded by ``budget`` UTF-8 bytes (plus one text).

    ``add`` texts in any order; ``texts()`` returns the kept texts sorted by hash, so the sample
    of a corpus is the same however it was split into parts (merge parts with ``merge``).
    """

    def __init__(self, budget: int):
        self.budget = budget
        self._hash = utf8_hash()
        self._heap: list[tuple[int, str, int]] = []  # (-hash, text, UTF-8 bytes): largest hash on top
        self.nbytes = 0
        self.seen_docs = 0
        self.seen_bytes = 0

    def add(self, text: str, h: int | None = None) -> None:
        data = text.encode("utf-8")
        size = len(data)
        self.seen_docs += 1
        self.seen_bytes += size
        key = -(self._hash(data) if h is None else h)
        heap = self._heap
        if self.nbytes >= self.budget and heap and key <= heap[0][0]:
            return  # hash larger than everything kept and the budget is full
        heapq.heappush(heap, (key, text, size))
        self.nbytes += size
        while self.nbytes - heap[0][2] >= self.budget and len(heap) > 1:
            self.nbytes -= heapq.heappop(heap)[2]

    def merge(self, items: Iterable[tuple[int, str]]) -> None:
        for h, text in items:
            self.add(text, h)

    def items(self) -> list[tuple[int, str]]:
        """(hash, text) sorted by hash."""
        return sorted((-k, t) for k, t, _ in self._heap)

    def texts(self) -> list[str]:
        return [t for _, t in self.items()]


def merge_sorted_samples(parts: Iterable[Iterable[Sequence[Any]]], budget: int) -> list[tuple[int, str]]:
    """The (hash, text) items a ``TextSample(budget)`` keeps after merging every part, sorted by
    hash: the shortest hash-ordered prefix of the parts' union that holds ``budget`` UTF-8 bytes
    (at least one item; everything when they hold less). Each part must be sorted by (hash, text), as
    :meth:`TextSample.items` is; parts are consumed only as far as the prefix reaches."""
    kept: list[tuple[int, str]] = []
    size = 0
    for h, text in heapq.merge(*parts):
        if kept and size >= budget:
            break
        kept.append((h, text))
        size += len(text.encode("utf-8"))
    return kept


def iter_json_array(text: str) -> Iterator[Any]:
    """The items of the JSON array ``text``, decoded one at a time (what is never asked for is
    never decoded)."""
    decoder = json.JSONDecoder()
    pos = _skip_space(text, text.index("[") + 1)
    if text.startswith("]", pos):
        return
    while True:
        item, pos = decoder.raw_decode(text, pos)
        yield item
        pos = _skip_space(text, pos)
        if text.startswith("]", pos):
            return
        if not text.startswith(",", pos):
            raise ValueError(f"malformed JSON array at character {pos}")
        pos = _skip_space(text, pos + 1)


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\n\r":
        pos += 1
    return pos


def split_heldout(items: list[tuple[int, str]], train_bytes: int) -> tuple[list[str], list[str]]:
    """(training texts, held-out texts) from hash-ordered ``items``: the first texts up to
    ``train_bytes`` UTF-8 bytes (at least one) train, the rest are held out (never trained on)."""
    train: list[str] = []
    size = 0
    for i, (_, text) in enumerate(items):
        if train and size >= train_bytes:
            return train, [t for _, t in items[i:]]
        train.append(text)
        size += len(text.encode("utf-8"))
    return train, []
