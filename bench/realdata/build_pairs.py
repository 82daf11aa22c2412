"""Regional near-duplicate pairs: the same technical document published for mainland China (zh_CN) and
for Taiwan / Hong Kong (zh_TW / zh_HK), plus the same Tang poems printed in two editions, and hard
negatives (two different documents of the same source).

Usage:
    python bench/realdata/build_pairs.py --cache DIR --out OUT [--max-lo-pairs N] [--max-poetry-pairs N]

Writes OUT/pairs/docs.jsonl (one document a line) and OUT/pairs/pairs.jsonl (one pair a line, naming
the two documents by id). Every pair carries ``jaccard_t2s``: the character 5-gram Jaccard of the two
texts "as read" after OpenCC t2s, 5-grams over the sequence of non-space characters; also
``jaccard_raw`` (no conversion) and, for regional pairs, ``jaccard_tw2sp`` (the zh_TW side through
OpenCC tw2sp, which also maps Taiwan phrases to mainland ones; zh_HK: hk2s) and ``jaccard_s2twp``
(OpenCC s2twp applied to the zh_CN side only, compared with the zh_TW side as shipped: close to 1 means
the zh_TW text was made from the zh_CN one by that conversion rather than translated on its own).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from typing import Any

from _common import (
    LOCALES,
    VARIANT,
    JsonlWriter,
    doc,
    han_fraction,
    jaccard,
    jaccard_as_read,
    message_text,
    nonspace_len,
    shingles,
    stable_hash,
    stable_sample,
    t2s,
)
from _sources import (
    CATALOGUES,
    Unit,
    catalogue,
    catalogue_files,
    dref_sections,
    lo_pages,
    maint_sections,
    man_pages,
    poetry_editions,
)
from fetch import BY_KEY, default_cache

MIN_CHARS = 80  # both sides of a regional pair: at least this many non-space characters
MIN_HAN = 0.15  # ... and at least this share of Han characters (drops pages left untranslated)


@lru_cache(maxsize=4)
def _cc(config: str) -> Any:
    import opencc

    return opencc.OpenCC(config)


def _pair_key_text(u: Unit) -> bool:
    return nonspace_len(u.text) >= MIN_CHARS and han_fraction(u.text) >= MIN_HAN


class PairSet:
    def __init__(self, out: Path) -> None:
        self.docs = JsonlWriter(out / "docs.jsonl")
        self.pairs = JsonlWriter(out / "pairs.jsonl")
        self.seen: set[str] = set()
        self.stats: dict[str, Any] = defaultdict(int)

    def add_doc(self, d: dict[str, Any]) -> None:
        if d["id"] not in self.seen:
            self.seen.add(d["id"])
            self.docs.write(d)

    def add_pair(
        self,
        pair_id: str,
        kind: str,
        label: str,
        source_set: str,
        a: dict[str, Any],
        b: dict[str, Any],
        translation: str,
    ) -> None:
        assert a["split"] == b["split"], (a["id"], b["id"])
        j_t2s, j_raw = jaccard_as_read(a["text"], b["text"])
        p: dict[str, Any] = {
            "pair_id": pair_id,
            "kind": kind,
            "label": label,
            "source_set": source_set,
            "a": a["id"],
            "b": b["id"],
            "variant_a": a["variant"],
            "variant_b": b["variant"],
            "split": a["split"],
            "licence": a["licence"],
            "clean": a["clean"] and b["clean"],
            "translation": translation if label == "duplicate" else "",
            "jaccard_t2s": round(j_t2s, 4),
            "jaccard_raw": round(j_raw, 4),
            "len_a": nonspace_len(a["text"]),
            "len_b": nonspace_len(b["text"]),
        }
        if kind == "regional" and a["variant"] == "zh_CN":
            sa = shingles(a["text"])
            if b["variant"] == "zh_TW":
                conv = str(_cc("s2twp").convert(a["text"]))
                p["jaccard_s2twp"] = round(jaccard(shingles(conv), shingles(b["text"])), 4)
            back = str(_cc("tw2sp" if b["variant"] == "zh_TW" else "hk2s").convert(b["text"]))
            p["jaccard_tw2sp"] = round(jaccard(sa, shingles(back)), 4)
        self.add_doc(a)
        self.add_doc(b)
        self.pairs.write(p)
        self.stats[(source_set, label, a["split"])] += 1

    def close(self) -> None:
        self.docs.close()
        self.pairs.close()


def _udoc(u: Unit, group: str, category: str, pair_id: str) -> dict[str, Any]:
    lang, script = LOCALES[u.locale]
    return doc(
        id=f"{u.key.split(':', 1)[1]}:{u.path}",
        source=u.source,
        licence=u.licence,
        lang=lang,
        script=script,
        category=category,
        group=group,
        text=u.text,
        registry=u.key.split(":")[0],
        clean=u.clean,
        variant=VARIANT[u.locale],
        pair_id=pair_id,
        title=u.title,
    )


def _regional(
    ps: PairSet,
    name: str,
    category: str,
    translation: str,
    a_units: list[Unit],
    b_units: list[Unit],
    limit: int | None = None,
) -> None:
    """Positive pairs of aligned units (same align key), then hard negatives: within one split, each
    second pair's zh_CN side with the zh_TW side of the next pair by length."""
    bmap = {u.align: u for u in b_units}
    cand = [
        (a, bmap[a.align])
        for a in a_units
        if a.align in bmap and _pair_key_text(a) and _pair_key_text(bmap[a.align])
    ]
    if limit is not None:
        cand = stable_sample(cand, limit, key=lambda ab: ab[0].align, salt=name)
    made: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for a, b in cand:
        group = a.align  # the same group id in every set: one page / section is in one split everywhere
        pid = f"{name}:{a.align}"
        da, db = _udoc(a, group, category, pid), _udoc(b, group, category, pid)
        ps.add_pair(pid, "regional", "duplicate", name, da, db, translation)
        made.append((da, db))
    _negatives(ps, name, "regional", made)


def _negatives(ps: PairSet, name: str, kind: str, made: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    by_split: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = defaultdict(list)
    for da, db in made:
        by_split[da["split"]].append((da, db))
    for split, items in sorted(by_split.items()):
        items.sort(key=lambda ab: (nonspace_len(ab[0]["text"]), ab[0]["id"]))
        for i in range(0, len(items) - 1, 2):
            (a, _), (_, b) = items[i], items[i + 1]
            ps.add_pair(f"{name}:neg:{split}:{i // 2}", kind, "different", name, a, b, "")


def build_catalogue_pairs(ps: PairSet, cache: Path) -> None:
    """gettext catalogues shipped for both variants: the messages of the same msgids, in the zh_CN
    catalogue's order, grouped into chunks of 15-40 messages (size varied by a hash), one message a
    line; pair = (zh_CN chunk, zh_TW/zh_HK chunk of the same msgids)."""
    for key, pattern, (loc_a, loc_b) in CATALOGUES:
        pkg = BY_KEY[key]
        name = f"po:{pkg.name}"
        bfiles = dict(catalogue_files(cache, key, pattern, loc_b))
        made = []
        for cat_id, pa in catalogue_files(cache, key, pattern, loc_a):
            if cat_id not in bfiles:
                continue
            pb = bfiles[cat_id]
            mb = {m.key: m for m in catalogue(cache, key, pb)}
            common = [(m, mb[m.key]) for m in catalogue(cache, key, pa) if m.key in mb]
            common = [(x, y) for x, y in common if message_text(x.msgstr) and message_text(y.msgstr)]
            i = 0
            n_chunk = 0
            while i < len(common):
                size = 15 + stable_hash(cat_id, str(n_chunk)) % 26
                part = common[i : i + size]
                if len(part) < 15 and n_chunk:
                    break  # a short tail is left out
                i += size
                ta = "\n".join(message_text(x.msgstr) for x, _ in part)
                tb = "\n".join(message_text(y.msgstr) for _, y in part)
                align = f"{cat_id}#chunk{n_chunk}"
                n_chunk += 1
                pid = f"{name}:{align}"
                la, sa = LOCALES[loc_a]
                lb, sb = LOCALES[loc_b]
                root_a, root_b = cat_id.replace("{loc}", loc_a), cat_id.replace("{loc}", loc_b)
                common_fields = {
                    "category": "ui_messages",
                    "group": pid,
                    "registry": "pypi",
                    "clean": pkg.clean,
                    "pair_id": pid,
                    "n_messages": len(part),
                    "licence": pkg.licence,
                }
                da = doc(
                    id=f"{pkg.name}:{root_a}#chunk{n_chunk - 1}",
                    source=f"{pkg.label}:{root_a}",
                    lang=la,
                    script=sa,
                    text=ta,
                    variant=VARIANT[loc_a],
                    **common_fields,
                )
                db = doc(
                    id=f"{pkg.name}:{root_b}#chunk{n_chunk - 1}",
                    source=f"{pkg.label}:{root_b}",
                    lang=lb,
                    script=sb,
                    text=tb,
                    variant=VARIANT[loc_b],
                    **common_fields,
                )
                ps.add_pair(pid, "regional", "duplicate", name, da, db, "independent (translation teams)")
                made.append((da, db))
        _negatives(ps, name, "regional", made)


def poem_key(text: str) -> str:
    body = text.split("\n", 1)[1] if "\n" in text else text
    han = [ch for ch in t2s(body) if "\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf"]
    return "".join(han[:10])


def build_poetry_pairs(ps: PairSet, cache: Path, limit: int) -> None:
    """The Tang poems printed in both quantangshi and yudingquantangshi: same poem = same first ten Han
    characters of the body after t2s, counted only when that key is unique in each edition."""
    by_ed: dict[str, dict[str, list[tuple[str, str, str]]]] = {
        "quantangshi": defaultdict(list),
        "yudingquantangshi": defaultdict(list),
    }
    for edition, path, title, text in poetry_editions(cache):
        k = poem_key(text)
        if len(k) == 10:
            by_ed[edition][k].append((path, title, text))
    q, y = by_ed["quantangshi"], by_ed["yudingquantangshi"]
    keys = sorted(k for k in q if len(q[k]) == 1 and len(y.get(k, ())) == 1)
    keys = stable_sample(keys, limit, key=lambda k: k, salt="poetry")
    pkg = BY_KEY["npm:chinese-poetry"]
    made = []
    for k in keys:
        pid = f"poetry:{k}"
        docs = []
        for edition, items in (("quantangshi", q[k]), ("yudingquantangshi", y[k])):
            path, title, text = items[0]
            docs.append(
                doc(
                    id=f"chinese-poetry:{path}",
                    source=f"{pkg.label}:{path}",
                    licence=pkg.licence,
                    lang="lzh",
                    script="Hant",
                    category="classical_poetry",
                    group=pid,
                    text=text,
                    registry="npm",
                    clean=True,
                    variant=edition,
                    pair_id=pid,
                    title=title,
                )
            )
        ps.add_pair(pid, "editions", "duplicate", "chinese-poetry", docs[0], docs[1], "two editions")
        made.append((docs[0], docs[1]))
    _negatives(ps, "chinese-poetry", "editions", made)


def build(cache: Path, out: Path, max_lo: int, max_poetry: int) -> dict[str, Any]:
    ps = PairSet(out / "pairs")
    steps = [
        (
            "debian-reference",
            "tech_manual",
            "s2twp-like conversion (see jaccard_s2twp)",
            lambda: (dref_sections(cache, "zh-cn"), dref_sections(cache, "zh-tw")),
            None,
        ),
        (
            "maint-guide",
            "tech_manual",
            "s2twp-like conversion (see jaccard_s2twp)",
            lambda: (maint_sections(cache, "zh-cn"), maint_sections(cache, "zh-tw")),
            None,
        ),
        (
            "manpages-zh",
            "man_page",
            "generated with OpenCC at build time (upstream README)",
            lambda: (list(man_pages(cache, "zh_CN")), list(man_pages(cache, "zh_TW"))),
            None,
        ),
        (
            "libreoffice-help",
            "ui_help",
            "independent (translation teams)",
            lambda: (list(lo_pages(cache, "zh-cn")), list(lo_pages(cache, "zh-tw"))),
            max_lo,
        ),
    ]
    for name, category, translation, load, limit in steps:
        print(f"pairs: {name}", file=sys.stderr, flush=True)
        a_units, b_units = load()
        _regional(ps, name, category, translation, a_units, b_units, limit)
    print("pairs: catalogues", file=sys.stderr, flush=True)
    build_catalogue_pairs(ps, cache)
    print("pairs: chinese-poetry", file=sys.stderr, flush=True)
    build_poetry_pairs(ps, cache, max_poetry)
    ps.close()
    return {
        "docs": ps.docs.count,
        "pairs": ps.pairs.count,
        "by_source": {"/".join(k): v for k, v in sorted(ps.stats.items())},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=default_cache())
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--max-lo-pairs", type=int, default=1500)
    ap.add_argument("--max-poetry-pairs", type=int, default=1200)
    a = ap.parse_args(argv)
    res = build(a.cache, a.out, a.max_lo_pairs, a.max_poetry_pairs)
    print(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
