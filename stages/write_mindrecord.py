"""Shard writer for MindRecord: shards/mindrecord/<split>-NNNNN.mindrecord (+ .db), one standalone
file per shard, cut by the shard plan so files line up with the .bin files row for row.

The rows of each file are first spilled as raw arrays (tokens in the shards' token type, e.g.
uint16, and boundaries) with the sizes of the batches they came in. When the run has a worker
pool, each file is converted into its MindRecord file on a worker as soon as it is complete
(:meth:`ShardWriter.run_in_background`), while the driver goes on writing the next files, and
MindSpore (a ~3 s import, started ahead by ``warm_up``) is loaded by the workers, never by the
driver; without one, ``close`` converts the spills in calls of consecutive files worth at least
JOB_BYTES of rows. A MindRecord file's bytes depend on how its rows were cut into
``write_raw_data`` calls: the conversion replays the same batches, so files are byte-identical to
writing the rows directly.

Everything is written into shards/.mindrecord.staging and the directory is moved into place whole
once every file is committed (MindRecord headers store bare file names: files must never be
renamed). Schema and reading: :mod:`dataprep.formats.mindrecord`.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats.mindrecord import MindRecordFile, move_into_place, staging_dir
from dataprep.formats.rows import RowBatch, raw
from dataprep.formats.shardplan import PlannedFiles
from dataprep.io import file_sha256
from dataprep.stage import ShardWriter, register

SPILLS = ("tokens", "counts", "ends")
JOB_BYTES = 256 << 20  # rows (int32) per conversion call at least: each call imports MindSpore (~3 s)


def _spill_path(path: Path, part: str) -> Path:
    return path.with_name(f".{path.name}.{part}.spill")


_FAST_EXIT = False


def _exit_now() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def import_mindrecord(_: Any = None) -> None:
    """Import MindSpore's MindRecord writer (~3 s), ahead of :func:`convert_file` calls.

    In a worker process (a multiprocessing child) the process then leaves without MindSpore's
    interpreter teardown (~0.4 s at every pool shutdown): by then every file it wrote is
    committed and closed, and results travel synchronously, so only stdio needs flushing."""
    global _FAST_EXIT
    import mindspore.mindrecord  # noqa: F401

    if not _FAST_EXIT and multiprocessing.parent_process() is not None:
        atexit.register(_exit_now)  # runs first (last registered), before MindSpore's handlers
        _FAST_EXIT = True


def convert_files(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`convert_file` for each job, in order, in one process (one MindSpore import)."""
    import_mindrecord()
    return [convert_file(job) for job in jobs]


def group_jobs(jobs: list[dict[str, Any]], min_bytes: int = JOB_BYTES) -> list[list[dict[str, Any]]]:
    """Consecutive jobs grouped into calls of at least ``min_bytes`` of rows (the last may hold
    less), so a call's MindSpore import is small against its writing."""
    groups: list[list[dict[str, Any]]] = []
    size = min_bytes
    for job in jobs:
        if size >= min_bytes:
            groups.append([])
            size = 0
        groups[-1].append(job)
        size += sum(job["batches"]) * job["row_length"] * 4
    return groups


def convert_file(job: dict[str, Any]) -> dict[str, Any]:
    """Write one MindRecord file from its spill (then deleted), one ``write`` per recorded batch;
    returns its manifest entry. A module-level function: runs in any worker process."""
    path = Path(job["path"])
    row_length = job["row_length"]
    mr = MindRecordFile(path, job["with_loss_mask"])
    spills = {part: _spill_path(path, part) for part in SPILLS}
    with (
        open(spills["tokens"], "rb") as tokens,
        open(spills["counts"], "rb") as counts,
        open(spills["ends"], "rb") as ends,
    ):
        for n in job["batches"]:
            seg_counts = np.fromfile(counts, dtype="<i4", count=n)
            batch = RowBatch(
                np.fromfile(tokens, dtype=job["token_dtype"], count=n * row_length).reshape(n, row_length),
                np.fromfile(ends, dtype="<i4", count=int(seg_counts.sum())),
                seg_counts,
            )
            mr.write(batch)
    mr.commit()
    for spill in spills.values():
        spill.unlink()
    db = path.with_name(path.name + ".db")
    return {
        "path": f"shards/mindrecord/{path.name}",
        "format": "mindrecord",
        "split": job["split"],
        "rows": mr.rows,
        "tokens": job["tokens"],
        "bytes": path.stat().st_size,
        "sha256": file_sha256(path),
        "index": {
            "path": f"shards/mindrecord/{db.name}",
            "bytes": db.stat().st_size,
            "sha256": file_sha256(db),
        },
    }


@register
class MindRecordShardWriter(ShardWriter, PlannedFiles):
    """Rows as MindRecord (input_ids, actual_seq_len, loss_mask when padding): shards/mindrecord/."""

    name = "mindrecord"
    warm_up = staticmethod(import_mindrecord)

    def __init__(self, params: Any, out_dir: Path, meta: dict[str, Any]):
        ShardWriter.__init__(self, params, out_dir, meta)
        PlannedFiles.__init__(self, meta["plan"])
        self.final = Path(out_dir) / "mindrecord"
        self.staging = staging_dir(self.final)
        if self.staging.exists():
            shutil.rmtree(self.staging)
        self.staging.mkdir(parents=True)
        self._jobs: list[Any] = []  # per closed file: its job, or the future of its conversion

    def open_file(self, split: str, k: int) -> Any:
        path = self.staging / f"{split}-{k:05d}.mindrecord"
        files = {part: open(_spill_path(path, part), "wb") for part in SPILLS}  # noqa: SIM115
        job = {
            "path": str(path),
            "split": split,
            "row_length": self.meta["row_length"],
            "with_loss_mask": self.meta["with_loss_mask"],
            # the shards' token type: every id fits (pack checks), and uint16 halves the spill
            "token_dtype": "<u2" if self.meta.get("dtype") == "uint16" else "<i4",
            "batches": [],
            "tokens": 0,
        }
        return {"files": files, "job": job}

    def close_file(self, split: str, handle: Any) -> None:
        for f in handle["files"].values():
            f.close()
        # converted on a worker (MindSpore warmed up there) while the driver writes the next files
        self._jobs.append(self.run_in_background(convert_files, [handle["job"]]) or handle["job"])

    @staticmethod
    def _emit(handle: Any, batch: RowBatch) -> None:
        files = handle["files"]
        files["tokens"].write(raw(batch.tokens, handle["job"]["token_dtype"]))
        files["counts"].write(raw(batch.seg_counts, "<i4"))
        files["ends"].write(raw(batch.seg_ends, "<i4"))
        handle["job"]["batches"].append(len(batch))
        handle["job"]["tokens"] += int(batch.real_tokens.sum())

    def write(self, rows: RowBatch, split: str) -> None:
        self.write_rows(rows, split, self._emit)

    def close(self) -> list[dict[str, Any]]:
        """Convert what no worker took (all files when the run has none), collect every file's
        manifest entry in plan order, and move the directory into place."""
        self.finish()
        waiting = [job for job in self._jobs if isinstance(job, dict)]
        converted = iter(e for part in self.run_parallel(convert_files, group_jobs(waiting)) for e in part)
        entries = [next(converted) if isinstance(job, dict) else job.result()[0] for job in self._jobs]
        move_into_place(self.staging, self.final)
        return entries
