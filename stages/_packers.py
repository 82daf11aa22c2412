"""The packers: documents (tokens without EOS) in, rows of ``row_length`` tokens out, in stream
order (see :mod:`stages.pack` for what each packing does and how its jobs run).

* :class:`ConcatPacker` (``concat``): one EOS after each document, the stream cut into rows.
* :class:`PadPacker` (``pad``): one document per row, padded; longer ones split or truncated.
* :class:`BestFitPacker` (``bestfit``): best-fit-decreasing bin packing within a window.

Every packer counts what it did in its ``stats`` (:class:`dataprep.shards.accounting.PackStats`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from dataprep.formats.rows import RowBatch, documents_with_eos
from dataprep.shards.accounting import PackStats


@dataclass
class DocChunk:
    """Consecutive documents: flat tokens (int32, no EOS), lengths (int64), cut points per doc
    (token offsets strictly inside the document where it may be split), or None for no cuts."""

    tokens: np.ndarray
    lengths: np.ndarray
    cuts: list[np.ndarray] | None = None

    def stream(self, eos: int) -> tuple[np.ndarray, np.ndarray]:
        """(tokens with one EOS after each document, exclusive end offset of each document)."""
        return documents_with_eos(self.tokens, self.lengths, eos)


def _rows_from_pieces(pieces: list[list[np.ndarray]], row_length: int, pad: int) -> RowBatch:
    """One row per entry of ``pieces`` (the pieces in the row, in order), padded with ``pad``."""
    n = len(pieces)
    tokens = np.full((n, row_length), pad, dtype=np.int32)
    counts = np.empty(n, dtype=np.int32)
    ends: list[int] = []
    for r, row in enumerate(pieces):
        pos = 0
        for p in row:
            tokens[r, pos : pos + len(p)] = p
            pos += len(p)
            ends.append(pos)
        counts[r] = len(row)
    return RowBatch(tokens, np.asarray(ends, dtype=np.int32), counts)


def piece_ends(m: int, cuts: np.ndarray | None, row_length: int, stats: PackStats) -> list[int]:
    """End offsets of the pieces of a document of ``m`` tokens (EOS included) split to fit rows:
    at the last cut point that fits, else at the row length (a hard cut, counted)."""
    ends: list[int] = []
    pos = 0
    while m - pos > row_length:
        limit = pos + row_length
        c = -1
        if cuts is not None and len(cuts):
            k = int(np.searchsorted(cuts, limit, side="right")) - 1
            if k >= 0 and cuts[k] > pos:
                c = int(cuts[k])
        if c < 0:
            c = limit
            stats.hard_cuts += 1
        ends.append(c)
        pos = c
    ends.append(m)
    return ends


class ConcatPacker:
    """Stream documents with an EOS after each; cut every row_length tokens (vectorised)."""

    def __init__(self, row_length: int, eos: int, pad: int, tail: str):
        self.L, self.eos, self.pad, self.tail = row_length, eos, pad, tail
        self.stats = PackStats()
        self._carry = np.zeros(0, dtype=np.int32)
        self._carry_ends = np.zeros(0, dtype=np.int64)

    @property
    def carried(self) -> int:
        """Tokens held back: the start of the next row."""
        return len(self._carry)

    def take_carry(self) -> tuple[np.ndarray, np.ndarray]:
        """(tokens held back, their document ends), handed over instead of ``finish``."""
        carry, ends = self._carry, self._carry_ends
        self._carry = np.zeros(0, dtype=np.int32)
        self._carry_ends = np.zeros(0, dtype=np.int64)
        return carry, ends

    def add(self, chunk: DocChunk) -> list[RowBatch]:
        return self.add_stream(*chunk.stream(self.eos))

    def add_stream(self, stream: np.ndarray, ends: np.ndarray) -> list[RowBatch]:
        """Rows completed by ``stream`` (tokens, EOS included) with ``ends`` (exclusive end offset
        of each document within it)."""
        L = self.L
        full = np.concatenate([self._carry, stream])
        ends = np.concatenate([self._carry_ends, ends + len(self._carry)])
        n = len(full) // L
        cut = n * L
        inside = ends[ends <= cut]
        self._carry = full[cut:].copy()
        self._carry_ends = ends[ends > cut] - cut
        if n == 0:
            return []
        row_of = (inside - 1) // L
        keys = np.concatenate([row_of * (L + 1) + (inside - row_of * L), np.arange(n) * (L + 1) + L])
        keys = np.unique(keys)
        counts = np.bincount(keys // (L + 1), minlength=n)
        self.stats.rows += n
        return [RowBatch(full[:cut].reshape(n, L), keys % (L + 1), counts)]

    def finish(self) -> list[RowBatch]:
        carry, carry_ends = self.take_carry()
        if not len(carry):
            return []
        if self.tail == "drop":
            self.stats.tail_dropped += len(carry)
            self.stats.eos_dropped += len(carry_ends)
            return []
        row = np.full((1, self.L), self.pad, dtype=np.int32)
        row[0, : len(carry)] = carry
        self.stats.rows += 1
        self.stats.padding += self.L - len(carry)
        return [RowBatch(row, carry_ends, np.asarray([len(carry_ends)]))]


class PadPacker:
    """One document per row (split over rows or truncated when longer), padded."""

    def __init__(self, row_length: int, eos: int, pad: int, long_docs: str):
        self.L, self.eos, self.pad, self.long_docs = row_length, eos, pad, long_docs
        self.stats = PackStats()

    def _pieces(self, chunk: DocChunk) -> Iterator[tuple[int, np.ndarray]]:
        """(document index within the chunk, piece) for every piece of every document, in order."""
        stream, ends = chunk.stream(self.eos)
        starts = ends - (chunk.lengths + 1)
        L = self.L
        for i in range(len(chunk.lengths)):
            s, e = int(starts[i]), int(ends[i])
            m = e - s
            if m <= L:
                yield i, stream[s:e]
            elif self.long_docs == "truncate":
                self.stats.truncated_docs += 1
                self.stats.truncated_tokens += m - L
                yield i, np.concatenate([stream[s : s + L - 1], stream[e - 1 : e]])
            else:
                self.stats.split_docs += 1
                cuts = chunk.cuts[i] if chunk.cuts is not None else None
                prev = 0
                for end in piece_ends(m, cuts, L, self.stats):
                    yield i, stream[s + prev : s + end]
                    prev = end

    def add(self, chunk: DocChunk) -> list[RowBatch]:
        pieces = [[p] for _, p in self._pieces(chunk)]
        if not pieces:
            return []
        batch = _rows_from_pieces(pieces, self.L, self.pad)
        self.stats.rows += len(batch)
        self.stats.padding += int(len(batch) * self.L - batch.real_tokens.sum())
        return [batch]

    def finish(self) -> list[RowBatch]:
        return []


class BestFitPacker(PadPacker):
    """Best-fit-decreasing bin packing of pieces within a bounded window."""

    def __init__(self, row_length: int, eos: int, pad: int, long_docs: str, window_rows: int):
        super().__init__(row_length, eos, pad, long_docs)
        self.window_tokens = window_rows * row_length
        self._items: list[np.ndarray] = []
        self._item_tokens = 0

    def add(self, chunk: DocChunk) -> list[RowBatch]:
        out: list[RowBatch] = []
        full: list[list[np.ndarray]] = []
        for _, piece in self._pieces(chunk):
            if len(piece) == self.L:
                full.append([piece])
                continue
            self._items.append(piece)
            self._item_tokens += len(piece)
            if self._item_tokens >= self.window_tokens:
                out += self._flush()
        if full:
            batch = _rows_from_pieces(full, self.L, self.pad)
            self.stats.rows += len(batch)
            out.insert(0, batch)
        return out

    def _flush(self) -> list[RowBatch]:
        items, self._items, self._item_tokens = self._items, [], 0
        if not items:
            return []
        L = self.L
        order = sorted(range(len(items)), key=lambda k: (-len(items[k]), k))
        bins: list[list[int]] = []
        by_free: dict[int, list[int]] = {}
        mask = 0  # bit c set <=> some open bin has exactly c free tokens
        for k in order:
            size = len(items[k])
            fits = mask >> size
            if fits:
                free = size + (fits & -fits).bit_length() - 1
                stack = by_free[free]
                b = stack.pop()
                if not stack:
                    mask &= ~(1 << free)
                bins[b].append(k)
                left = free - size
            else:
                b = len(bins)
                bins.append([k])
                left = L - size
            if left > 0:
                by_free.setdefault(left, []).append(b)
                mask |= 1 << left
        rows = [[items[k] for k in sorted(b)] for b in bins]
        batch = _rows_from_pieces(rows, L, self.pad)
        self.stats.rows += len(batch)
        self.stats.padding += int(len(batch) * L - batch.real_tokens.sum())
        return [batch]

    def finish(self) -> list[RowBatch]:
        return self._flush()


@dataclass(frozen=True)
class Packing:
    """How documents become rows (``pack``'s parameters of the same names)."""

    packing: str = "concat"
    tail: str = "pad"
    long_docs: str = "split"
    bestfit_window_rows: int = 4096

    def packer(self, row_length: int, eos: int, pad: int) -> ConcatPacker | PadPacker:
        """A new packer of this packing for rows of ``row_length`` tokens."""
        if self.packing == "concat":
            return ConcatPacker(row_length, eos, pad, self.tail)
        if self.packing == "pad":
            return PadPacker(row_length, eos, pad, self.long_docs)
        return BestFitPacker(row_length, eos, pad, self.long_docs, self.bestfit_window_rows)
