"""The ``megatron`` shard format: the layout of Megatron-LM's tools/preprocess_data.py, one
``.bin`` + ``.idx`` pair per split, shards/megatron/<split>_text_document.{bin,idx}, for
Megatron-LM's ``GPTDataset`` (``--data-path .../train_text_document``).

Unlike the packed formats it holds documents, not rows: ONE SEQUENCE PER KEPT DOCUMENT, its tokens
followed by one EOS (``--append-eod``), in the order the packer streams the split's documents
(task order; with ``sources:``, the mix's seeded order of copies), so ``document_indices`` is
0, 1, ..., N. Documents are whole: ``pack.long_docs: truncate`` and row padding concern rows
only, and a document dropped by packing (``tail_dropped``) is not written. The .idx is MMIDIDX
version 1 (:class:`dataprep.formats.idx.DocumentIdxWriter`); tokens are uint16 when
``vocab_size < 65500`` (Megatron's ``DType.optimal_dtype``), else int32; a vocabulary beyond int32
is refused. The bytes equal those of Megatron-core's ``IndexedDatasetBuilder`` given the same
token lists (tests/data/megatron/, made by bench/megatron_fixtures.py).

Everything the format does is here: its writer, how a file is read back (verify, inspect: its
sequences, not rows) and its registry entry. ``pretrain/`` does not read it (its training rows
say so); Megatron-LM does.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats.idx import CODE_OF, DTYPE_CODES, DocumentIdxWriter, read_idx
from dataprep.formats.readers_for_training import ShardError, SplitFiles
from dataprep.formats.registry import FileMeta, ShardFormat, ShardMeta, ShardWriter, register_format
from dataprep.formats.rows import DocumentBatch, RowBatch, raw
from dataprep.io import file_sha256
from dataprep.stage.params import RecipeError

SUFFIX = "_text_document.bin"  # Megatron's <prefix>_<json key>_<level>: key "text", level "document"
INDEX_SUFFIX = "_text_document.idx"
UINT16_BELOW = 65500  # Megatron's DType.optimal_dtype: uint16 when the cardinality is below this
INT32_IDS = 1 << 31  # a vocabulary of more ids than this does not fit int32


def megatron_dtype(vocab_size: int) -> str:
    """The token dtype Megatron's preprocess_data.py picks for ``vocab_size`` ids:
    ``DType.optimal_dtype(vocab_size)``, uint16 below 65500, else int32; RecipeError beyond int32."""
    if vocab_size > INT32_IDS:
        raise RecipeError(
            f"pack.writers megatron: a vocabulary of {vocab_size} ids does not fit the format's int32 "
            f"tokens (at most {INT32_IDS}); Megatron's indexed dataset has no wider token type"
        )
    return "uint16" if vocab_size < UINT16_BELOW else "int32"


class MegatronShardWriter(ShardWriter):
    """Whole documents, one sequence each with its EOS: shards/megatron/<split>_text_document.bin/.idx."""

    name = "megatron"
    takes = "documents"

    def __init__(self, out_dir: Path, meta: ShardMeta):
        super().__init__(out_dir, meta)
        self.dir = Path(out_dir) / "megatron"

    def prepare(self) -> None:
        megatron_dtype(self.meta.vocab_size)
        self.dir.mkdir(parents=True, exist_ok=True)

    def open_file(self, split: str, k: int) -> Any:
        dtype = megatron_dtype(self.meta.vocab_size)
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"{split}{SUFFIX}"
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        idx = DocumentIdxWriter(self.dir / f"{split}{INDEX_SUFFIX}", CODE_OF[dtype])
        return {
            "split": split,
            "path": path,
            "tmp": tmp,
            "file": open(tmp, "wb"),  # closed in close_file
            "dtype": np.dtype(DTYPE_CODES[CODE_OF[dtype]]).str,
            "idx": idx,
            "sha": hashlib.sha256(),
            "tokens": 0,
            "bytes": 0,
        }

    def write(self, handle: Any, docs: DocumentBatch) -> None:
        if not len(docs):
            return
        data = raw(docs.with_eos(self.meta.eos_id), handle["dtype"])
        handle["file"].write(data)
        handle["sha"].update(data)
        handle["idx"].add(docs.lengths + 1)
        handle["tokens"] += int(docs.lengths.sum()) + len(docs)
        handle["bytes"] += len(data)

    def close_file(self, handle: Any) -> dict[str, Any]:
        f = handle["file"]
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(handle["tmp"], handle["path"])
        idx = handle["idx"]
        idx.close()
        return {
            "path": f"shards/megatron/{handle['path'].name}",
            "format": "megatron",
            "split": handle["split"],
            "documents": idx.sequences,
            "tokens": handle["tokens"],
            "bytes": handle["bytes"],
            "sha256": handle["sha"].hexdigest(),
            "index": {
                "path": f"shards/megatron/{idx.path.name}",
                "bytes": idx.path.stat().st_size,
                "sha256": file_sha256(idx.path),
            },
        }


def index_path(data: Path) -> Path:
    """The .idx beside a <prefix>_text_document.bin."""
    return data.with_name(data.name[: -len(SUFFIX)] + INDEX_SUFFIX)


def read_sequences(
    data: Path, index: Path | None, block: int = 1 << 16
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(tokens int32, sizes int64) of ``block`` sequences at a time, in stored order; ValueError
    when the pair is not the one-sequence-per-document layout (sequences not back to back,
    ``document_indices`` other than 0..N, a .bin of another size than the sizes add up to)."""
    idx = read_idx(index or index_path(data))
    n = len(idx.sizes)
    itemsize = idx.dtype.itemsize
    if not np.array_equal(idx.document_indices, np.arange(n + 1)):
        raise ValueError(f"{data}: document_indices are not 0..{n} (one sequence per document)")
    if (np.asarray(idx.sizes) < 1).any():
        raise ValueError(f"{data}: a sequence of no tokens")
    ends = np.cumsum(idx.sizes, dtype=np.int64)
    starts = np.concatenate([[0], ends[:-1]])
    if not np.array_equal(idx.pointers, starts * itemsize):
        raise ValueError(f"{data}: sequence pointers are not the sequences back to back")
    total = int(ends[-1]) if n else 0
    size = data.stat().st_size
    if size != total * itemsize:
        raise ValueError(f"{data}: {size} bytes, the index describes {total * itemsize}")
    if total == 0:
        return
    tokens = np.memmap(data, dtype=idx.dtype.newbyteorder("<"), mode="r")
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        yield (
            np.asarray(tokens[int(starts[lo]) : int(ends[hi - 1])], dtype=np.int32),
            np.asarray(idx.sizes[lo:hi], dtype=np.int64),
        )


def standalone_meta(data: Path) -> FileMeta:
    """The token dtype recorded in the .idx beside ``data`` (row_length 0: no rows)."""
    return FileMeta(0, "uint16" if read_idx(index_path(data)).dtype == np.dtype(np.uint16) else "int32")


def read_file(data: Path, index: Path | None, meta: FileMeta) -> Iterator[tuple[RowBatch, np.ndarray | None]]:
    """Not rows: this format's files are read with :func:`read_sequences`."""
    raise ValueError(f"{data}: a megatron file holds documents, not rows (read its sequences)")


def training_rows(split: SplitFiles) -> Any:
    """``pretrain/`` trains from the packed formats; this one is Megatron-LM's input."""
    raise ShardError(
        f"{split.out}: the megatron files are for Megatron-LM's GPTDataset, not this training loop; "
        "set train.data_format to bin or mindrecord (pack.writers must include one)"
    )


FORMAT = register_format(
    ShardFormat(
        name="megatron",
        writer=MegatronShardWriter,
        suffix=SUFFIX,
        companions=(INDEX_SUFFIX,),
        read_file=read_file,
        training_rows=training_rows,
        title="Megatron (one document per sequence)",
        light=True,
        training_preference=-1,
        standalone_meta=standalone_meta,
        read_sequences=read_sequences,
    )
)
