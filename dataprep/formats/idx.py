"""Megatron-compatible index (.idx) for a row file (.bin).

Layout (little-endian), as Megatron's MMapIndexedDataset reads it:

    b"MMIDIDX\\x00\\x00"   9 bytes magic
    uint64  version = 1
    uint8   dtype code of the .bin tokens (4 = int32, 8 = uint16)
    uint64  S = sequence count
    uint64  D = document-index count (rows + 1)
    int32   sizes[S]             tokens per sequence
    int64   pointers[S]          byte offset of each sequence in the .bin
    int64   document_indices[D]  row r holds sequences document_indices[r] : document_indices[r + 1]

Mapping of our rows onto it: a Megatron *document* is one packed row; its *sequences* are the
document pieces inside the row, so ``cumsum(sizes[row's sequences])`` is the row's
``actual_seq_len``. Rows are stored whole in the .bin (padding included), so row r starts at
byte ``r * row_length * itemsize`` and a row's padding lies between its last sequence and the
next row. Megatron tools reading the pair see every document piece with its real tokens only;
but a piece continuing into the next row has no EOS, and Megatron's ``GPTDataset``, which
shuffles sequences, glues it to unrelated text: Megatron-LM reads the ``megatron`` format
(:mod:`dataprep.formats.megatron_shards`, one sequence per document, written with
:class:`DocumentIdxWriter`) instead.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dataprep.formats.rows import RowBatch, raw

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
DTYPE_CODES = {
    1: np.uint8,
    2: np.int8,
    3: np.int16,
    4: np.int32,
    5: np.int64,
    6: np.float64,
    7: np.float32,
    8: np.uint16,
}
CODE_OF = {"int32": 4, "uint16": 8}
HEADER_BYTES = len(MAGIC) + 8 + 1 + 8 + 8


class IdxWriter:
    """Builds the .idx of one .bin file from the row batches written to it (spilled to disk)."""

    def __init__(self, path: Path, dtype: str, row_length: int):
        self.path = Path(path)
        self.code = CODE_OF[dtype]
        self.itemsize = np.dtype(DTYPE_CODES[self.code]).itemsize
        self.row_length = row_length
        self.rows = 0
        self.sequences = 0
        tag = f"tmp{os.getpid()}"
        self._tmp = {
            k: self.path.with_name(f".{self.path.name}.{k}.{tag}") for k in ("sizes", "ptrs", "docs")
        }
        self._files = {k: open(p, "wb") for k, p in self._tmp.items()}  # noqa: SIM115 (closed in close)
        self._files["docs"].write(raw(np.zeros(1), "<i8"))

    def add(self, batch: RowBatch) -> None:
        n = len(batch)
        if n == 0:
            return
        off = batch.offsets
        ends = batch.seg_ends.astype(np.int64)
        starts = np.empty_like(ends)
        if len(ends):
            starts[1:] = ends[:-1]
            starts[off[:-1]] = 0  # each row's first piece starts at 0
        row_of = np.repeat(np.arange(self.rows, self.rows + n, dtype=np.int64), batch.seg_counts)
        pointers = (row_of * self.row_length + starts) * self.itemsize
        self._files["sizes"].write(raw(ends - starts, "<i4"))
        self._files["ptrs"].write(raw(pointers, "<i8"))
        self._files["docs"].write(raw(self.sequences + off[1:], "<i8"))
        self.rows += n
        self.sequences += int(off[-1])

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        tmp = self.path.with_name(f".{self.path.name}.tmp{os.getpid()}")
        with open(tmp, "wb") as out:
            out.write(MAGIC)
            out.write(struct.pack("<Q", VERSION))
            out.write(struct.pack("<B", self.code))
            out.write(struct.pack("<Q", self.sequences))
            out.write(struct.pack("<Q", self.rows + 1))
            for k in ("sizes", "ptrs", "docs"):
                with open(self._tmp[k], "rb") as f:
                    while block := f.read(1 << 22):
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        for p in self._tmp.values():
            p.unlink()
        os.replace(tmp, self.path)


class DocumentIdxWriter:
    """The .idx of a .bin holding one sequence per document, back to back (the layout of
    Megatron-LM's tools/preprocess_data.py and ``IndexedDatasetBuilder``): ``sizes`` as added,
    ``pointers`` their cumulative byte offsets from 0, ``document_indices`` 0, 1, ..., S. The sizes
    are spilled to disk and the rest is computed while the index is assembled: memory is flat."""

    BLOCK = 1 << 20  # sequences per block while assembling

    def __init__(self, path: Path, code: int):
        self.path = Path(path)
        self.code = code
        self.itemsize = np.dtype(DTYPE_CODES[code]).itemsize
        self.sequences = 0
        self._tmp = self.path.with_name(f".{self.path.name}.sizes.tmp{os.getpid()}")
        self._sizes = open(self._tmp, "wb")  # noqa: SIM115 (closed in close)

    def add(self, sizes: np.ndarray) -> None:
        """Sequences of ``sizes`` tokens each, in the order their tokens were written."""
        self._sizes.write(raw(sizes, "<i4"))
        self.sequences += len(sizes)

    def close(self) -> None:
        self._sizes.close()
        tmp = self.path.with_name(f".{self.path.name}.tmp{os.getpid()}")
        S = self.sequences
        with open(tmp, "wb") as out:
            out.write(MAGIC)
            out.write(struct.pack("<Q", VERSION))
            out.write(struct.pack("<B", self.code))
            out.write(struct.pack("<Q", S))
            out.write(struct.pack("<Q", S + 1))
            with open(self._tmp, "rb") as f:
                while block := f.read(4 * self.BLOCK):
                    out.write(block)
            start = 0
            with open(self._tmp, "rb") as f:
                while block := f.read(4 * self.BLOCK):
                    ends = np.cumsum(np.frombuffer(block, dtype="<i4"), dtype=np.int64)
                    out.write(raw(start + np.concatenate([[0], ends[:-1]]) * self.itemsize, "<i8"))
                    start += int(ends[-1]) * self.itemsize
            for lo in range(0, S + 1, self.BLOCK):
                out.write(raw(np.arange(lo, min(lo + self.BLOCK, S + 1), dtype=np.int64), "<i8"))
            out.flush()
            os.fsync(out.fileno())
        self._tmp.unlink()
        os.replace(tmp, self.path)


@dataclass
class Index:
    """A parsed .idx (arrays are memory-mapped)."""

    dtype: np.dtype
    sizes: np.ndarray
    pointers: np.ndarray
    document_indices: np.ndarray

    @property
    def rows(self) -> int:
        return len(self.document_indices) - 1

    def actual_seq_len(self, row: int) -> np.ndarray:
        """int32 cumulative ends of the pieces of ``row``."""
        lo, hi = int(self.document_indices[row]), int(self.document_indices[row + 1])
        return np.cumsum(self.sizes[lo:hi], dtype=np.int64).astype(np.int32)

    def row_length(self) -> int | None:
        """Tokens per row, from the pointers (None with fewer than two rows)."""
        if self.rows < 2:
            return None
        first = int(self.pointers[int(self.document_indices[1])])
        return first // self.dtype.itemsize


def read_idx(path: str | Path) -> Index:
    """Parse an .idx; ValueError naming the problem when it is not a valid index."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(HEADER_BYTES)
    if len(head) < HEADER_BYTES or head[: len(MAGIC)] != MAGIC:
        raise ValueError(f"{path}: not a Megatron index (bad magic)")
    pos = len(MAGIC)
    (version,) = struct.unpack_from("<Q", head, pos)
    (code,) = struct.unpack_from("<B", head, pos + 8)
    (seqs,) = struct.unpack_from("<Q", head, pos + 9)
    (docs,) = struct.unpack_from("<Q", head, pos + 17)
    if version != VERSION:
        raise ValueError(f"{path}: index version {version}, expected {VERSION}")
    if code not in DTYPE_CODES:
        raise ValueError(f"{path}: unknown dtype code {code}")
    expected = HEADER_BYTES + seqs * 4 + seqs * 8 + docs * 8
    if size != expected:
        raise ValueError(f"{path}: {size} bytes, expected {expected} for {seqs} sequences and {docs} indices")

    def arr(dtype: str, offset: int, count: int) -> np.ndarray:
        if count == 0:
            return np.zeros(0, dtype=dtype)
        return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=(count,))

    sizes = arr("<i4", HEADER_BYTES, seqs)
    pointers = arr("<i8", HEADER_BYTES + seqs * 4, seqs)
    document_indices = arr("<i8", HEADER_BYTES + seqs * 12, docs)
    return Index(np.dtype(DTYPE_CODES[code]), sizes, pointers, document_indices)
