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
        self._blobs = _BlobWriter.of(self._writer, with_loss_mask, with_source_id)

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
        eod = compressed_eods(ends, off, tokens.shape[1] - 1, self.path)
        for lo in range(0, n, WRITE_BATCH_ROWS):
            hi = min(n, lo + WRITE_BATCH_ROWS)
            if self._blobs is not None:
                columns = {"actual_seq_len": eod[lo:hi], "input_ids": tokens[lo:hi]}
                if masks is not None:
                    columns["loss_mask"] = masks[lo:hi]
                part_ends = ends[off[lo] : off[hi]]
                self._blobs.write(columns, part_ends, off[lo : hi + 1] - off[lo], sources, lo)
                continue
            records = []
            for i in range(lo, hi):
                rec = {
                    "input_ids": tokens[i],
                    "actual_seq_len": eod[i],
                    "seg_ends": ends[off[i] : off[i + 1]],
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


class _BlobWriter:
    """Rows handed to MindSpore's native ShardWriter as the blobs its Python ``_merge_blob``
    would make of them, built for a whole batch with numpy instead of row by row (row by row,
    FileWriter's Python took 17 of the 39 µs a row costs at row length 257). A row's blob is,
    for each blob field in the header's order, its byte count (8 bytes, big-endian) then its
    int32 bytes; the native writer gets the same bytes, so the files are byte-identical
    (tests/test_shards.py). Used only when FileWriter has the internals this relies on
    (:meth:`of`); else rows go through ``FileWriter.write_raw_data``."""

    def __init__(self, file_writer: Any, fields: list[str], with_source_id: bool):
        self._file_writer = file_writer
        self._fields = fields
        self._with_source_id = with_source_id

    @classmethod
    def of(cls, file_writer: Any, with_loss_mask: bool, with_source_id: bool) -> _BlobWriter | None:
        shard = getattr(file_writer, "_writer", None)
        native = getattr(shard, "_writer", None)
        header = getattr(file_writer, "_header", None)
        needed = (
            callable(getattr(native, "write_raw_data", None))
            and all(
                callable(getattr(shard, m, None)) for m in ("open", "get_shard_header", "set_shard_header")
            )
            and hasattr(shard, "is_open")
            and all(hasattr(file_writer, a) for a in ("_paths", "_overwrite", "_parallel_writer"))
        )
        fields = list(getattr(header, "blob_fields", []) or [])
        expected = {"actual_seq_len", "input_ids", "seg_ends", *(["loss_mask"] if with_loss_mask else [])}
        if not needed or set(fields) != expected or fields[-1] != "seg_ends":
            return None
        return cls(file_writer, fields, with_source_id)

    def write(
        self,
        columns: dict[str, np.ndarray],
        ends: np.ndarray,
        offsets: np.ndarray,
        sources: np.ndarray | None,
        first: int,
    ) -> None:
        """Write rows: ``columns`` the fixed-width blob fields (int32 [n, width] each), ``ends``
        the rows' seg_ends one after the other (row i: ends[offsets[i]:offsets[i + 1]]);
        ``sources``/``first``: the batch's source ids and this part's first row in it."""
        from mindspore.mindrecord.core.shardwriter import ms

        fw = self._file_writer
        shard = fw._writer
        n = len(offsets) - 1
        fixed = [_length_prefixed(columns[f]) for f in self._fields[:-1]]
        head = (np.concatenate(fixed, axis=1) if len(fixed) > 1 else fixed[0]).tobytes()
        width = len(head) // n
        counts = np.diff(offsets)
        tail_sizes = 8 + 4 * counts
        tail_starts = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(tail_sizes, out=tail_starts[1:])
        tail = np.empty(int(tail_starts[-1]), dtype=np.uint8)
        header_at = tail_starts[:-1, None] + np.arange(8)
        tail[header_at] = (4 * counts).astype(">u8").view(np.uint8).reshape(n, 8)
        data_at = np.repeat(tail_starts[:-1] + 8 - 4 * offsets[:-1], 4 * counts) + np.arange(4 * len(ends))
        tail[data_at] = np.ascontiguousarray(ends, dtype=np.int32).view(np.uint8)
        tail_bytes = tail.tobytes()
        starts = tail_starts.tolist()
        blobs = [head[i * width : (i + 1) * width] + tail_bytes[starts[i] : starts[i + 1]] for i in range(n)]
        raw: dict[int, list[dict[str, int]]] = {}
        if self._with_source_id:
            assert sources is not None
            raw = {0: [{"source_id": int(x)} for x in sources[first : first + n]]}
        if not shard.is_open:
            shard.open(fw._paths, fw._overwrite)
        if not shard.get_shard_header():
            shard.set_shard_header(fw._header)
        fw._parallel_writer = (
            False  # as FileWriter.write_raw_data records it: commit() then flushes this writer
        )
        if shard._writer.write_raw_data(raw, blobs, True, False) != ms.MSRStatus.SUCCESS:
            raise RuntimeError(f"{fw._paths[0]}: MindSpore failed to write {n} rows")


def _length_prefixed(column: np.ndarray) -> np.ndarray:
    """uint8 [n, 8 + 4 * width]: each row of an int32 [n, width] column as ``_merge_blob``
    writes a field: its byte count (8 bytes, big-endian), then its bytes."""
    n, width = column.shape
    prefix = np.full((n, 1), 4 * width, dtype=">u8").view(np.uint8)
    return np.concatenate([prefix, np.ascontiguousarray(column, dtype=np.int32).view(np.uint8)], axis=1)


def compressed_eods(
    ends: np.ndarray, offsets: np.ndarray, seq_length: int, path: Path | str = ""
) -> np.ndarray:
    """int32 [n, EOD_PAD_LENGTH]: :func:`compressed_eod` of every row of a batch at once (row i's
    boundaries: ``ends[offsets[i]:offsets[i + 1]]``)."""
    n = len(offsets) - 1
    out = np.full((n, EOD_PAD_LENGTH), seq_length, dtype=np.int32)
    row = np.repeat(np.arange(n), np.diff(offsets))
    inside = ends < seq_length
    kept_before = np.concatenate([[0], np.cumsum(inside)])  # boundaries kept before each position
    rank = kept_before[:-1] - kept_before[offsets[:-1]][row]  # place of a kept one in its row
    if inside.any() and int(rank[inside].max()) >= EOD_PAD_LENGTH:
        over = int(row[inside][rank[inside] >= EOD_PAD_LENGTH][0])
        compressed_eod(ends[offsets[over] : offsets[over + 1]], seq_length, path)  # its ValueError
        raise AssertionError("compressed_eod accepted a row with too many boundaries")
    out[row[inside], rank[inside]] = ends[inside]
    return out


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
