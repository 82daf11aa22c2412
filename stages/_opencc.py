"""The installed OpenCC: converters, the files a config reads, and their fingerprint (one place
for the normalize and lang_id stages and the bench scripts that rebuild their data files)."""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=8)
def converter(config: str) -> object:
    """An ``opencc.OpenCC(config)``, built once per process and config."""
    import opencc

    return opencc.OpenCC(config)


def config_path(config: str) -> Path | None:
    """The installed JSON file of OpenCC ``config``, found next to the t2s config (no converter
    is built for ``config``), or None."""
    path = Path(str(getattr(converter("t2s"), "config", ""))).with_name(f"{config}.json")
    return path if path.is_file() else None


def dictionaries(config: str, section: str = "") -> list[Path]:
    """The dictionary files OpenCC ``config`` reads, in the order of its JSON file (repeats kept;
    empty when the config file cannot be found); ``section``: only those under that top-level key
    of the JSON file (e.g. "normalization")."""
    path = config_path(config)
    if path is None:
        return []
    files: list[Path] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("file"), str):
                files.append(path.parent / node["file"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    data = json.loads(path.read_text(encoding="utf-8"))
    walk(data.get(section, []) if section else data)
    return files


def fingerprint(config: str) -> str | None:
    """blake2b-128 hex of the installed config file and of every dictionary it reads (name and
    bytes, in the order of :func:`dictionaries`), or None when one of them is missing."""
    path = config_path(config)
    files = dictionaries(config)
    if path is None or not files or not all(f.is_file() for f in files):
        return None
    h = hashlib.blake2b(path.read_bytes(), digest_size=16)
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()
