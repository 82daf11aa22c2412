"""Reading OUT/manifest.json and locating the shard files it lists.

Shard section (written by the packing stage):

    "shards": {
      "seq_length": 512,             # tokens per training sample; rows hold seq_length + 1
      "row_length": 513,
      "dtype": "int32",
      "packing": "concat",
      "vocab_size": 8192, "eos_id": 2, "pad_id": 0, "bos_id": 1,
      "splits": {"train": {"rows": R, "tokens": T, "documents": D,
                           "files": [{"path": "shards/train-00000.bin", "format": "bin",
                                      "rows": r, "bytes": b, "sha256": "..."}]}}
    }
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
