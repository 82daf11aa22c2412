"""A small synthetic dataset in the shard contract (manifest.json + shards written by the shard
formats' writers: .bin/.idx and/or MindRecord), for tests and benchmarks of the training loop that
must not depend on a full ``dataprep prepare`` run.

Documents are random token sequences (ids drawn from a skewed distribution over
``[first_id, vocab_size)``, so a model can learn something), each followed by EOS, concatenated and
cut into rows of seq_length + 1 tokens; the last partial row is padded with pad_id. Per row the
cumulative document ends (``actual_seq_len``) are stored; the last value is the number of real tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats.manifest import FileEntry
from dataprep.formats.rows import RowBatch


def make_rows(
    n_rows: int,
    seq_length: int,
    vocab_size: int,
    eos_id: int = 2,
    pad_id: int = 0,
    first_id: int = 4,
    mean_doc_len: int = 12,
    seed: int = 0,
    pad_last: bool = True,
) -> tuple[np.ndarray, list[np.ndarray]]:
    """(rows int32 [n_rows, seq_length + 1], per-row actual_seq_len int32 arrays)."""
    rng = np.random.default_rng(seed)
    length = seq_length + 1
    need = n_rows * length
    weights = 1.0 / np.arange(1, vocab_size - first_id + 1)
    weights /= weights.sum()
    # document lengths (with their EOS) until the rows are filled, then all tokens in one draw
    lengths = np.zeros(0, dtype=np.int64)
    while lengths.sum() < need:
        more = rng.geometric(1.0 / mean_doc_len, size=max(16, need // mean_doc_len)) + 1
        lengths = np.concatenate([lengths, more])
    lengths = lengths[: np.searchsorted(np.cumsum(lengths), need) + 1]
    ends = np.cumsum(lengths)  # absolute end offsets (after each EOS) in the stream
    flat = rng.choice(np.arange(first_id, vocab_size, dtype=np.int32), size=int(ends[-1]), p=weights)
    flat[ends - 1] = eos_id
    ends_arr = np.asarray(ends, dtype=np.int64)
    real_last = length
    if pad_last:  # end the data at a document end inside the final row, then pad (as the packer does)
        lo = (n_rows - 1) * length
        inside = ends_arr[(ends_arr > lo) & (ends_arr < lo + length)]
        if len(inside):
            real_last = int(inside[-1] - lo)
            flat = np.concatenate([flat[: lo + real_last], np.full(length - real_last, pad_id, np.int32)])
    rows = flat[:need].reshape(n_rows, length)
    asl = []
    for r in range(n_rows):
        lo = r * length
        real = real_last if r == n_rows - 1 else length
        inside = ends_arr[(ends_arr > lo) & (ends_arr < lo + real)] - lo
        asl.append(np.append(inside, real).astype(np.int32))
    return rows, asl


def write_dataset(
    out: str | Path,
    rows: int = 64,
    seq_length: int = 16,
    vocab_size: int = 64,
    formats: tuple[str, ...] = ("bin",),
    validation_rows: int = 0,
    boundaries: bool = True,
    files: int = 1,
    seed: int = 0,
    eos_id: int = 2,
    pad_id: int = 0,
) -> Path:
    """Write a dataset into ``out`` (manifest.json + shards/) through the writers of the shard
    ``formats`` (rows of formats of rows; int32 tokens) and return ``out``.

    ``files``: files per split (sizes within one row of each other). ``boundaries`` False: the
    .bin files lose their .idx, so only input_ids are stored (the bin format alone).
    """
    from dataprep.formats.manifest import Manifest, ShardsManifest, SplitEntry
    from dataprep.formats.registry import ShardMeta, get_format
    from dataprep.shards.plan import shard_plan

    if not boundaries and set(formats) != {"bin"}:
        raise ValueError("boundaries=False: only the bin format stores rows without boundaries")
    out = Path(out)
    shard_dir = out / "shards"
    made: dict[str, RowBatch] = {}
    for split, n, split_seed in (("train", rows, seed), ("validation", validation_rows, seed + 1)):
        if n > 0:
            data, asl = make_rows(n, seq_length, vocab_size, eos_id, pad_id, seed=split_seed)
            made[split] = RowBatch(data, np.concatenate(asl), np.asarray([len(a) for a in asl]))
    plans = {split: shard_plan(len(batch), files, False) for split, batch in made.items()}
    meta = ShardMeta(seq_length + 1, "int32", vocab_size, eos_id, plan=plans)
    writers = [get_format(name).writer(shard_dir, meta) for name in formats]
    for writer in writers:
        writer.prepare()
    splits: dict[str, SplitEntry] = {}
    for split, batch in made.items():
        entries: list[dict[str, Any]] = []
        start = 0
        for k, size in enumerate(plans[split].sizes):
            part = batch.select(np.arange(start, start + size))
            start += size
            for writer in writers:
                handle = writer.open_file(split, k)
                writer.write(handle, part)
                entries.append(writer.close_file(handle))
        real = batch.real_tokens
        eos = int(((batch.tokens == eos_id) & (np.arange(seq_length + 1)[None, :] < real[:, None])).sum())
        splits[split] = SplitEntry(
            rows=len(batch),
            tokens=int(real.sum()),
            documents=eos,
            doc_tokens=int(real.sum()) - eos,
            eos_tokens=eos,
            padding_tokens=int(len(batch) * (seq_length + 1) - real.sum()),
            files=[FileEntry.from_json(e) for w in range(len(writers)) for e in entries[w :: len(writers)]],
        )
    for writer in writers:
        writer.commit()
    if not boundaries:  # rows alone: the .idx files go
        for entry in (f for s in splits.values() for f in s.files):
            if entry.index is not None:
                (out / entry.index.path).unlink()
                entry.index = None
    shards = ShardsManifest(
        seq_length=seq_length,
        row_length=seq_length + 1,
        dtype="int32",
        vocab_size=vocab_size,
        eos_id=eos_id,
        pad_id=pad_id,
        bos_id=1,
        formats=list(formats),
        splits=splits,
    )
    tokenizer = {"vocab_size": vocab_size, "eos_id": eos_id, "pad_id": pad_id, "bos_id": 1}
    manifest = Manifest("", {}, seed, [], {}, {"tokenizer": tokenizer, "shards": shards})
    (out / "manifest.json").write_text(json.dumps(manifest.to_json(), indent=1), encoding="utf-8")
    return out
