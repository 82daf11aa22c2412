"""Documents at rest between passes and rejected documents (zstd-compressed JSONL).

Documents that become outputs (``OUT/documents``: when the recipe has no terminal stage, or beside
the shards under ``output: {documents: true}``) are Parquet (zstd). Between passes, where the same
code writes and re-reads them once, they are *frames* (``.frames``): an Arrow IPC stream (schema
``id, text, source, meta, tokens``, one record batch per ``write`` call, no compression), several
times cheaper to write and read than Parquet, and metadata JSON text that no stage touched is
passed through without being decoded. Frames are data only: reading one parses Arrow buffers
against a fixed schema and never runs code from the file (they were pickles once; see
docs/architecture.md, "What a resumed run trusts"). Both are read back as batches of exactly
``batch_size`` documents (the last one shorter), in order, so stages see the same batches
whichever format sits in between.

Every file is written to a temporary name and renamed on ``close()``, so a killed task never
leaves a file that looks complete; its sha256 (``DocWriter.sha256``) goes into the task's
completion marker, and :func:`read_docs` given that digest refuses a file that does not match it
before parsing a byte (:class:`WorkMismatch`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.document import Document, Drop

FRAMES_SUFFIX = ".frames"
PARQUET_SUFFIX = ".parquet"
_IPC_END = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # the end-of-stream marker of the Arrow IPC format


class WorkMismatch(RuntimeError):
    """A file under OUT/work does not match what its completion marker records (edited, damaged,
    or left by another run); the message names the file and says what to do."""


def refused(path: Path, why: str) -> WorkMismatch:
    """The one-line error for a file of OUT/work that a run will not use."""
    return WorkMismatch(
        f"{path}: {why}; it was not written by this run as recorded (edited, damaged or foreign). "
        "Rerun with --overwrite to start over (or remove the OUT directory)"
    )


def sha256_of(path: Path) -> str:
    """The sha256 of a file, read in 8 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 23):
            h.update(block)
    return h.hexdigest()


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
            self._hash = hashlib.sha256()
            self._put(_schema().serialize())
        self.docs = 0
        self.sha256 = ""  # of the file, once closed

    def _put(self, data: Any) -> None:
        view = memoryview(data)
        self._hash.update(view)
        self._writer.write(view)

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

        self._writer.write_table(pa.Table.from_arrays(_columns(docs), schema=_schema()))

    def _write_frame(self, docs: list[Document]) -> None:
        import pyarrow as pa

        self._put(pa.RecordBatch.from_arrays(_columns(docs), schema=_schema()).serialize())

    def close(self) -> None:
        if self.parquet:
            self._writer.close()
            self.sha256 = sha256_of(self.tmp)
        else:
            self._put(_IPC_END)
            self._writer.close()
            self.sha256 = self._hash.hexdigest()
        os.replace(self.tmp, self.path)


def _columns(docs: list[Document]) -> list[Any]:
    """The Arrow arrays of :func:`_schema` for ``docs`` (built from buffers: pa.table(dict) would
    import pandas)."""
    from dataprep.formats import arrow

    return [
        arrow.strings([d.id for d in docs]),
        arrow.strings([d.text for d in docs]),
        arrow.strings([d.source for d in docs]),
        arrow.strings([d.meta_json() for d in docs]),
        arrow.int32_lists([None if d.tokens is None else np.asarray(d.tokens) for d in docs]),
    ]


def parquet_keys(path: Path) -> list[tuple[str, str]]:
    """(source, id) of every document of a Parquet documents file, in order (two columns read)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["source", "id"])
    return list(zip(table.column("source").to_pylist(), table.column("id").to_pylist(), strict=True))


def copy_parquet_kept(src: Path, dst: Path, keep: np.ndarray) -> str:
    """Copy the documents of the Parquet file ``src`` whose entry of ``keep`` (bool, one per
    document in order) is true into ``dst``, row group by row group (the same zstd settings as
    :class:`DocWriter`, so the bytes depend only on the input); returns dst's sha256."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = pq.ParquetFile(src)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp{os.getpid()}")
    start = 0
    with pq.ParquetWriter(tmp, _schema(), compression="zstd") as writer:
        for i in range(f.num_row_groups):
            group = f.read_row_group(i)
            mask = keep[start : start + group.num_rows]
            start += group.num_rows
            if mask.any():
                writer.write_table(group.filter(pa.array(mask)))
    os.replace(tmp, dst)
    return sha256_of(dst)


def _frames(path: Path, sha256: str | None) -> Iterator[list[Document]]:
    """The documents of each record batch of a frames file, batch by batch; with ``sha256``, the
    file is checked against it before anything in it is parsed."""
    import pyarrow as pa

    with pa.memory_map(str(path)) as mm:
        data = mm.read_buffer()
        if sha256 is not None and hashlib.sha256(memoryview(data)).hexdigest() != sha256:
            raise refused(path, "its sha256 differs from the one its completion marker records")
        try:
            reader = pa.ipc.open_stream(data)
            if not reader.schema.equals(_schema()):
                raise refused(path, "its columns are not those of a frames file")
            batches = list(reader)  # parsed (buffers only, no copy) before any document is yielded
        except (pa.ArrowException, OSError) as e:  # Arrow reports malformed messages as OSError
            raise refused(path, f"not a frames file ({e})") from None
        for batch in batches:
            yield _documents(batch)


def _documents(batch: Any) -> list[Document]:
    """The documents of one record batch of the frames schema."""
    ids, texts, sources, metas = (batch.column(k).to_pylist() for k in range(4))
    col = batch.column(4)
    n = len(col)
    if col.null_count == n:
        return [Document.stored(*row) for row in zip(ids, texts, sources, metas, strict=True)]
    bufs = col.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32)[col.offset : col.offset + n + 1]
    flat = np.frombuffer(bufs[3], dtype=np.int32).copy() if bufs[3] is not None else np.zeros(0, np.int32)
    if col.null_count:
        bits = np.unpackbits(np.frombuffer(bufs[0], dtype=np.uint8), bitorder="little")
        valid = bits[col.offset : col.offset + n].astype(bool).tolist()
    else:
        valid = [True] * n
    starts, ends = offsets[:-1].tolist(), offsets[1:].tolist()
    rows = zip(ids, texts, sources, metas, strict=True)
    return [
        Document.stored(*row, flat[a:b] if ok else None)
        for row, a, b, ok in zip(rows, starts, ends, valid, strict=True)
    ]


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


def read_docs(path: Path, batch_size: int, sha256: str | None = None) -> Iterator[list[Document]]:
    """Batches of exactly ``batch_size`` documents (the last one shorter) from a file written by
    :class:`DocWriter`, in order. ``sha256``: what the file must hash to (a frames file is checked
    before it is parsed, a Parquet file before its first batch); a mismatch raises
    :class:`WorkMismatch`."""
    if path.suffix == PARQUET_SUFFIX:
        if sha256 is not None and sha256_of(path) != sha256:
            raise refused(path, "its sha256 differs from the one its completion marker records")
        yield from _parquet(path, batch_size)
        return
    pending: list[Document] = []
    for docs in _frames(path, sha256):
        pending += docs
        while len(pending) >= batch_size:
            yield pending[:batch_size]
            pending = pending[batch_size:]
    if pending:
        yield pending


class _HashingFile:
    """A binary file that hashes (sha256) what is written to it."""

    def __init__(self, f: Any):
        self._f = f
        self.hash = hashlib.sha256()

    def write(self, data: Any) -> int:
        self.hash.update(data)
        return self._f.write(data)

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class RejectedWriter:
    """Rejected documents of one task, one zstd-compressed JSONL file per stage label.

    Each record: {"id", "source", "stage", "reason", "score", "detail", "text"}, plus "extra" (an
    object of structured fields, e.g. a duplicate's cluster and survivor) when the drop has any.
    """

    def __init__(self, directory: Path):
        self.directory = directory
        self._files: dict[str, Any] = {}
        self.sha256: dict[str, str] = {}  # per file name, once closed

    def write(self, drop: Drop, stage_label: str) -> None:
        f = self._files.get(stage_label)
        if f is None:
            import zstandard

            self.directory.mkdir(parents=True, exist_ok=True)
            tmp = self.directory / f".{stage_label}.jsonl.zst.tmp{os.getpid()}"
            raw = _HashingFile(open(tmp, "wb"))  # noqa: SIM115 (closed in close())
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
            self.sha256[f"{label}.jsonl.zst"] = raw.hash.hexdigest()
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
