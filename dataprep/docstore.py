"""Documents at rest between passes (Parquet) and rejected documents (zstd-compressed JSONL).

Both are written to a temporary name and renamed on ``close()``, so a killed task never leaves a
file that looks complete.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.document import Document, Drop

_META_ENCODER = json.JSONEncoder(
    ensure_ascii=False, default=str
)  # reused: json.dumps(**kw) builds one per call


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
    """Appends documents to a Parquet file (zstd), one row group per ``write`` call."""

    def __init__(self, path: Path):
        import pyarrow.parquet as pq

        self.path = path
        self.tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = pq.ParquetWriter(self.tmp, _schema(), compression="zstd")
        self.docs = 0

    def write(self, docs: list[Document]) -> None:
        import pyarrow as pa

        if not docs:
            return
        columns = {
            "id": [d.id for d in docs],
            "text": [d.text for d in docs],
            "source": [d.source for d in docs],
            "meta": [_META_ENCODER.encode(d.meta) if d.meta else "" for d in docs],
            "tokens": [None if d.tokens is None else np.asarray(d.tokens, dtype=np.int32) for d in docs],
        }
        self._writer.write_table(pa.table(columns, schema=_schema()))
        self.docs += len(docs)

    def close(self) -> None:
        self._writer.close()
        os.replace(self.tmp, self.path)


def read_docs(path: Path, batch_size: int) -> Iterator[list[Document]]:
    """Batches of documents from a file written by :class:`DocWriter`, in order."""
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    for batch in f.iter_batches(batch_size=batch_size):
        cols = batch.to_pydict()
        out = []
        for i in range(batch.num_rows):
            meta = cols["meta"][i]
            tokens = cols["tokens"][i]
            out.append(
                Document(
                    id=cols["id"][i],
                    text=cols["text"][i],
                    source=cols["source"][i],
                    meta=json.loads(meta) if meta else {},
                    tokens=None if tokens is None else np.asarray(tokens, dtype=np.int32),
                )
            )
        yield out


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
