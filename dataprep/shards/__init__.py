"""Shard output: from packed rows to the shard files of every format and the manifest's ``shards``.

The packing stage packs each split into the row spool and then calls
:func:`dataprep.shards.output.write_shards` once, with typed inputs
(:class:`~dataprep.shards.output.ShardOutput`, a :class:`~dataprep.shards.output.SplitInput` per
split). This package owns:

* :mod:`~dataprep.shards.spool`: the row spool and the seeded, bounded-memory shuffle;
* :mod:`~dataprep.shards.plan`: the shard plan (rows per file, the remainder file);
* :mod:`~dataprep.shards.files`: the jobs that write files through the writers of the format
  registry (:mod:`dataprep.formats.registry`), rows or whole documents;
* :mod:`~dataprep.shards.accounting`: the packers' counts and each split's token accounting;
* :mod:`~dataprep.shards.output`: the writers' lifecycle (prepare, files, commit) and the
  manifest's ``shards`` block (:class:`dataprep.formats.manifest.ShardsManifest`).

It names no format: formats are looked up by name in the registry.
"""
