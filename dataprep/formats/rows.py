"""A batch of packed rows with their document boundaries, as handed to shard writers.

``tokens``     int32 [n, row_length]: the rows (padding, if any, at the end of a row); uint16 is
               kept as it is (rows read back from uint16 storage), any other type becomes int32.
``seg_ends``   int32 [Σ counts]: every row's ``actual_seq_len``, concatenated: cumulative end
               offsets of the document pieces in the row; a row's last value is its number of
               real (non-pad) tokens.
``seg_counts`` int32 [n]: how many values of ``seg_ends`` belong to each row (>= 1).
``source_id``  int32 [n] or None: the source of each row (recipes with ``sources:``; the source
               of the row's first token), an index into the manifest's ``shards.sources``.

A writer of whole documents (the ``megatron`` format) is handed :class:`DocumentBatch` es instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class RowBatch:
    tokens: np.ndarray
    seg_ends: np.ndarray
    seg_counts: np.ndarray
    source_id: np.ndarray | None = None

    def __post_init__(self) -> None:
        dtype = self.tokens.dtype if self.tokens.dtype in (np.int32, np.uint16) else np.int32
        self.tokens = np.ascontiguousarray(self.tokens, dtype=dtype)
        self.seg_ends = np.ascontiguousarray(self.seg_ends, dtype=np.int32)
        self.seg_counts = np.ascontiguousarray(self.seg_counts, dtype=np.int32)
        if self.tokens.ndim != 2 or len(self.seg_counts) != len(self.tokens):
            raise ValueError("RowBatch: tokens must be [n, row_length] with one seg_count per row")
        if int(self.seg_counts.sum()) != len(self.seg_ends):
            raise ValueError("RowBatch: seg_counts do not add up to len(seg_ends)")
        if self.source_id is not None:
            self.source_id = np.ascontiguousarray(self.source_id, dtype=np.int32)
            if len(self.source_id) != len(self.tokens):
                raise ValueError("RowBatch: source_id must hold one value per row")

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def row_length(self) -> int:
        return int(self.tokens.shape[1])

    @property
    def offsets(self) -> np.ndarray:
        """int64 [n + 1]: row i's boundaries are seg_ends[offsets[i]:offsets[i + 1]]."""
        out = np.zeros(len(self.seg_counts) + 1, dtype=np.int64)
        np.cumsum(self.seg_counts, out=out[1:])
        return out

    @property
    def real_tokens(self) -> np.ndarray:
        """int64 [n]: real (non-pad) tokens per row (the last boundary of each row)."""
        if len(self) == 0:
            return np.zeros(0, dtype=np.int64)
        return self.seg_ends[self.offsets[1:] - 1].astype(np.int64)

    def boundaries(self, i: int) -> np.ndarray:
        off = self.offsets
        return self.seg_ends[off[i] : off[i + 1]]

    def loss_masks(self) -> np.ndarray:
        """int32 [n, row_length]: 1 where the token is real, 0 on padding (see formats docs)."""
        return (np.arange(self.row_length)[None, :] < self.real_tokens[:, None]).astype(np.int32)

    def select(self, index: np.ndarray) -> RowBatch:
        """Rows ``index`` (any order, int array) as a new batch."""
        index = np.asarray(index, dtype=np.int64)
        off = self.offsets
        counts = self.seg_counts[index]
        if len(index):
            starts = np.repeat(off[index], counts)
            within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
            ends = self.seg_ends[starts + within]
        else:
            ends = np.zeros(0, dtype=np.int32)
        sources = None if self.source_id is None else self.source_id[index]
        return RowBatch(self.tokens[index], ends, counts, sources)

    @staticmethod
    def concat(batches: list[RowBatch], row_length: int) -> RowBatch:
        if not batches:
            return RowBatch(np.zeros((0, row_length), np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32))
        if len(batches) == 1:
            return batches[0]
        with_sources = all(b.source_id is not None for b in batches)
        return RowBatch(
            np.concatenate([b.tokens for b in batches]),
            np.concatenate([b.seg_ends for b in batches]),
            np.concatenate([b.seg_counts for b in batches]),
            np.concatenate([b.source_id for b in batches]) if with_sources else None,  # type: ignore[misc]
        )


@dataclass
class DocumentBatch:
    """Consecutive whole documents, as handed to a shard writer that takes documents
    (``ShardWriter.takes == "documents"``): ``tokens`` int32 [Σ lengths], the documents' ids back to
    back without EOS; ``lengths`` int64 [n], tokens per document."""

    tokens: np.ndarray
    lengths: np.ndarray

    def __post_init__(self) -> None:
        self.tokens = np.ascontiguousarray(self.tokens, dtype=np.int32)
        self.lengths = np.ascontiguousarray(self.lengths, dtype=np.int64)
        if int(self.lengths.sum()) != len(self.tokens):
            raise ValueError("DocumentBatch: lengths do not add up to len(tokens)")

    def __len__(self) -> int:
        return len(self.lengths)

    def with_eos(self, eos: int) -> np.ndarray:
        """int32 [Σ lengths + n]: every document followed by ``eos``."""
        return documents_with_eos(self.tokens, self.lengths, eos)[0]


def documents_with_eos(tokens: np.ndarray, lengths: np.ndarray, eos: int) -> tuple[np.ndarray, np.ndarray]:
    """(int32 [Σ lengths + n]: the documents of ``tokens`` (back to back, ``lengths`` tokens each)
    each followed by ``eos``; int64 [n]: the exclusive end offset of each document, its EOS
    included)."""
    ends = np.cumsum(lengths + 1)
    out = np.empty(int(ends[-1]) if len(ends) else 0, dtype=np.int32)
    keep = np.ones(len(out), dtype=bool)
    keep[ends - 1] = False
    out[keep] = tokens
    out[ends - 1] = eos
    return out, ends


def raw(values: np.ndarray, dtype: str) -> memoryview:
    """The bytes of ``values`` as ``dtype`` (e.g. "<i4"), for a file's ``write`` or a hash's
    ``update``: a view without copying when they already have that type and are contiguous."""
    return memoryview(np.ascontiguousarray(values, dtype=dtype).reshape(-1).view(np.uint8))


def loss_mask_from_boundaries(actual_seq_len: np.ndarray, row_length: int) -> np.ndarray:
    """int32 [row_length]: 1 for the row's real tokens, 0 for its padding."""
    real = int(actual_seq_len[-1]) if len(actual_seq_len) else 0
    return (np.arange(row_length) < real).astype(np.int32)
