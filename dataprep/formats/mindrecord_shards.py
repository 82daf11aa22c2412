"""The ``mindrecord`` shard format: shards/mindrecord/<split>/<split>-NNNNN.mindrecord (+ .db;
and <split>-remainder.mindrecord, see :mod:`dataprep.shards.plan`), one standalone file per
shard, following the shard plan so files line up with every other format's files row for row.
One directory per split, so that a trainer given a directory (MindFormers' ``dataset_dir``, which
takes every ``*.mindrecord`` file below it) reads one split and nothing else.

Files are written wherever the shard-file jobs run (MindSpore's import, ~1-3 s, is run ahead
with ``warm_up`` in the driver or the pool's workers while the tokenizer trains), into
shards/.mindrecord.staging; the directory is moved into place whole by ``commit`` once every file
is committed (MindRecord headers store bare file names: files must never be renamed). A
MindRecord file's bytes depend on how its rows were cut into writes: the same rows in the same
batches give the same file. Schema and the file-level reader and writer:
:mod:`dataprep.formats.mindrecord`. Training reads a split through ``MindDataset`` with a
``SubsetSampler`` of the rows wanted (:class:`MindRecordRows`). Everything the ``mindrecord``
format does is here, with its registry entry; MindSpore is imported only inside functions.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import multiprocessing
import os
import shutil
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats.manifest import read_manifest
from dataprep.formats.mindrecord import MindRecordFile, move_into_place, staging_dir
from dataprep.formats.readers_for_training import ROW_COLUMNS, ShardError, SplitFiles
from dataprep.formats.registry import FileMeta, ShardFormat, ShardMeta, ShardWriter, register_format
from dataprep.formats.rows import RowBatch
from dataprep.io import file_sha256

_FAST_EXIT = False


def _exit_now() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def import_mindrecord(_: Any = None) -> None:
    """Import MindSpore's MindRecord writer, ahead of the files.

    In a worker process (a multiprocessing child), which only writes files, and in a process
    that said it does nothing else with MindSpore (:func:`only_files_here`: the ``dataprep``
    command), the writer is imported alone (:func:`import_mindrecord_alone`: ~0.04 CPU-s and
    ~15 MB instead of ~1.3 CPU-s and ~360 MB for all of MindSpore). A worker then leaves without
    MindSpore's interpreter teardown (~0.4 s at every pool shutdown): by then every file it wrote
    is committed and closed, and results travel synchronously, so only stdio needs flushing."""
    global _FAST_EXIT
    worker = multiprocessing.parent_process() is not None
    if not ((worker or _ONLY_FILES[0]) and import_mindrecord_alone()):
        import mindspore.mindrecord  # noqa: F401

    if not _FAST_EXIT and worker:
        atexit.register(_exit_now)  # runs first (last registered), before MindSpore's handlers
        _FAST_EXIT = True


_ONLY_FILES = [False]  # this process uses MindSpore for MindRecord files only (only_files_here)


def only_files_here() -> None:
    """Declare that this process uses MindSpore only to read and write MindRecord files (the
    ``dataprep`` command, which exits when its command is done), so that :func:`import_mindrecord`
    imports the writer alone. Not for a process that may import ``mindspore.dataset`` or
    ``mindspore.nn`` later (a test session, a training script)."""
    _ONLY_FILES[0] = True


def import_mindrecord_alone() -> bool:
    """Import ``mindspore.mindrecord`` without ``mindspore/__init__`` (which imports all of
    MindSpore: graph compiler, ops, training): the package is entered as a bare namespace, so only
    the MindRecord modules and their C extension load; the files written are byte for byte those
    of the full import. ``mindspore._c_expression`` (MindSpore's core extension: ~200 MB of
    libraries and ~0.5 CPU-s to load), which the MindRecord modules import only for the
    encryption of files (``set_enc_key``, never set here), is a stub whose two functions raise.
    True when it worked (or was done before in this process); False, with nothing of MindSpore
    left imported, when MindSpore is already imported in full, missing, or the MindRecord modules
    need more of it than they used to. Only for processes that write files and nothing else:
    later ``import mindspore.dataset`` or ``mindspore.nn`` there fail."""
    if _ALONE[0]:
        return True
    if "mindspore" in sys.modules:
        return False
    spec = importlib.util.find_spec("mindspore")
    if spec is None or not spec.submodule_search_locations:
        return False
    package = types.ModuleType("mindspore", "MindSpore, entered for its MindRecord modules only")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["mindspore"] = package
    sys.modules["mindspore._c_expression"] = _encryption_stub()
    try:
        importlib.import_module("mindspore.mindrecord")
    except Exception:
        for name in [n for n in sys.modules if n == "mindspore" or n.startswith("mindspore.")]:
            del sys.modules[name]
        return False
    _ALONE[0] = True
    return True


_ALONE = [False]  # whether this process imported the MindRecord modules alone


def _encryption_stub() -> types.ModuleType:
    """``mindspore._c_expression`` as the MindRecord modules alone need it: the names they import
    (``_encrypt``, ``_decrypt_data``, called only for encrypted files), each raising."""

    def refuse(*_: Any, **__: Any) -> Any:
        raise RuntimeError("encrypted MindRecord files need all of MindSpore (import mindspore first)")

    stub = types.ModuleType("mindspore._c_expression", "stub: MindRecord's writer imported alone")
    stub._encrypt = stub._decrypt_data = refuse  # type: ignore[attr-defined]
    return stub


def mindrecord_files(out: str | Path, split: str = "train") -> list[str]:
    """Absolute paths of a split's MindRecord files, in order (for MindDataset)."""
    root, manifest = read_manifest(out)
    files = [str(root / f.path) for f in manifest.split_files(root, split, "mindrecord")]
    if not files:
        raise ValueError(f"{root}/manifest.json lists no MindRecord files for split {split!r}")
    return files


def iter_mindrecord_file(
    path: str | Path, row_length: int, block_rows: int = 4096
) -> Iterator[tuple[RowBatch, np.ndarray | None]]:
    """(rows, loss masks or None) of one MindRecord file, in stored order."""
    from dataprep.formats.mindrecord import read_rows

    tokens: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    masks: list[np.ndarray] = []

    def flush() -> tuple[RowBatch, np.ndarray | None]:
        batch = RowBatch(
            np.stack(tokens) if tokens else np.zeros((0, row_length), np.int32),
            np.concatenate(ends) if ends else np.zeros(0, np.int32),
            np.asarray([len(e) for e in ends], dtype=np.int32),
        )
        mask = np.stack(masks) if masks else None
        tokens.clear()
        ends.clear()
        masks.clear()
        return batch, mask

    bounds = "actual_seq_len"
    for rec in read_rows(path):
        if "seg_ends" in rec:  # files of dataprep's writer; see dataprep.formats.mindrecord
            bounds = "seg_ends"
        ids = np.asarray(rec["input_ids"], dtype=np.int32)
        if len(ids) != row_length:
            raise ValueError(f"{path}: a row holds {len(ids)} tokens, expected {row_length}")
        tokens.append(ids)
        ends.append(np.asarray(rec[bounds], dtype=np.int32))
        if "loss_mask" in rec:
            masks.append(np.asarray(rec["loss_mask"], dtype=np.int32))
        if len(tokens) >= block_rows:
            yield flush()
    if tokens:
        yield flush()


class MindRecordShardWriter(ShardWriter):
    """Rows as MindRecord (see :mod:`dataprep.formats.mindrecord` for the columns):
    shards/mindrecord/<split>/."""

    name = "mindrecord"
    warm_up = staticmethod(import_mindrecord)

    def __init__(self, out_dir: Path, meta: ShardMeta):
        super().__init__(out_dir, meta)
        self.final = Path(out_dir) / "mindrecord"
        self.staging = staging_dir(self.final)

    def prepare(self) -> None:
        if self.staging.exists():
            shutil.rmtree(self.staging)
        self.staging.mkdir(parents=True)

    def open_file(self, split: str, k: int) -> Any:
        import_mindrecord()
        directory = self.staging / split
        directory.mkdir(exist_ok=True)
        path = directory / f"{self.meta.stem(split, k)}.mindrecord"
        file = MindRecordFile(path, self.meta.with_loss_mask, bool(self.meta.sources))
        return {"split": split, "file": file, "tokens": 0}

    def write(self, handle: Any, rows: RowBatch) -> None:
        handle["file"].write(rows)
        handle["tokens"] += int(rows.real_tokens.sum())

    def close_file(self, handle: Any) -> dict[str, Any]:
        mr: MindRecordFile = handle["file"]
        mr.commit()
        path = mr.path
        db = path.with_name(path.name + ".db")
        return {
            "path": f"shards/mindrecord/{handle['split']}/{path.name}",
            "format": "mindrecord",
            "split": handle["split"],
            "rows": mr.rows,
            "tokens": handle["tokens"],
            "bytes": path.stat().st_size,
            "sha256": file_sha256(path),
            "index": {
                "path": f"shards/mindrecord/{handle['split']}/{db.name}",
                "bytes": db.stat().st_size,
                "sha256": file_sha256(db),
            },
        }

    def commit(self) -> None:
        move_into_place(self.staging, self.final)


def read_file(data: Path, index: Path | None, meta: FileMeta) -> Iterator[tuple[RowBatch, np.ndarray | None]]:
    """(rows, stored loss masks or None) of one MindRecord file, in stored order (its .db is
    found by MindSpore beside it)."""
    yield from iter_mindrecord_file(data, meta.row_length)


def mindrecord_columns(split: SplitFiles) -> tuple[str, ...]:
    """Row columns stored in the split's MindRecord files (from the first file's schema), by
    the row contract's names (a ``seg_ends`` field is the contract's ``actual_seq_len``)."""
    from mindspore.mindrecord import FileReader

    reader = FileReader(str(split.files[0]))
    try:
        schema = reader.schema()
    finally:
        reader.close()
    if "input_ids" not in schema:
        raise ShardError(f"{split.files[0]}: MindRecord schema has no 'input_ids' field: {sorted(schema)}")
    present = set(schema) | ({"actual_seq_len"} if "seg_ends" in schema else set())
    return tuple(c for c in (*ROW_COLUMNS, "source_id") if c in present)


def _bounds_field(split: SplitFiles) -> str:
    """The field holding a row's exact boundaries: ``seg_ends`` in dataprep's files (whose
    ``actual_seq_len`` is MindFormers' fixed-width form), ``actual_seq_len`` in older files."""
    from mindspore.mindrecord import FileReader

    reader = FileReader(str(split.files[0]))
    try:
        return "seg_ends" if "seg_ends" in reader.schema() else "actual_seq_len"
    finally:
        reader.close()


class MindRecordRows:
    """The rows of a split's MindRecord files, read through ``mindspore.dataset.MindDataset``
    with a ``SubsetSampler`` of the rows wanted (the same order as any other format)."""

    def __init__(self, split: SplitFiles):
        self.split = split
        self.columns = mindrecord_columns(split)
        self.bounds = _bounds_field(split)
        self.total_rows = self._size()

    def __len__(self) -> int:
        return self.total_rows

    def _files_arg(self) -> str | list[str]:
        files = [str(p) for p in self.split.files]
        # one file: MindDataset finds the other components of that MindRecord set itself
        return files[0] if len(files) == 1 else files

    def _size(self) -> int:
        import mindspore.dataset as ds

        rows = ds.MindDataset(self._files_arg(), columns_list=["input_ids"], shuffle=False).get_dataset_size()
        if self.split.rows and rows != self.split.rows:
            raise ValueError(
                f"MindRecord files of split {self.split.split!r} hold {rows} rows but the manifest lists "
                f"{self.split.rows} (rerun prepare or `dataprep verify`)"
            )
        return int(rows)

    def batches(self, indices: np.ndarray, batch_size: int) -> Iterator[dict[str, Any]]:
        """Rows ``indices`` (in that order) in whole batches of ``batch_size`` rows."""
        import mindspore.dataset as ds

        idx = indices
        dataset = ds.MindDataset(
            self._files_arg(),
            columns_list=[self.bounds if c == "actual_seq_len" else c for c in self.columns],
            sampler=ds.SubsetSampler([int(i) for i in idx]),
            num_parallel_workers=1,
        )
        it = dataset.create_dict_iterator(num_epochs=1, output_numpy=True)
        buf: list[dict[str, np.ndarray]] = []
        produced = 0
        for row in it:
            buf.append(row)
            if len(buf) == batch_size:
                yield {
                    "input_ids": np.stack([r["input_ids"] for r in buf]).astype(np.int32),
                    "actual_seq_len": [r[self.bounds] for r in buf]
                    if "actual_seq_len" in self.columns
                    else None,
                    "loss_mask": np.stack([r["loss_mask"] for r in buf])
                    if "loss_mask" in self.columns
                    else None,
                    "row_ids": idx[produced * batch_size : (produced + 1) * batch_size],
                    **(
                        {"source_id": np.asarray([int(r["source_id"]) for r in buf], dtype=np.int32)}
                        if "source_id" in self.columns
                        else {}
                    ),
                }
                buf = []
                produced += 1
        if produced < len(idx) // batch_size:
            raise RuntimeError(f"MindDataset returned {produced} of {len(idx) // batch_size} batches")


FORMAT = register_format(
    ShardFormat(
        name="mindrecord",
        writer=MindRecordShardWriter,
        suffix=".mindrecord",
        companions=(".mindrecord.db",),
        read_file=read_file,
        training_rows=MindRecordRows,
        title="MindRecord",
        light=False,
        training_preference=1,
        stored_dtype=lambda _: "int32",
    )
)
