"""Rebuild stages/data/regional_phrases.tsv: the Taiwan, Hong Kong and mainland phrasings of one
thing (and regional variant characters), each mapped to one representative, all in Simplified
characters, from the dictionaries of the installed OpenCC.

Usage: python bench/make_regional_phrases.py

Read from OpenCC's regional dictionaries, both directions (TWPhrases / TWPhrasesRev,
HKPhrases / HKPhrasesRev: mainland phrase <-> regional phrase; TWVariantsRev(Phrases),
HKVariantsRev(Phrases): regional glyph -> standard glyph), dumped with the ``opencc_dict`` tool
the opencc wheel ships. Every entry ``a -> b`` says ``t2s(a)`` and ``t2s(b)`` name one thing;
the phrasings that entries link, directly or through others, form one class (``档案`` -> ``文件``
and ``文件`` -> ``文档`` put the three in one: Taiwan's 檔案 is the mainland's 文件, Taiwan's 文件
the mainland's 文档), and every member of a class with two or more, in Simplified characters and
as the dictionaries write it, maps to the class's representative: its shortest mainland phrasing
(then the first in code point order). Members map to themselves too, so that forward maximum
matching takes them whole (``信息安全`` is not read as ``信息`` + ``安全``). A text folded with
this table says one thing one way, whichever region wrote it: the normalize stage's t2s leaves
``资讯``, ``伺服器``, ``档案`` in a Taiwanese text, which OpenCC's own configs, written for
Traditional input, no longer match. A variant entry whose key, once converted with t2s, is a
standard Simplified character (a key of STCharacters: ``么``, ``著``) is left out: t2s already maps
the regional glyph to it, and the character has its own meaning in mainland text (``什么``,
``著作``). minhash_dedup folds the text it hashes with this table (stages/_regional.py); the text
that is kept is never changed by it.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from make_opencc_triggers import dump  # noqa: E402

from stages._regional import PHRASES_FILE  # noqa: E402

MAINLAND_TO_REGIONAL = ("TWPhrases", "HKPhrases")
REGIONAL_TO_MAINLAND = ("TWPhrasesRev", "HKPhrasesRev")
VARIANTS = ("TWVariantsRevPhrases", "TWVariantsRev", "HKVariantsRevPhrases", "HKVariantsRev")
DICTIONARIES = (*REGIONAL_TO_MAINLAND, *MAINLAND_TO_REGIONAL, *VARIANTS)


def main() -> None:
    import opencc

    share = Path(opencc.__file__).parent / "clib" / "share" / "opencc"
    tool = Path(opencc.__file__).parent / "clib" / "bin" / "opencc_dict"
    if not tool.is_file():
        sys.exit(f"opencc_dict not found at {tool}")
    t2s = opencc.OpenCC("t2s").convert
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    mainland: set[str] = set()
    written: dict[str, str] = {}  # a form as a dictionary writes it -> its Simplified form
    with tempfile.TemporaryDirectory() as tmp:
        simplified = {k for k, _ in dump(tool, share / "STCharacters.ocd2", Path(tmp) / "st.txt")}
        for name in DICTIONARIES:
            linked = 0
            for key, value in dump(tool, share / f"{name}.ocd2", Path(tmp) / f"{name}.txt"):
                a, b = t2s(key), t2s(value)
                if a == b or (name in VARIANTS and a in simplified):
                    continue
                parent[find(a)] = find(b)
                written.setdefault(key, a)
                written.setdefault(value, b)
                mainland.add(a if name in MAINLAND_TO_REGIONAL else b)
                linked += 1
            print(f"{name}: {linked} links")
    classes: dict[str, list[str]] = {}
    for form in parent:
        classes.setdefault(find(form), []).append(form)
    table: dict[str, str] = {}
    for members in classes.values():
        if len(members) < 2:
            continue
        rep = min(set(members) & mainland or members, key=lambda m: (len(m), m))
        for m in members:
            table[m] = rep
    for form, simple in written.items():
        if simple in table:
            table.setdefault(form, table[simple])
    version = getattr(opencc, "__version__", "")
    lines = [
        f"# phrasing -> representative of its class, Simplified; OpenCC {version} {', '.join(DICTIONARIES)};"
        " rebuilt by bench/make_regional_phrases.py",
        *(f"{k}\t{v}" for k, v in sorted(table.items())),
    ]
    PHRASES_FILE.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(classes)} classes, {len(table)} entries -> {PHRASES_FILE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
