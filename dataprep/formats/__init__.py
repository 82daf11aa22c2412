"""Shard formats: how packed token rows are stored, and how they are read back.

This package is the contract between preparation and training: ``pretrain/`` reads shards only
through it. A run's OUT/manifest.json describes the shards (see :mod:`dataprep.formats.manifest`).

Row contract (all formats): a row holds ``row_length = seq_length + 1`` token ids, so inputs are
``row[:-1]`` and labels ``row[1:]``. Per-row columns, same names in every format:

* ``input_ids``      int32 [row_length]: the tokens.
* ``actual_seq_len`` int32 [variable]: cumulative end offsets of the document pieces in the row
  (MindFormers' name), last value = number of real (non-pad) tokens; lets training reset positions
  or mask attention across documents without an O(s^2) mask at load time.
* ``loss_mask``      int32 [row_length], optional (padding packers): 1 where the label counts.

MindRecord files carry these as fields; .bin row files carry ``input_ids`` and keep the others in
side files described in the manifest.
"""
