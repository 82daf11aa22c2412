"""Shard formats: how packed token rows are stored, and how they are read back.

This package is the contract between preparation and training: ``pretrain/`` reads shards only
through it. A run's OUT/manifest.json describes the shards (see :mod:`dataprep.formats.manifest`).

Row contract (all formats): a row holds ``row_length = seq_length + 1`` token ids, so inputs are
``row[:-1]`` and labels ``row[1:]``. Per-row columns, same names in every format:

* ``input_ids``      int32 [row_length]: the tokens. Each document ends with one EOS; padding
  (pad_id), if any, is at the end of the row.
* ``actual_seq_len`` int32 [variable]: cumulative end offsets of the document pieces in the row
  (MindFormers' name), last value = number of real (non-pad) tokens; lets training reset positions
  or mask attention across documents without an O(s^2) mask at load time.
* ``loss_mask``      int32 [row_length], optional (padding packers): ``loss_mask[i] = 1`` iff
  ``row[i]`` is a real token, aligned with ``input_ids``; the label mask is ``loss_mask[1:]``.
  Where the column is absent it equals ``i < actual_seq_len[-1]``
  (:func:`dataprep.formats.rows.loss_mask_from_boundaries`).

Files (paths relative to OUT, listed with sha256 in the manifest), in the two built-in row formats
(:mod:`dataprep.formats.bin_shards`, :mod:`dataprep.formats.mindrecord_shards`):

* ``shards/mindrecord/<split>/<split>-NNNNN.mindrecord`` (+ ``.db``), one directory per split:
  the three columns as MindRecord fields (loss_mask only for the pad and bestfit packings; the
  exact boundaries are the ``seg_ends`` field, and ``actual_seq_len`` there holds them in
  MindFormers' fixed-width compressed-EOD form, see :mod:`dataprep.formats.mindrecord`). Train
  shards hold equal row counts and their number is a multiple of ``shard_multiple`` (8 by
  default); the rows left over (fewer than there are shards) are in
  ``train-remainder.mindrecord``, listed last (``"remainder": true``). Every row of a split is
  in one of its files: read them all, assigning rows to data-parallel ranks by index
  (MindDataset's ``num_shards``/``shard_id`` does, padding an uneven split by repeating rows),
  never whole files to ranks, or the remainder rows go untrained.
* ``shards/bin/<split>-NNNNN.bin``: rows of ``input_ids`` back to back (int32, or uint16 when the
  vocabulary fits: ``shards.dtype``), see :mod:`dataprep.formats.binrows`; with a
  Megatron-compatible ``.idx`` next to it that carries ``actual_seq_len``
  (:mod:`dataprep.formats.idx`). The .bin and MindRecord files hold the same rows in the same
  order, file for file (``train-remainder.bin`` too).
* ``shards/megatron/<split>_text_document.bin`` + ``.idx`` (``pack.writers: [..., megatron]``):
  not rows but one sequence per kept document with its EOS, for Megatron-LM's ``GPTDataset``
  (:mod:`dataprep.formats.megatron_shards`); ``pretrain/`` does not read it.

Reading API (import from the submodules, or from here: names load lazily, so importing this
package stays cheap):

* ``mindrecord_files(out, split="train") -> list[str]``: the MindRecord files of a split, for
  ``mindspore.dataset.MindDataset(files, num_shards=dp, shard_id=dp_rank, shuffle=...)``.
* ``open_bin(out, split="train") -> BinSplit``: memory-mapped rows; ``len(s)``, ``s[i]`` ->
  {"input_ids", "actual_seq_len", "loss_mask"} (int32 arrays), ``s.input_ids(i)``,
  ``s.actual_seq_len(i)``, ``s.token_rows()`` (the raw [rows, row_length] memmaps).
* ``read_manifest(path) -> (out_dir, Manifest)`` (:mod:`dataprep.formats.manifest`); a split's
  files in one format: ``manifest.split_files(out_dir, split, fmt)``.
* ``get_format(name) -> ShardFormat``: a shard format's writer, reader, verifier and training
  rows (:mod:`dataprep.formats.registry`; ``register_format`` adds one).
* ``load_tokenizer(path)`` to decode (the run's tokenizer is ``OUT/<manifest.tokenizer.file>``).
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "mindrecord_files": "dataprep.formats.mindrecord_shards",
    "open_bin": "dataprep.formats.bin_shards",
    "BinSplit": "dataprep.formats.bin_shards",
    "read_manifest": "dataprep.formats.manifest",
    "Manifest": "dataprep.formats.manifest",
    "get_format": "dataprep.formats.registry",
    "register_format": "dataprep.formats.registry",
    "ShardFormat": "dataprep.formats.registry",
    "load_tokenizer": "dataprep.tokenizers.load",
    "RowBatch": "dataprep.formats.rows",
    "loss_mask_from_boundaries": "dataprep.formats.rows",
}

COLUMNS = ("input_ids", "actual_seq_len", "loss_mask")


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dataprep.formats' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
