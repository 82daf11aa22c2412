"""Rebuild stages/data/opencc_triggers.json: for each OpenCC config the normalize stage offers, the
characters without which OpenCC cannot change a text, and a fingerprint of the dictionaries they
were read from.

Usage: python bench/make_opencc_triggers.py

OpenCC replaces a text's dictionary matches (a key by its first value); it changes a text only
where a matched key differs from its value. The trigger characters of a dictionary are the key
characters at the positions where key and value differ (all characters of a key whose value has
another length); a text holding none of them, for none of the dictionaries of a config, comes out
of OpenCC unchanged (the first conversion of a chain leaves it as it is, so do the next ones).
The dictionaries (.ocd2, a binary trie) are dumped with the ``opencc_dict`` tool that the opencc
wheel ships. The normalize stage uses the characters only when the installed config and
dictionaries have the recorded fingerprint (stages._opencc.fingerprint).

It also records, per config, every key of more than one character of any of its dictionaries
(``phrases``) and the keys of its normalization dictionaries (``normalization``): a text holding
none of them, nor an ideographic description character, is converted by OpenCC character by
character (stages._opencc.CharMap converts such texts with a table).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stages._opencc import OPENCC_CONFIGS, TRIGGERS_FILE  # noqa: E402
from stages._opencc import dictionaries as opencc_dictionaries  # noqa: E402
from stages._opencc import fingerprint as opencc_fingerprint  # noqa: E402


def dump(tool: Path, ocd2: Path, out: Path) -> list[tuple[str, str]]:
    """(key, first value) of every entry of an .ocd2 dictionary."""
    subprocess.run([str(tool), "-i", str(ocd2), "-o", str(out), "-f", "ocd2", "-t", "text"], check=True)
    entries = []
    for line in out.read_text(encoding="utf-8").splitlines():
        key, values = line.split("\t")
        entries.append((key, values.split(" ")[0]))
    return entries


def triggers(entries: list[tuple[str, str]]) -> set[str]:
    out: set[str] = set()
    for key, value in entries:
        if key == value:
            continue
        if len(key) != len(value):
            out |= set(key)
        else:
            out |= {k for k, v in zip(key, value, strict=True) if k != v}
    return out


def main() -> None:
    import opencc

    tool = Path(opencc.__file__).parent / "clib" / "bin" / "opencc_dict"
    if not tool.is_file():
        sys.exit(f"opencc_dict not found at {tool}")
    result = {"opencc": getattr(opencc, "__version__", "")}
    with tempfile.TemporaryDirectory() as tmp:
        for config in OPENCC_CONFIGS:
            chars: set[str] = set()
            phrases: set[str] = set()
            normalizing = set(opencc_dictionaries(config, "normalization"))
            normalization: set[str] = set()
            for i, ocd2 in enumerate(opencc_dictionaries(config)):
                entries = dump(tool, ocd2, Path(tmp) / f"{i}.txt")
                chars |= triggers(entries)
                phrases |= {key for key, _ in entries if len(key) > 1}
                if ocd2 in normalizing:
                    normalization |= {key for key, _ in entries}
            result[config] = {
                "fingerprint": opencc_fingerprint(config),
                "chars": "".join(sorted(chars)),
                "phrases": sorted(phrases),
                "normalization": "".join(sorted(normalization)),
            }
            print(f"{config}: {len(chars)} trigger characters, {len(phrases)} phrases")
    TRIGGERS_FILE.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
