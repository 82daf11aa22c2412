"""The shard writer protocol (:class:`ShardWriter`): each shard format's writer, listed with the
stages by ``dataprep stages`` and named in ``pack.writers``. Kept on its own here, with the three
lines of :func:`dataprep.stage.registry._discover` that list the formats' writers as stages, until
writers move to the shard-format registry."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from dataprep.stage.params import NoParams


class ShardWriter:
    """Writes packed rows into one shard format: one file (plus any index) per planned shard file.

    Built with the shards directory and the run's shard metadata (row_length, dtype,
    with_loss_mask, and ``plan``: rows per file for each split), in the driver and again in
    whichever process writes a file, so building one has no side effects. ``prepare`` (driver,
    once, before any file) sets up directories. Then, for each file, in any process and in any
    order among files: ``open_file(split, k)`` returns a handle, ``write(handle, rows)`` takes
    :class:`dataprep.formats.rows.RowBatch` es (tokens [rows, row_length] plus each row's
    actual_seq_len) in the file's row order, and ``close_file(handle)`` returns the file's
    manifest entry. ``commit`` (driver, once every file is closed) e.g. moves a staging directory
    into place. ``warm_up`` (a module-level function of one ignored argument, e.g. a slow import)
    may be run ahead in the processes that will write files.

    ``takes = "documents"``: a writer of whole documents instead of rows (one sequence per
    document, e.g. the ``megatron`` format). It writes one file per split: ``open_file(split, 0)``,
    then ``write(handle, docs)`` with :class:`dataprep.formats.rows.DocumentBatch` es holding the
    split's kept documents (tokens without EOS) in the order the packer streams them, then
    ``close_file(handle)``; the rows' shard plan does not apply to it.
    """

    name: ClassVar[str] = ""
    kind: ClassVar[str] = "writer"
    takes: ClassVar[str] = "rows"  # or "documents"
    Params: ClassVar[type] = NoParams
    warm_up: ClassVar[Callable[[Any], Any] | None] = None

    def __init__(self, params: Any, out_dir: Path, meta: dict[str, Any]):
        self.params = params
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
