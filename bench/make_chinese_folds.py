"""Rebuild the two tables that minhash_dedup folds Chinese text with before hashing it:

* stages/data/regional_phrases.tsv: the Taiwan, Hong Kong and mainland phrasings of one thing
  (and regional variant characters), each mapped to one representative, all in Simplified
  characters, from the dictionaries of the installed OpenCC;
* stages/data/variant_characters.tsv: variant forms of one character (異體字: 喫/吃, 煖/暖, 爲/為,
  疎/疏, 脚/腳), each mapped to one representative, from the Unicode Han database.

Usage: python bench/make_chinese_folds.py --unihan Unihan_Variants.txt[.bz2]

``Unihan_Variants.txt`` ships in Debian's ``unicode-data`` package (``apt-get download
unicode-data``; 15.0.0-1: /usr/share/unicode/Unihan_Variants.txt.bz2) and in Unihan.zip from
unicode.org (Unicode License v3).

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

Variant characters: the characters that Unihan's kZVariant (same character, another glyph) and
kSemanticVariant (same meaning) link, directly or through others, and through OpenCC t2s of each
(a Traditional character and its Simplified form), form one class (at most a handful of
characters); every member maps to the class's representative: the first, in code point order, of
the members t2s leaves alone (else of all members). The MinHash character table applies it after
t2s (stages/_minhash.char_tables); so two editions of a poem that write 喫 and 吃, 堦 and 階 hash
alike. kSpecializedSemanticVariant (same meaning in some contexts only) and kSpoofingVariant are
not used.
"""

from __future__ import annotations

import argparse
import bz2
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from make_opencc_triggers import dump  # noqa: E402

from stages._minhash import VARIANTS_FILE  # noqa: E402
from stages._regional import PHRASES_FILE  # noqa: E402

MAINLAND_TO_REGIONAL = ("TWPhrases", "HKPhrases")
REGIONAL_TO_MAINLAND = ("TWPhrasesRev", "HKPhrasesRev")
VARIANTS = ("TWVariantsRevPhrases", "TWVariantsRev", "HKVariantsRevPhrases", "HKVariantsRev")
DICTIONARIES = (*REGIONAL_TO_MAINLAND, *MAINLAND_TO_REGIONAL, *VARIANTS)


def regional_phrases() -> None:
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


VARIANT_FIELDS = ("kZVariant", "kSemanticVariant")


def variant_characters(unihan: Path) -> None:
    import opencc

    t2s = opencc.OpenCC("t2s").convert
    opener = bz2.open if unihan.suffix == ".bz2" else open
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def link(a: str, b: str) -> None:
        parent[find(a)] = find(b)

    with opener(unihan, "rt", encoding="utf-8") as f:
        for line in f:
            if line.startswith("#"):
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3 or parts[1] not in VARIANT_FIELDS:
                continue
            a = chr(int(parts[0][2:], 16))
            for m in re.finditer(r"U\+([0-9A-F]+)", parts[2]):
                link(a, chr(int(m.group(1), 16)))
    for c in list(parent):
        s = t2s(c)
        if len(s) == 1 and s != c:
            link(c, s)
    classes: dict[str, list[str]] = {}
    for c in parent:
        classes.setdefault(find(c), []).append(c)
    table: dict[str, str] = {}
    for members in classes.values():
        stable = [m for m in members if t2s(m) == m]
        rep = min(stable or members)
        for m in members:
            if m != rep:
                table[m] = rep
    lines = [
        f"# variant character -> representative of its class; Unihan {', '.join(VARIANT_FIELDS)} "
        "and OpenCC t2s; rebuilt by bench/make_chinese_folds.py",
        *(f"{k}\t{v}" for k, v in sorted(table.items())),
    ]
    VARIANTS_FILE.write_text("\n".join(lines) + "\n", encoding="utf-8")
    sizes = sorted((len(m) for m in classes.values()), reverse=True)
    print(f"{len(classes)} variant classes (largest {sizes[:3]}), {len(table)} entries -> {VARIANTS_FILE}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--unihan", type=Path, required=True, help="Unihan_Variants.txt or .txt.bz2")
    args = ap.parse_args()
    regional_phrases()
    variant_characters(args.unihan)


if __name__ == "__main__":
    main()
