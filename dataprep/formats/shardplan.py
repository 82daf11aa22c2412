"""Shard files: how a split's rows are cut into files, and the job that writes one file in every
format from the parts the shuffle left for it (:mod:`dataprep.formats.rowspool`).

Every row of a split goes to a file: train files hold equal rows and the few rows left over
(fewer than there are equal files) go to the split's remainder file, ``<split>-remainder``,
listed last. Training loaders read a split's files as one set of rows assigned to ranks by
index (see :mod:`dataprep.formats`), so the remainder's rows are trained on like any other."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataprep.formats.binrows import DTYPES

TOKEN_DTYPES = {name: dtype.str for name, dtype in DTYPES.items()}  # "uint16" -> "<u2"
REMAINDER = "remainder"  # the stem suffix of a split's remainder file: <split>-remainder


@dataclass
class ShardPlan:
    """How one split's rows are cut into files, in final order: ``sizes`` (rows per file);
    ``remainder``: the last file is the remainder file, holding the ``rows mod equal files`` rows
    left over after files of equal size (fewer rows than there are equal files)."""

    sizes: list[int]
    remainder: bool = False

    @property
    def rows(self) -> int:
        return sum(self.sizes)

    def stem(self, split: str, k: int) -> str:
        """The file name of file ``k`` without its suffix: <split>-NNNNN, or <split>-remainder."""
        if self.remainder and k == len(self.sizes) - 1:
            return f"{split}-{REMAINDER}"
        return f"{split}-{k:05d}"


def shard_plan(rows: int, files: int, equal: bool) -> ShardPlan:
    """Every row in a file. ``equal``: ``files`` files of ``rows // files`` rows, then the
    ``rows mod files`` rows left over in a remainder file (none when they divide); else ``files``
    files whose sizes differ by at most one row. Never more files than rows, at least one."""
    files = max(1, min(files, rows)) if rows else 1
    per, extra = divmod(rows, files)
    if equal:
        return ShardPlan([per] * files + ([extra] if extra else []), remainder=extra > 0)
    return ShardPlan([per + (1 if i < extra else 0) for i in range(files)])


def file_stem(meta: dict[str, Any], split: str, k: int) -> str:
    """The file name (without suffix) of file ``k`` of ``split`` under the shard metadata writers
    are built with: ``meta["plan"]`` (rows per file, per split) and ``meta["remainder_file"]``
    (per split: its last file is the remainder file)."""
    return ShardPlan(meta["plan"][split], meta.get("remainder_file", {}).get(split, False)).stem(split, k)


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
    meta: dict[str, Any]


def write_shard_file(job: ShardFileJob) -> list[dict[str, Any]]:
    """Write one shard file in every format (runs in any process); the manifest entry of each, in
    writer order (``"remainder": true`` on a remainder file's). The parts are read once, batch by
    batch as recorded, and left for the caller to remove (a retried job must find them)."""
    from dataprep.formats.registry import get_format
    from dataprep.formats.rowspool import read_part
    from dataprep.stage.params import NoParams

    writers = [get_format(name).writer(NoParams(), Path(job.shard_dir), job.meta) for name in job.writers]
    handles = [w.open_file(job.split, job.index) for w in writers]
    rows = 0
    dtype = TOKEN_DTYPES[job.meta["dtype"]]
    for path, batches in job.parts:
        for batch in read_part(path, batches, job.meta["row_length"], dtype, bool(job.meta.get("sources"))):
            for writer, handle in zip(writers, handles, strict=True):
                writer.write(handle, batch)
            rows += len(batch)
    if rows != job.rows:
        raise RuntimeError(f"{job.split} file {job.index}: {rows} rows, the plan says {job.rows} (a bug)")
    entries = [w.close_file(h) for w, h in zip(writers, handles, strict=True)]
    if file_stem(job.meta, job.split, job.index).endswith(f"-{REMAINDER}"):
        for entry in entries:
            entry["remainder"] = True
    return entries
