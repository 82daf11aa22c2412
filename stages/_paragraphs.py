"""Paragraphs of a document and their keys: one definition for paragraph_dedup and minhash_dedup.

A document is cut into paragraphs: its lines (``unit: line``) or its blocks separated by blank
lines (``unit: paragraph``). A paragraph's key is the xxh3-128 of its text with whitespace
stripped and collapsed; paragraphs shorter than ``min_chars`` after collapsing have no key (they
are never boilerplate). :class:`BoilerplateSet` holds the keys of the paragraphs that
paragraph_dedup found in more than ``max_docs`` documents, sorted, in one ``.npy`` file read
through a memory map, and :func:`without_boilerplate` gives the text of a document minus those
paragraphs: the same text for every copy of a document, whichever copy paragraph_dedup chose to
keep the boilerplate in.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import numpy as np

from stages._keyspill import digests_to_keys

Unit = Literal["line", "paragraph"]
BLANK_LINES = re.compile(r"(\n[ \t\u3000]*\n\s*)")
KEY = np.dtype([("hi", "<u8"), ("lo", "<u8")])


def key_text(paragraph: str) -> str:
    """The paragraph as compared: whitespace stripped at both ends and collapsed to one space."""
    return " ".join(paragraph.split())


def pieces(text: str, unit: Unit) -> list[str]:
    """The document cut into paragraphs and separators, alternating (even indices: paragraphs);
    ``"".join(pieces(text, unit)) == text``."""
    if unit == "line":
        parts: list[str] = []
        for line in text.split("\n"):
            parts += [line, "\n"]
        return parts[:-1]
    return BLANK_LINES.split(text)


def paragraphs(text: str, unit: Unit) -> list[str]:
    """The paragraphs of the document (the even indices of :func:`pieces`)."""
    if unit == "line":
        return text.split("\n")
    return BLANK_LINES.split(text)[::2]


def keys(paras: list[str], min_chars: int) -> tuple[list[int], np.ndarray, np.ndarray]:
    """(indices of the paragraphs long enough to have a key, their key halves hi, lo: uint64)."""
    import xxhash

    digest = xxhash.xxh3_128_digest
    # whitespace collapsing never lengthens a paragraph: shorter ones need no key text
    long_enough = [
        (i, k) for i, p in enumerate(paras) if len(p) >= min_chars and len(k := key_text(p)) >= min_chars
    ]
    hi, lo = digests_to_keys([digest(k.encode("utf-8")) for _, k in long_enough])
    return [i for i, _ in long_enough], hi, lo


def join_kept(parts: list[str], gone: set[int]) -> str:
    """The text of ``parts`` (as from :func:`pieces`) without the paragraphs at the even indices
    ``gone``; a removed paragraph takes the separator before it along (the one after it when it
    is the first kept)."""
    kept: list[str] = []
    for j in range(0, len(parts), 2):
        if j in gone:
            continue
        if kept:
            kept.append(parts[j - 1])
        kept.append(parts[j])
    return "".join(kept)


class BoilerplateSet:
    """Sorted unique paragraph keys (``KEY`` records) in one ``.npy`` file, memory-mapped;
    membership of many keys at once by binary search."""

    def __init__(self, path: Path | str):
        path = Path(path)
        self.keys = np.load(path, mmap_mode="r") if path.stat().st_size > 128 else np.load(path)

    def __len__(self) -> int:
        return len(self.keys)

    def contains(self, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        """bool [len(hi)]: the key (hi[i], lo[i]) is in the set."""
        out = np.zeros(len(hi), dtype=bool)
        if not len(self.keys) or not len(hi):
            return out
        his = self.keys["hi"]
        start = np.searchsorted(his, hi, side="left")
        stop = np.searchsorted(his, hi, side="right")
        for k in np.flatnonzero(stop > start).tolist():  # equal high halves: compare the low ones
            out[k] = bool(np.any(self.keys["lo"][start[k] : stop[k]] == lo[k]))
        return out

    @staticmethod
    def write(path: Path, parts: list[Path]) -> int:
        """Write the concatenation of the ``.npy`` files ``parts`` (KEY arrays, each sorted, in
        ascending key ranges) as one sorted file, through a rename, holding one part in memory at
        a time; returns the number of keys."""
        import os

        sizes = [len(np.load(p, mmap_mode="r")) for p in parts]
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=KEY, shape=(sum(sizes),))
        at = 0
        for p, n in zip(parts, sizes, strict=True):
            out[at : at + n] = np.load(p, mmap_mode="r")
            at += n
        out.flush()
        del out
        os.replace(tmp, path)
        return at


def without_boilerplate(
    texts: list[str], unit: Unit, min_chars: int, boilerplate: BoilerplateSet
) -> list[str]:
    """Each text without its paragraphs whose key is in ``boilerplate`` (texts without any are
    returned as they are). One key computation for the whole batch."""
    if not len(boilerplate):
        return texts
    cut = [paragraphs(t, unit) for t in texts]
    flat = [p for paras in cut for p in paras]
    owner = np.repeat(np.arange(len(texts)), [len(p) for p in cut])
    first = np.concatenate([[0], np.cumsum([len(p) for p in cut])])
    idx, hi, lo = keys(flat, min_chars)
    hit = np.asarray(idx, dtype=np.int64)[boilerplate.contains(hi, lo)]
    if not len(hit):
        return texts
    out = list(texts)
    for d in np.unique(owner[hit]).tolist():
        mine = hit[owner[hit] == d] - first[d]
        out[d] = join_kept(pieces(texts[d], unit), {2 * int(i) for i in mine})
    return out
