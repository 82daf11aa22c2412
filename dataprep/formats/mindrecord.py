"""MindRecord shards: one standalone MindRecord file (plus its ``.db`` index) per shard.

Schema:

* ``input_ids`` int32 [-1] (row_length = seq_length + 1 values);
* ``actual_seq_len`` int32 [EOD_PAD_LENGTH = 128]: the row's document boundaries in the form
  MindFormers' compressed-EOD path reads (its ``GPTDataset`` with ``create_compressed_eod_mask``,
  ``_get_eod_attention_mask``; the packed ``HFDataLoader``, ``_get_packed_data``): the end offset
  of every document piece that ends inside the first seq_length tokens (the model's input,
  ``input_ids[:-1]``), ascending, then padded with seq_length to the fixed width of
  MindFormers' default ``eod_pad_length`` / ``compressed_eod_mask_length`` (128). A boundary
  at seq_length or later is not written (MindFormers drops the final one too), so every row's
  values are < seq_length followed by seq_length's, and rows batch without a per-batch map;
* ``seg_ends`` int32 [-1]: the exact boundaries (the row contract's ``actual_seq_len``, see
  :mod:`dataprep.formats.rows`: one cumulative end per document piece, the last one the row's
  real tokens), which verify, inspect and pretrain/ read;
* ``loss_mask`` int32 [-1] (row_length values) when the packing pads rows, and ``source_id``
  int32 (a scalar) when the recipe mixes sources.

Read them with ``mindspore.dataset.MindDataset(mindrecord_files(out, split), ...)``, or point
MindFormers' ``dataset_dir`` at ``shards/mindrecord/<split>/`` (docs/use-with-trainers.md).

A MindRecord file's header stores its own bare file name, so files must never be renamed after
``commit()``; :class:`MindRecordShardWriter` writes into a staging directory and moves the whole
directory into place at the end. MindSpore is imported only inside these functions.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats.rows import RowBatch

COLUMNS = ("input_ids", "actual_seq_len", "seg_ends", "loss_mask")
EOD_PAD_LENGTH = 128  # MindFormers' default eod_pad_length / compressed_eod_mask_length
WRITE_BATCH_ROWS = 1024
HEADER_BYTES = 1 << 20  # page metadata; MindSpore's default (16 MB) makes every file at least that big
PAGE_BYTES = 8 << 20  # one row (all columns) must fit a page: 8 MB holds rows of up to ~1M tokens


def schema(with_loss_mask: bool, with_source_id: bool = False) -> dict[str, dict[str, Any]]:
    fields: dict[str, dict[str, Any]] = {
        "input_ids": {"type": "int32", "shape": [-1]},
        "actual_seq_len": {"type": "int32", "shape": [EOD_PAD_LENGTH]},
        "seg_ends": {"type": "int32", "shape": [-1]},
    }
    if with_loss_mask:
        fields["loss_mask"] = {"type": "int32", "shape": [-1]}
    if with_source_id:
        fields["source_id"] = {"type": "int32"}
    return fields


class MindRecordFile:
    """Writes rows into one MindRecord file (shard_num=1). Arrays handed to MindSpore are always
    real int32 ndarrays: FileWriter silently drops rows of any other type (e.g. np.memmap)."""

    def __init__(self, path: Path, with_loss_mask: bool, with_source_id: bool = False):
        from mindspore.mindrecord import FileWriter

        self.path = Path(path)
        self.with_loss_mask = with_loss_mask
        self.with_source_id = with_source_id
        self.rows = 0
        self._writer = FileWriter(str(self.path), shard_num=1, overwrite=True)
        self._writer.set_header_size(HEADER_BYTES)
        self._writer.set_page_size(PAGE_BYTES)
        self._writer.add_schema(schema(with_loss_mask, with_source_id), "dataprep packed rows")
        _freeze_schema(self._writer)
        _trust_rows(self._writer)

    def write(self, batch: RowBatch) -> None:
        n = len(batch)
        if n == 0:
            return
        tokens = np.ascontiguousarray(batch.tokens, dtype=np.int32)
        if type(tokens) is not np.ndarray:
            tokens = np.array(tokens, dtype=np.int32)
        ends = np.array(batch.seg_ends, dtype=np.int32)
        off = batch.offsets
        masks = batch.loss_masks() if self.with_loss_mask else None
        if self.with_source_id and batch.source_id is None:
            raise RuntimeError(f"{self.path}: rows without source ids in a run with sources (a bug)")
        sources = batch.source_id
        for lo in range(0, n, WRITE_BATCH_ROWS):
            hi = min(n, lo + WRITE_BATCH_ROWS)
            records = []
            for i in range(lo, hi):
                row_ends = ends[off[i] : off[i + 1]]
                rec = {
                    "input_ids": tokens[i],
                    "actual_seq_len": compressed_eod(row_ends, tokens.shape[1] - 1, self.path),
                    "seg_ends": row_ends,
                }
                if masks is not None:
                    rec["loss_mask"] = masks[i]
                if self.with_source_id:
                    rec["source_id"] = int(sources[i])  # type: ignore[index]
                records.append(rec)
            self._writer.write_raw_data(records)
            if len(records) != hi - lo:  # FileWriter removes rows it rejects from the list
                raise RuntimeError(f"{self.path}: MindRecord rejected {hi - lo - len(records)} rows")
        self.rows += n

    def commit(self) -> None:
        self._writer.commit()


def compressed_eod(seg_ends: np.ndarray, seq_length: int, path: Path | str = "") -> np.ndarray:
    """int32 [EOD_PAD_LENGTH]: one row's boundaries (``seg_ends``: cumulative piece ends in the
    row) as MindFormers' compressed-EOD ``actual_seq_len``: the ends below ``seq_length``, then
    ``seq_length`` up to the fixed width (as MindFormers' ``_get_eod_attention_mask`` pads).
    ValueError naming ``path`` when a row has more boundaries than the width holds."""
    inside = seg_ends[seg_ends < seq_length]
    if len(inside) > EOD_PAD_LENGTH:
        raise ValueError(
            f"{path}: a row holds {len(inside)} document boundaries, more than the {EOD_PAD_LENGTH} of "
            "MindFormers' compressed-EOD actual_seq_len; use longer documents or a shorter seq_length"
        )
    out = np.full(EOD_PAD_LENGTH, seq_length, dtype=np.int32)
    out[: len(inside)] = inside
    return out


def _trust_rows(writer: Any) -> None:
    """Skip ``writer``'s per-row check of the rows against the schema (field present, ndarray of
    the schema's dtype, reshapeable; a Python loop over every field of every row, about a third
    of the time FileWriter spends on a batch). :meth:`MindRecordFile.write` builds every row
    itself from int32 arrays (and an int source id), so the check never rejects one and the
    bytes written are the same; ``write`` still verifies that no row was removed. Left as it is
    when FileWriter has no such method."""
    if callable(getattr(type(writer), "_verify_based_on_schema", None)):
        writer._verify_based_on_schema = lambda raw_data: None


def _freeze_schema(writer: Any) -> None:
    """Have ``writer``'s header answer ``schema`` and ``blob_fields`` from a copy taken now.

    MindSpore's FileWriter asks its header for them several times per row, and each answer is
    rebuilt by the C++ header (a quarter of the time spent writing rows); they cannot change once
    the schema is added, so the bytes written are the same. Left as it is when the header is not
    MindSpore's ShardHeader with those two properties."""
    header = getattr(writer, "_header", None)
    cls = type(header)
    if not all(isinstance(getattr(cls, name, None), property) for name in ("schema", "blob_fields")):
        return
    frozen_schema, frozen_blob_fields = header.schema, header.blob_fields
    header.__class__ = type(
        f"Frozen{cls.__name__}",
        (cls,),
        {
            "schema": property(lambda _: frozen_schema),
            "blob_fields": property(lambda _: frozen_blob_fields),
        },
    )


def read_rows(path: str | Path, columns: tuple[str, ...] | None = None) -> Iterator[dict[str, np.ndarray]]:
    """Rows of one MindRecord file in stored order (dicts of int32 arrays)."""
    from mindspore.mindrecord import FileReader

    reader = FileReader(str(path), num_consumer=1, columns=list(columns) if columns else None)
    try:
        yield from reader.get_next()
    finally:
        reader.close()


def staging_dir(final_dir: Path) -> Path:
    return final_dir.with_name(f".{final_dir.name}.staging")


def move_into_place(staging: Path, final_dir: Path) -> None:
    """Replace ``final_dir`` by ``staging`` (the whole directory: file names stay as committed)."""
    if final_dir.exists():
        shutil.rmtree(final_dir)
    os.replace(staging, final_dir)
