"""Reading OUT/manifest.json and locating the shard files it lists.

Top level: format_version, dataprep_version, recipe {name, hash, file}, seed, inputs [{path,
bytes, sha256}], documents {read, kept, dropped}, tokenizer {file, kind, sha256, size, vocab_size,
eos/bos/pad/unk token and id, roundtrip}, shards (written by the packing stage):

    "shards": {
      "seq_length": 512,             # tokens per training sample; rows hold seq_length + 1
      "row_length": 513,
      "dtype": "uint16",             # of the .bin files (MindRecord is always int32)
      "packing": "concat",           # concat | pad | bestfit
      "columns": ["input_ids", "actual_seq_len"],   # + "loss_mask" for pad / bestfit
      "vocab_size": 8192, "eos_id": 2, "pad_id": 0, "bos_id": 1,
      "shuffle": {"seed": 0, "buckets": 1},
      "splits": {"train": {"rows": R, "tokens": T, "documents": D, "doc_tokens": N,
                           "eos_tokens": E, "padding_tokens": P,
                           "dropped": {"tail_tokens": .., "truncated_tokens": .., "eos": ..},
                           "equal_files": {"files": 8, "rows": r},   # train, pack.equal_shards
                           "files": [{"path": "shards/bin/train-00000.bin", "format": "bin",
                                      "rows": r, "tokens": t, "bytes": b, "sha256": "...",
                                      "index": {"path": "shards/bin/train-00000.idx", "sha256": ...}},
                                     ...,
                                     {"path": "shards/bin/train-remainder.bin", "remainder": true,
                                      "rows": r2, ...}]},   # the rows left over, r2 < 8
                 "validation": {...}},
      "totals": {"rows": .., "tokens": .., "documents": ..}
    }

Token accounting per split (checked when writing and by ``dataprep verify``):
tokens = doc_tokens + documents (one EOS each) - dropped tokens (tail, truncated);
eos_tokens = documents - dropped.eos; rows * row_length = tokens + padding_tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def find_manifest(path: str | Path) -> Path:
    """manifest.json of an output directory, or of the directory a shard file sits in (or above)."""
    p = Path(path).resolve()
    for d in [p, *list(p.parents)[:3]]:
        candidate = d / "manifest.json" if d.is_dir() else d.parent / "manifest.json"
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"no manifest.json found for {path} (expected OUT/manifest.json of a dataprep run)"
    )


def load_manifest(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """(output directory, manifest) for an output directory or any file inside it."""
    m = find_manifest(path)
    return m.parent, json.loads(m.read_text(encoding="utf-8"))


def shard_files(
    out: Path, manifest: dict[str, Any], split: str = "train", fmt: str = "bin"
) -> list[tuple[Path, dict[str, Any]]]:
    """[(absolute path, file entry)] of one split's files in one format, in order."""
    shards = manifest.get("shards")
    if not shards:
        raise ValueError(
            f"{out}/manifest.json has no 'shards' section (did the recipe end with a packing stage?)"
        )
    try:
        files = shards["splits"][split]["files"]
    except KeyError:
        raise ValueError(f"{out}/manifest.json has no split {split!r}") from None
    return [(out / f["path"], f) for f in files if f["format"] == fmt]
