"""The jobs that write shard files, in any process: one file of rows in every row format, from the
parts the shuffle left for it (:mod:`dataprep.shards.spool`), or one split's whole documents in a
format of documents. Writers are looked up by name in :mod:`dataprep.formats.registry` and built
in the process that runs the job."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from dataprep.formats.registry import ShardMeta, get_format
from dataprep.formats.rows import DocumentBatch
from dataprep.shards.plan import REMAINDER, TOKEN_DTYPES
from dataprep.shards.spool import read_part


@dataclass
class ShardFileJob:
    """File ``index`` of ``split``: its ``rows``, and the parts holding them in order (path, batch
    sizes), to be written by the writers of the shard formats ``writers`` into ``shard_dir``."""

    split: str
    index: int
    rows: int
    parts: list[tuple[str, list[int]]]
    writers: list[str]
    shard_dir: str
    meta: ShardMeta


def write_shard_file(job: ShardFileJob) -> list[dict[str, Any]]:
    """Write one shard file in every format (runs in any process); the manifest entry of each, in
    writer order (``"remainder": true`` on a remainder file's). The parts are read once, batch by
    batch as recorded, and left for the caller to remove (a retried job must find them)."""
    meta = job.meta
    writers = [get_format(name).writer(Path(job.shard_dir), meta) for name in job.writers]
    handles = [w.open_file(job.split, job.index) for w in writers]
    rows = 0
    dtype = TOKEN_DTYPES[meta.dtype]
    for path, batches in job.parts:
        for batch in read_part(path, batches, meta.row_length, dtype, bool(meta.sources)):
            for writer, handle in zip(writers, handles, strict=True):
                writer.write(handle, batch)
            rows += len(batch)
    if rows != job.rows:
        raise RuntimeError(f"{job.split} file {job.index}: {rows} rows, the plan says {job.rows} (a bug)")
    entries = [w.close_file(h) for w, h in zip(writers, handles, strict=True)]
    if meta.stem(job.split, job.index).endswith(f"-{REMAINDER}"):
        for entry in entries:
            entry["remainder"] = True
    return entries


class DocumentSource(Protocol):
    """A split's documents in stream order (tokens without EOS), readable in any process (so
    picklable): what a format of whole documents writes."""

    def batches(self) -> Iterator[DocumentBatch]: ...


@dataclass
class DocumentsJob:
    """One split's kept documents (the first ``keep`` of ``documents``) written whole by the
    writer of the shard format ``writer`` (one that takes documents)."""

    documents: DocumentSource
    split: str
    keep: int
    writer: str
    shard_dir: str
    meta: ShardMeta


def write_documents_task(job: DocumentsJob) -> dict[str, Any]:
    """Runs in any process: the split's file in a documents format; its manifest entry."""
    writer = get_format(job.writer).writer(Path(job.shard_dir), job.meta)
    handle = writer.open_file(job.split, 0)
    left = job.keep
    for docs in job.documents.batches():
        n = min(left, len(docs.lengths))
        if n:
            lengths = docs.lengths[:n]
            writer.write(handle, DocumentBatch(docs.tokens[: int(lengths.sum())], lengths))
        left -= n
        if not left:
            break
    if left:
        raise RuntimeError(f"{job.split}: {job.keep - left} documents for {job.writer}, expected {job.keep}")
    return writer.close_file(handle)
