"""The shard-format registry: one entry per format pairs everything that touches its files.

A :class:`ShardFormat` names its writer (a :class:`ShardWriter`, named in ``pack.writers`` and
listed by ``dataprep stages``), how one file is read back as rows (for
``dataprep verify`` and ``dataprep inspect``), how a split is read for training (``pretrain/``),
and what ``inspect`` needs without a manifest. The packing stage, verify, inspect and the
training loop look formats up here by name (the ``format`` of each file entry in manifest.json)
and never branch on a format's name.

Built-in formats (:mod:`dataprep.formats.bin_shards`, :mod:`dataprep.formats.mindrecord_shards`,
:mod:`dataprep.formats.megatron_shards`) are registered the first time a format is looked up,
then those of the ``dataprep.formats`` entry-point group (plug-ins); a module may also call
:func:`register_format` itself (a stage module under ``stages/`` is imported by the stage
registry). A new format is one module that defines its writer, reader and training rows and
registers one ``ShardFormat``; see docs/add-a-shard-format.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from dataprep.formats.manifest import FileEntry, ShardsManifest

if TYPE_CHECKING:
    from dataprep.formats.rows import RowBatch
    from dataprep.shards.plan import ShardPlan

BUILTIN = (
    "dataprep.formats.bin_shards",
    "dataprep.formats.mindrecord_shards",
    "dataprep.formats.megatron_shards",
)


@dataclass
class SplitFiles:
    """One split in one format: its files (absolute paths, manifest order) and the shard metadata."""

    out: Path
    split: str
    format: str  # a registered shard format
    files: list[Path]
    entries: list[FileEntry]
    rows: int  # rows listed in the manifest for these files
    shards: ShardsManifest = field(repr=False)  # the manifest's "shards" section

    @property
    def row_length(self) -> int:
        return self.shards.row_length


class TrainingRows(Protocol):
    """The rows of one split in one format, as a training loop reads them: ``columns`` stored
    (``input_ids`` first; see the row contract in :mod:`dataprep.formats`), ``len()`` rows, and
    ``batches(indices, batch_size)``: the rows at ``indices`` (global row numbers, in that order)
    as dicts of ``input_ids`` int32 [batch_size, row_length], ``actual_seq_len`` (list of int32
    arrays, or None), ``loss_mask`` (int32 [batch_size, row_length], or None) and ``row_ids``;
    whole batches only. Optional ``reads_on_demand = True``: ``batches`` reads a batch's rows only
    when the batch is taken (training then checks each file just before its first row is read;
    else every file before the first batch, :class:`dataprep.formats.readers_for_training.CheckedRows`)."""

    columns: tuple[str, ...]

    def __len__(self) -> int: ...

    def batches(self, indices: np.ndarray, batch_size: int) -> Iterator[dict[str, Any]]: ...


@dataclass(frozen=True)
class ShardMeta:
    """What every writer of a run is built with: ``row_length`` (seq_length + 1) tokens a row;
    ``dtype`` of the rows' tokens (``shards.dtype``: "uint16" or "int32"); ``vocab_size``,
    ``eos_id``; ``with_loss_mask``: the rows carry a loss_mask column (the padding packers);
    ``plan``: per split, how its rows are cut into files (:class:`dataprep.shards.plan.ShardPlan`);
    ``sources``: the mix's source names when rows carry a source id, else None."""

    row_length: int
    dtype: str
    vocab_size: int
    eos_id: int
    with_loss_mask: bool = False
    plan: dict[str, ShardPlan] = field(default_factory=dict)
    sources: list[str] | None = None

    @property
    def seq_length(self) -> int:
        return self.row_length - 1

    def stem(self, split: str, k: int) -> str:
        """The name (without suffix) of file ``k`` of ``split``: <split>-NNNNN, or
        <split>-remainder for a split's remainder file."""
        return self.plan[split].stem(split, k)


class ShardWriter:
    """Writes one shard format: one file (plus any index) per planned shard file.

    Built with the shards directory and the run's :class:`ShardMeta`, in the driver and again in
    whichever process writes a file, so building one has no side effects. ``prepare`` (driver,
    once, before any file) sets up directories. Then, for each file, in any process and in any
    order among files: ``open_file(split, k)`` returns a handle, ``write(handle, rows)`` takes
    :class:`dataprep.formats.rows.RowBatch` es (tokens [rows, row_length] plus each row's
    actual_seq_len) in the file's row order, and ``close_file(handle)`` returns the file's
    manifest entry (as JSON; read back as :class:`dataprep.formats.manifest.FileEntry`).
    ``commit`` (driver, once every file is closed) e.g. moves a staging directory into place.
    ``warm_up`` (a module-level function of one ignored argument, e.g. a slow import) may be run
    ahead in the processes that will write files.

    ``takes = "documents"``: a writer of whole documents instead of rows (one sequence per
    document, e.g. the ``megatron`` format). It writes one file per split: ``open_file(split, 0)``,
    then ``write(handle, docs)`` with :class:`dataprep.formats.rows.DocumentBatch` es holding the
    split's kept documents (tokens without EOS) in the order the packer streams them, then
    ``close_file(handle)``; the rows' shard plan does not apply to it.
    """

    name: ClassVar[str] = ""
    takes: ClassVar[str] = "rows"  # or "documents"
    warm_up: ClassVar[Callable[[Any], Any] | None] = None

    def __init__(self, out_dir: Path, meta: ShardMeta):
        self.out_dir = out_dir
        self.meta = meta

    def prepare(self) -> None:
        """Driver, before any file is opened."""

    def open_file(self, split: str, k: int) -> Any:
        raise NotImplementedError

    def write(self, handle: Any, rows: Any) -> None:
        raise NotImplementedError

    def close_file(self, handle: Any) -> dict[str, Any]:
        raise NotImplementedError

    def commit(self) -> None:
        """Driver, once every file is closed."""


@dataclass(frozen=True)
class FileMeta:
    """What reading one file needs: ``row_length``; ``dtype`` of the stored tokens (as in
    ``shards.dtype``: a format may store its own, e.g. MindRecord is always int32)."""

    row_length: int
    dtype: str


@dataclass(frozen=True)
class ShardFormat:
    """One shard format.

    name: the writer's name (``pack.writers``) and the ``format`` of its files in the manifest.
    writer: writes its files (built per process; see :class:`ShardWriter`).
    suffix: the data file's suffix; ``companions``: the suffixes that replace it in the names of
      the files beside it (its index: ``x.idx`` for ``x.bin``, ``x.mindrecord.db`` for
      ``x.mindrecord``), which stand for it on the command line (``inspect x.idx`` reads ``x.bin``).
    read_file(data, index, meta): (rows, stored loss masks or None) of one file in stored order;
      ``index``: its companion file as listed in the manifest, or None for the default beside it.
    training_rows(split): random access to a split's rows for training (:class:`TrainingRows`).
    light: reading needs no heavy import (``inspect`` of a directory picks a light format first).
    training_preference: ``data_format: auto`` in training picks the present format ranked
      highest.
    standalone_meta(data): the :class:`FileMeta` of a file without its run's manifest, when the
      format can tell (else None: the manifest is needed).
    stored_dtype(shards_dtype): the dtype its files store (shown by ``inspect``).
    title: how messages name its files ("the MindRecord and .bin files differ").
    read_sequences(data, index): a format of whole documents (its writer's ``takes`` is
      "documents"): (tokens int32, sizes int64) of its stored sequences, block by block, each
      sequence one document ending with its EOS; such a format has no rows (``read_file`` and
      ``training_rows`` refuse) and verify and inspect read it with this instead.
    """

    name: str
    writer: type[ShardWriter]
    suffix: str
    companions: tuple[str, ...]
    read_file: Callable[[Path, Path | None, FileMeta], Iterator[tuple[RowBatch, np.ndarray | None]]]
    training_rows: Callable[[SplitFiles], TrainingRows]
    light: bool = True
    training_preference: int = 0
    standalone_meta: Callable[[Path], FileMeta] | None = None
    stored_dtype: Callable[[str], str] = str
    title: str = ""
    read_sequences: Callable[[Path, Path | None], Iterator[tuple[np.ndarray, np.ndarray]]] | None = None

    @property
    def takes(self) -> str:
        """ "rows" (packed rows), or "documents" (one sequence per document; see read_sequences)."""
        return self.writer.takes

    def data_file(self, path: Path) -> Path:
        """The data file ``path`` stands for (itself, or the file its companion sits beside)."""
        for companion in self.companions:
            if path.name.endswith(companion):
                return path.with_name(path.name[: -len(companion)] + self.suffix)
        return path


_FORMATS: dict[str, ShardFormat] = {}
_DISCOVERED = False


def register_format(fmt: ShardFormat) -> ShardFormat:
    """Make ``fmt`` known by its name; returns it."""
    existing = _FORMATS.get(fmt.name)
    if existing is not None and existing.writer.__qualname__ != fmt.writer.__qualname__:
        raise TypeError(f"shard format {fmt.name!r} is registered twice")
    _FORMATS[fmt.name] = fmt
    return fmt


def discover() -> None:
    """Register the built-in formats, then the plug-ins of the ``dataprep.formats`` entry points."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    for module in BUILTIN:
        importlib.import_module(module)
    for ep in entry_points(group="dataprep.formats"):
        ep.load()


def get_format(name: str) -> ShardFormat:
    """The format named ``name``; ValueError naming the known ones if absent."""
    discover()
    try:
        return _FORMATS[name]
    except KeyError:
        known = ", ".join(sorted(_FORMATS))
        raise ValueError(f"unknown shard format {name!r}; known formats: {known}") from None


def all_formats() -> list[ShardFormat]:
    """Every registered format, by name."""
    discover()
    return [_FORMATS[name] for name in sorted(_FORMATS)]


def format_of_file(path: Path) -> tuple[ShardFormat, Path]:
    """(format, data file) of a shard file or of one of its companions, by the longest suffix
    that matches (``x_text_document.bin`` is megatron's, ``x.bin`` bin's)."""
    found = [
        (len(suffix), fmt)
        for fmt in all_formats()
        for suffix in (fmt.suffix, *fmt.companions)
        if path.name.endswith(suffix)
    ]
    if found:
        fmt = max(found, key=lambda match: match[0])[1]
        return fmt, fmt.data_file(path)
    known = ", ".join(s for f in all_formats() for s in (f.suffix, *f.companions))
    raise ValueError(f"{path}: not a shard ({known} or an output directory)")
