"""Shard files: how a split's rows are cut into files, and the job that writes one file in every
format from the parts the shuffle left for it (:mod:`dataprep.formats.rowspool`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataprep.formats.binrows import DTYPES

TOKEN_DTYPES = {name: dtype.str for name, dtype in DTYPES.items()}  # "uint16" -> "<u2"


def shard_plan(rows: int, files: int, equal: bool) -> tuple[list[int], int]:
    """(rows per file, rows kept): equal files drop rows mod files; else sizes differ by <= 1."""
    files = max(1, min(files, rows)) if rows else 1
    if equal:
        per = rows // files
        return [per] * files, per * files
    base, extra = divmod(rows, files)
    return [base + (1 if i < extra else 0) for i in range(files)], rows


@dataclass
class ShardFileJob:
    """File ``index`` of ``split``: its ``rows``, and the parts holding them in order (path, batch
    sizes), to be written by the registered shard ``writers`` into ``shard_dir``."""

    split: str
    index: int
    rows: int
    parts: list[tuple[str, list[int]]]
    writers: list[str]
    shard_dir: str
    meta: dict[str, Any]


def write_shard_file(job: ShardFileJob) -> list[dict[str, Any]]:
    """Write one shard file in every format (runs in any process); the manifest entry of each, in
    writer order. The parts are read once, batch by batch as recorded, and left for the caller to
    remove (a retried job must find them)."""
    from dataprep import stage as registry
    from dataprep.formats.rowspool import read_part

    writers = [registry.get(name)(registry.NoParams(), Path(job.shard_dir), job.meta) for name in job.writers]
    handles = [w.open_file(job.split, job.index) for w in writers]
    rows = 0
    dtype = TOKEN_DTYPES[job.meta["dtype"]]
    for path, batches in job.parts:
        for batch in read_part(path, batches, job.meta["row_length"], dtype):
            for writer, handle in zip(writers, handles, strict=True):
                writer.write(handle, batch)
            rows += len(batch)
    if rows != job.rows:
        raise RuntimeError(f"{job.split} file {job.index}: {rows} rows, the plan says {job.rows} (a bug)")
    return [w.close_file(h) for w, h in zip(writers, handles, strict=True)]
