"""Fetch every pinned package and build the three real-data sets, then write their statistics.

Usage:
    python bench/realdata/build_all.py --cache DIR --out OUT [--skip-fetch] [--sets pairs,langid,quality]

Writes OUT/pairs/{docs,pairs}.jsonl, OUT/langid/docs.jsonl, OUT/quality/docs.jsonl and
OUT/STATS.md (counts per set / category / split, the Jaccard histogram of the pairs, examples).
Runs in one process (one core); about 5 minutes on the 2-core machine once the packages are cached.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import build_langid
import build_pairs
import build_quality
from _common import read_jsonl
from fetch import default_cache, fetch_all

BUCKETS = (
    (0.0, 0.5, "<0.5"),
    (0.5, 0.8, "0.5-0.8"),
    (0.8, 0.85, "0.8-0.85"),
    (0.85, 0.9, "0.85-0.9"),
    (0.9, 1.0001, "0.9-1.0"),
)


def _bucket(j: float) -> str:
    return next(name for lo, hi, name in BUCKETS if lo <= j < hi)


def _table(rows: list[list[Any]], head: list[str]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _excerpt(text: str, lines: int = 4, width: int = 100) -> str:
    ls = [ln[:width] for ln in text.splitlines() if ln.strip()][:lines]
    return "\n".join("    " + ln for ln in ls)


def stats(out: Path) -> str:
    md = ["# Real-data sets: statistics", ""]
    # pairs
    pairs = list(read_jsonl(out / "pairs" / "pairs.jsonl"))
    hist: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for p in pairs:
        hist[(p["source_set"], p["label"])][_bucket(p["jaccard_t2s"])] += 1
        hist[("ALL " + p["kind"], p["label"])][_bucket(p["jaccard_t2s"])] += 1
    rows = []
    for (src, label), c in sorted(hist.items()):
        splits = Counter(p["split"] for p in pairs if p["source_set"] == src and p["label"] == label)
        rows.append(
            [
                src,
                label,
                sum(c.values()),
                *[c[b[2]] for b in BUCKETS],
                f"{splits['dev']}/{splits['heldout']}" if splits else "",
            ]
        )
    md += [
        "## Pairs (jaccard_t2s: character 5-grams of non-space characters after OpenCC t2s)",
        "",
        _table(rows, ["source", "label", "pairs", *[b[2] for b in BUCKETS], "dev/heldout"]),
        "",
    ]
    s2: dict[str, list[float]] = defaultdict(list)
    for p in pairs:
        if p["label"] == "duplicate" and "jaccard_s2twp" in p:
            s2[p["source_set"]].append(p["jaccard_s2twp"])
    rows = [
        [k, len(v), round(sorted(v)[len(v) // 2], 3), round(sum(x >= 0.95 for x in v) / len(v), 3)]
        for k, v in sorted(s2.items())
    ]
    md += [
        "jaccard_s2twp (zh_CN side through OpenCC s2twp vs the zh_TW side): near 1 = converted, "
        "not translated",
        "",
        _table(rows, ["source", "pairs", "median", "share >= 0.95"]),
        "",
    ]
    tw: dict[str, Counter[str]] = defaultdict(Counter)
    for p in pairs:
        if p["label"] == "duplicate" and "jaccard_tw2sp" in p:
            tw[p["source_set"]][_bucket(p["jaccard_tw2sp"])] += 1
    rows = [[k, sum(c.values()), *[c[b[2]] for b in BUCKETS]] for k, c in sorted(tw.items())]
    md += [
        "jaccard_tw2sp (zh_TW side through OpenCC tw2sp, phrases included; zh_HK: hk2s) for the "
        "duplicate regional pairs",
        "",
        _table(rows, ["source", "pairs", *[b[2] for b in BUCKETS]]),
        "",
    ]
    # langid
    lid = Counter()
    for d in read_jsonl(out / "langid" / "docs.jsonl"):
        lab = d["lang"] + ("/" + d["script"] if d["lang"] == "zh" else "")
        lid[(lab, d["category"], d["split"])] += 1
    langs = sorted({k[0] for k in lid})
    cats = sorted({k[1] for k in lid})
    rows = [[lang, *[f"{lid[(lang, c, 'dev')]}/{lid[(lang, c, 'heldout')]}" for c in cats]] for lang in langs]
    md += ["## Language identification (dev/heldout)", "", _table(rows, ["lang", *cats]), ""]
    # quality
    q = Counter()
    examples: dict[str, dict[str, Any]] = {}
    for d in read_jsonl(out / "quality" / "docs.jsonl"):
        q[(d["quality"], d["category"], d["split"])] += 1
        examples.setdefault(d["category"], d)
    rows = [
        [qual, cat, q[(qual, cat, "dev")], q[(qual, cat, "heldout")]]
        for qual, cat in sorted({(k[0], k[1]) for k in q})
    ]
    md += ["## Filter quality", "", _table(rows, ["quality", "category", "dev", "heldout"]), ""]
    md += ["## Examples (first lines)", ""]
    for cat, d in sorted(examples.items()):
        md += [f"- `{cat}` {d['id'][:90]}", "", "```", _excerpt(d["text"]), "```", ""]
    return "\n".join(md)


REQUIRED = ("id", "source", "licence", "lang", "script", "category", "split", "group", "clean", "text")
SCRIPTS = {"Hans", "Hant", "Latn", "Jpan", "Kore", "Cyrl", "mixed"}


def validate(out: Path) -> list[str]:
    """Invariants of the built sets; returns the problems found (empty: all good)."""
    problems: list[str] = []
    for name in ("pairs/docs.jsonl", "langid/docs.jsonl", "quality/docs.jsonl"):
        ids: set[str] = set()
        group_split: dict[str, str] = {}
        n = held = 0
        for d in read_jsonl(out / name):
            n += 1
            held += d.get("split") == "heldout"
            miss = [f for f in REQUIRED if f not in d]
            if miss:
                problems.append(f"{name}: {d.get('id')} lacks {miss}")
            if d.get("script") not in SCRIPTS:
                problems.append(f"{name}: {d.get('id')} script {d.get('script')!r}")
            if d["id"] in ids:
                problems.append(f"{name}: duplicate id {d['id']}")
            ids.add(d["id"])
            if group_split.setdefault(d["group"], d["split"]) != d["split"]:
                problems.append(f"{name}: group {d['group']} in both splits")
            if not str(d.get("text", "")).strip():
                problems.append(f"{name}: {d['id']} has an empty text")
        if n and not 0.2 <= held / n <= 0.4:
            problems.append(f"{name}: heldout share {held / n:.2f}")
        if name == "pairs/docs.jsonl":
            split_of_doc = {d["id"]: d["split"] for d in read_jsonl(out / name)}
            for p in read_jsonl(out / "pairs" / "pairs.jsonl"):
                sa, sb = split_of_doc.get(p["a"]), split_of_doc.get(p["b"])
                if sa is None or sb is None or sa != sb or sa != p["split"]:
                    problems.append(f"pairs: {p['pair_id']} documents missing or split across splits")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=default_cache())
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--skip-fetch", action="store_true")
    ap.add_argument("--allow-newer-deb", action="store_true")
    ap.add_argument("--sets", default="pairs,langid,quality", help="comma-separated subset to (re)build")
    a = ap.parse_args(argv)
    cache = a.cache.expanduser()
    if not a.skip_fetch:
        fetch_all(cache, None, a.allow_newer_deb)
    builders = {
        "pairs": lambda: build_pairs.build(cache, a.out, 1500, 1200),
        "langid": lambda: build_langid.build(cache, a.out, 300, 400),
        "quality": lambda: build_quality.build(cache, a.out, 400),
    }
    summary = a.out / "summary.json"
    res = json.loads(summary.read_text()) if summary.exists() else {}
    for name in a.sets.split(","):
        if name:
            res[name] = builders[name]()
    summary.write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n")
    text = stats(a.out)
    (a.out / "STATS.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    problems = validate(a.out)
    for msg in problems[:50]:
        print("PROBLEM", msg, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
