"""A small synthetic dataset in the shard contract (manifest.json + .bin rows with side files and/or
MindRecord), for tests and benchmarks of the training loop that must not depend on a full
``dataprep prepare`` run.

Documents are random token sequences (ids drawn from a skewed distribution over
``[first_id, vocab_size)``, so a model can learn something), each followed by EOS, concatenated and
cut into rows of seq_length + 1 tokens; the last partial row is padded with pad_id. Per row the
cumulative document ends (``actual_seq_len``) are stored; the last value is the number of real tokens.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats.binrows import BinRowsWriter
from dataprep.formats.idx import IdxWriter
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


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_dataset(
    out: str | Path,
    rows: int = 64,
    seq_length: int = 16,
    vocab_size: int = 64,
    formats: tuple[str, ...] = ("bin",),
    validation_rows: int = 0,
    boundaries: bool = True,
    mindrecord_shards: int = 1,
    seed: int = 0,
    eos_id: int = 2,
    pad_id: int = 0,
) -> Path:
    """Write a dataset into ``out`` (manifest.json + shards/) and return ``out``.

    ``boundaries``: store actual_seq_len (MindRecord field; .bin side files); else only input_ids.
    """
    out = Path(out)
    shard_dir = out / "shards"
    shard_dir.mkdir(parents=True, exist_ok=True)
    splits: dict[str, Any] = {}
    for split, n, split_seed in (("train", rows, seed), ("validation", validation_rows, seed + 1)):
        if n <= 0:
            continue
        data, asl = make_rows(n, seq_length, vocab_size, eos_id, pad_id, seed=split_seed)
        files: list[dict[str, Any]] = []
        if "bin" in formats:
            w = BinRowsWriter(shard_dir / f"{split}-00000.bin", "int32", seq_length + 1)
            w.write(data)
            entry: dict[str, Any] = {
                "path": f"shards/{split}-00000.bin",
                "format": "bin",
                "split": split,
                **w.close(),
            }
            if boundaries:  # the .idx carries actual_seq_len (dataprep.formats.idx)
                idx = IdxWriter(shard_dir / f"{split}-00000.idx", "int32", seq_length + 1)
                idx.add(RowBatch(data, np.concatenate(asl), np.array([len(a) for a in asl])))
                idx.close()
                entry["index"] = {
                    "path": f"shards/{split}-00000.idx",
                    "sha256": _sha256(shard_dir / f"{split}-00000.idx"),
                }
            files.append(entry)
        if "mindrecord" in formats:
            from mindspore.mindrecord import FileWriter

            name = f"{split}.mindrecord"
            fw = FileWriter(str(shard_dir / name), shard_num=mindrecord_shards, overwrite=True)
            schema: dict[str, Any] = {"input_ids": {"type": "int32", "shape": [-1]}}
            if boundaries:
                schema["actual_seq_len"] = {"type": "int32", "shape": [-1]}
            fw.add_schema(schema, "packed rows")
            records = []
            for r in range(n):
                rec = {"input_ids": np.array(data[r], dtype=np.int32)}
                if boundaries:
                    rec["actual_seq_len"] = np.array(asl[r], dtype=np.int32)
                records.append(rec)
            fw.write_raw_data(records)
            fw.commit()
            names = [name] if mindrecord_shards == 1 else [f"{name}{k}" for k in range(mindrecord_shards)]
            for nm in names:
                files.append(
                    {
                        "path": f"shards/{nm}",
                        "format": "mindrecord",
                        "split": split,
                        "sha256": _sha256(shard_dir / nm),
                    }
                )
        splits[split] = {
            "rows": n,
            "tokens": int(sum(int(a[-1]) for a in asl)),
            "files": files,
        }
    manifest = {
        "format_version": 1,
        "tokenizer": {"vocab_size": vocab_size, "eos_id": eos_id, "pad_id": pad_id, "bos_id": 1},
        "shards": {
            "seq_length": seq_length,
            "row_length": seq_length + 1,
            "dtype": "int32",
            "vocab_size": vocab_size,
            "packing": "concat",
            "eos_id": eos_id,
            "pad_id": pad_id,
            "bos_id": 1,
            "splits": splits,
        },
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return out
