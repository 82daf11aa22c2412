"""Documents at rest between passes and rejected documents (zstd-compressed JSONL).

Documents that become outputs (``OUT/documents``, when the recipe has no terminal stage) are
Parquet (zstd). Between passes, where the same code writes and re-reads them once, they are
*frames* (``.frames``): per ``write`` call, an 8-byte little-endian length and a pickle (protocol
5) of the batch's columns (ids, texts, sources, metadata JSON text, token lengths and token
bytes), with no compression: several times cheaper to write and read than Parquet, and metadata
JSON text that no stage touched is passed through without being decoded. Both are read back as
batches of exactly ``batch_size`` documents (the last one shorter), in order, so stages see the
same batches whichever format sits in between.

Files are written to a temporary name and renamed on ``close()``, so a killed task never leaves a
file that looks complete.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.document import Document, Drop

FRAMES_SUFFIX = ".frames"
PARQUET_SUFFIX = ".parquet"


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("id", pa.string()),
            ("text", pa.string()),
            ("source", pa.string()),
            ("meta", pa.string()),
            ("tokens", pa.list_(pa.int32())),
        ]
    )


class DocWriter:
    """Appends documents to ``path``: Parquet (zstd, one row group per ``write`` call) when the
    name ends in ``.parquet``, else frames (see the module docstring)."""

    def __init__(self, path: Path):
        self.path = path
        self.tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.parquet = path.suffix == PARQUET_SUFFIX
        if self.parquet:
            import pyarrow.parquet as pq

            self._writer: Any = pq.ParquetWriter(self.tmp, _schema(), compression="zstd")
        else:
            self._writer = open(self.tmp, "wb")  # noqa: SIM115 (closed in close())
        self.docs = 0

    def write(self, docs: list[Document]) -> None:
        if not docs:
            return
        if self.parquet:
            self._write_parquet(docs)
        else:
            self._write_frame(docs)
        self.docs += len(docs)

    def _write_parquet(self, docs: list[Document]) -> None:
        import pyarrow as pa

        from dataprep.formats import arrow  # built from buffers: pa.table(dict) imports pandas

        columns = [
            arrow.strings([d.id for d in docs]),
            arrow.strings([d.text for d in docs]),
            arrow.strings([d.source for d in docs]),
            arrow.strings([d.meta_json() for d in docs]),
            arrow.int32_lists([None if d.tokens is None else np.asarray(d.tokens) for d in docs]),
        ]
        self._writer.write_table(pa.Table.from_arrays(columns, schema=_schema()))

    def _write_frame(self, docs: list[Document]) -> None:
        lengths: list[int] | None = None
        tokens = b""
        if any(d.tokens is not None for d in docs):
            arrays = [None if d.tokens is None else np.asarray(d.tokens, dtype="<i4") for d in docs]
            lengths = [-1 if a is None else len(a) for a in arrays]
            present = [a for a in arrays if a is not None]
            tokens = np.concatenate(present).tobytes() if present else b""
        frame = pickle.dumps(
            (
                [d.id for d in docs],
                [d.text for d in docs],
                [d.source for d in docs],
                [d.meta_json() for d in docs],
                lengths,
                tokens,
            ),
            protocol=5,
        )
        self._writer.write(len(frame).to_bytes(8, "little"))
        self._writer.write(frame)

    def close(self) -> None:
        self._writer.close()
        os.replace(self.tmp, self.path)


def _frames(path: Path) -> Iterator[list[Document]]:
    """The documents of each frame of a frames file, frame by frame."""
    with open(path, "rb") as f:
        while head := f.read(8):
            ids, texts, sources, metas, lengths, tokens = pickle.loads(f.read(int.from_bytes(head, "little")))
            if lengths is None:
                yield [Document.stored(*row) for row in zip(ids, texts, sources, metas, strict=True)]
                continue
            flat = np.frombuffer(tokens, dtype="<i4").astype(np.int32)
            ends = np.cumsum([max(n, 0) for n in lengths])
            docs = []
            for k, row in enumerate(zip(ids, texts, sources, metas, strict=True)):
                n = lengths[k]
                docs.append(Document.stored(*row, None if n < 0 else flat[ends[k] - n : ends[k]]))
            yield docs


def _parquet(path: Path, batch_size: int) -> Iterator[list[Document]]:
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    for batch in f.iter_batches(batch_size=batch_size):
        cols = batch.to_pydict()
        out = []
        for i in range(batch.num_rows):
            tokens = cols["tokens"][i]
            out.append(
                Document.stored(
                    cols["id"][i],
                    cols["text"][i],
                    cols["source"][i],
                    cols["meta"][i] or "",
                    None if tokens is None else np.asarray(tokens, dtype=np.int32),
                )
            )
        yield out


def read_docs(path: Path, batch_size: int) -> Iterator[list[Document]]:
    """Batches of exactly ``batch_size`` documents (the last one shorter) from a file written by
    :class:`DocWriter`, in order."""
    if path.suffix == PARQUET_SUFFIX:
        yield from _parquet(path, batch_size)
        return
    pending: list[Document] = []
    for docs in _frames(path):
        pending += docs
        while len(pending) >= batch_size:
            yield pending[:batch_size]
            pending = pending[batch_size:]
    if pending:
        yield pending


class RejectedWriter:
    """Rejected documents of one task, one zstd-compressed JSONL file per stage label.

    Each record: {"id", "source", "stage", "reason", "score", "detail", "text"}, plus "extra" (an
    object of structured fields, e.g. a duplicate's cluster and survivor) when the drop has any.
    """

    def __init__(self, directory: Path):
        self.directory = directory
        self._files: dict[str, Any] = {}

    def write(self, drop: Drop, stage_label: str) -> None:
        f = self._files.get(stage_label)
        if f is None:
            import zstandard

            self.directory.mkdir(parents=True, exist_ok=True)
            tmp = self.directory / f".{stage_label}.jsonl.zst.tmp{os.getpid()}"
            raw = open(tmp, "wb")  # noqa: SIM115 (closed in close())
            f = self._files[stage_label] = (tmp, raw, zstandard.ZstdCompressor(level=3).stream_writer(raw))
        record = {
            "id": drop.doc.id,
            "source": drop.doc.source,
            "stage": stage_label,
            "reason": drop.reason,
            "score": drop.score,
            "detail": drop.detail,
            "text": drop.doc.text,
        }
        if drop.extra:
            record["extra"] = drop.extra
        f[2].write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))

    def close(self) -> None:
        import zstandard

        for label, (tmp, raw, zw) in self._files.items():
            zw.flush(zstandard.FLUSH_FRAME)  # a complete frame: files concatenate into a valid stream
            raw.close()
            os.replace(tmp, self.directory / f"{label}.jsonl.zst")
        self._files.clear()


def read_rejected(path: Path) -> Iterator[dict[str, Any]]:
    import io

    import zstandard

    with open(path, "rb") as raw:
        reader = io.TextIOWrapper(
            zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True), encoding="utf-8"
        )
        for line in reader:
            yield json.loads(line)
