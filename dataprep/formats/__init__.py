"""Shard formats: how packed token rows are stored, and how they are read back.

This package is the contract between preparation and training: ``pretrain/`` reads shards only
through it. A run's OUT/manifest.json describes the shards (see :mod:`dataprep.formats.manifest`).
"""
