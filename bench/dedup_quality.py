"""Labelled precision/recall benchmark of the minhash_dedup stage on real text.

Usage:
    python bench/dedup_quality.py --corpus zh_mixed.jsonl.gz --corpus en_mail.jsonl.gz \
        [--poetry zh_poetry.jsonl.gz] [--originals 2400] [--negatives 6000] [--seed 0] \
        [--set verify=exact --set fn_weight=0.7 ...]

Builds a corpus from real documents (JSONL, one {"id", "text", "script"?} per line): originals,
one near copy of each made with one controlled edit, and unrelated negatives; runs a recipe with
only ``minhash_dedup`` (default parameters unless ``--set``) through ``dataprep prepare``; then
measures, against the truth "exact Jaccard of the stage's shingle sets >= threshold" computed with
the slow pure-Python reference shingler:

* per edit kind, pair precision and recall (a pair is predicted a duplicate when both documents
  end in the same cluster);
* removal precision: removed documents whose true Jaccard with their survivor >= threshold.

Edit kinds: ``chars`` (random character insertions, deletions, substitutions at a rate drawn per
copy from 0.5-6%), ``shuffle`` (lines, or sentences for one-line texts, in a random order),
``boilerplate`` (10-40% of the length appended as site footer lines), ``convert`` (the copy in
the other Chinese script: OpenCC s2t for Simplified originals, t2s for Traditional ones).

With --poetry: the Tang poems printed in both editions of chinese-poetry (quantangshi and
yudingquantangshi; same poem = same first 10 characters of the body after simplification) are
deduplicated together, and the script reports how many of those pairs are found.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from dataprep.docstore import read_rejected
from dataprep.executor import prepare
from dataprep.recipe import parse_recipe
from stages import _minhash as mh

FOOTERS_ZH = [
    "本文来源：新华网 责任编辑：王明",
    "版权所有 © 2024 某某科技有限公司 保留所有权利",
    "京ICP备12345678号-1 京公网安备 11010802000000号",
    "点击下方链接关注我们的公众号，获取更多精彩内容",
    "免责声明：本文仅代表作者个人观点，与本站无关。",
    "如需转载请注明出处，违者必究。联系电话：010-12345678",
    "上一篇：返回列表 下一篇：没有了",
    "扫一扫在手机上阅读本文 分享到：微信 微博 QQ空间",
]
FOOTERS_EN = [
    "Unsubscribe from this list | Update your preferences | Privacy policy",
    "Copyright (c) 2002 Example Networks, Inc. All rights reserved.",
    "This message was sent to you because you subscribed at our web site.",
    "To remove yourself from this mailing list, reply with REMOVE in the subject line.",
    "Sponsored by the Open Source Developer Network: http://example.net/osdn",
    "Get your free email account today at http://mail.example.com",
]
KINDS = ("chars", "shuffle", "boilerplate", "convert")


def read_jsonl(path: Path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def edit_chars(text: str, rng: random.Random) -> str:
    rate = rng.uniform(0.005, 0.06)
    alphabet = [c for c in text if not c.isspace()] or ["x"]
    out = []
    for ch in text:
        if rng.random() >= rate:
            out.append(ch)
            continue
        op = rng.choice(("ins", "del", "sub"))
        if op == "ins":
            out += [ch, rng.choice(alphabet)]
        elif op == "sub":
            out.append(rng.choice(alphabet))
    return "".join(out)


def edit_shuffle(text: str, rng: random.Random) -> str:
    lines = text.split("\n")
    if len([x for x in lines if x.strip()]) >= 3:
        rng.shuffle(lines)
        return "\n".join(lines)
    sentences = [s for s in re.split(r"(?<=[。！？!?.；;])", text) if s]
    rng.shuffle(sentences)
    return "".join(sentences)


def edit_boilerplate(text: str, rng: random.Random, latin: bool) -> str:
    target = len(text) * rng.uniform(0.10, 0.40)
    pool = FOOTERS_EN if latin else FOOTERS_ZH
    added: list[str] = []
    while sum(len(x) for x in added) < target:
        added.append(rng.choice(pool))
    return text + "\n" + "\n".join(added)


def make_corpus(args: argparse.Namespace, out: Path) -> tuple[list[tuple[str, str, str]], dict[str, str]]:
    """Write the labelled corpus; returns ([(original id, copy id, kind)], {id: text})."""
    import opencc

    s2t, t2s = opencc.OpenCC("s2t"), opencc.OpenCC("t2s")
    rng = random.Random(args.seed)
    docs = []
    for path in args.corpus:
        for d in read_jsonl(Path(path)):
            if 50 <= len(d["text"]) <= 20_000:
                docs.append(d)
    rng.shuffle(docs)
    originals = docs[: args.originals]
    negatives = docs[args.originals : args.originals + args.negatives]
    rows: list[dict] = []
    pairs: list[tuple[str, str, str]] = []
    for i, d in enumerate(originals):
        latin = d.get("script") == "Latn"
        kinds = [k for k in KINDS if not (latin and k == "convert")]
        kind = kinds[i % len(kinds)]
        text = d["text"]
        if kind == "chars":
            copy = edit_chars(text, rng)
        elif kind == "shuffle":
            copy = edit_shuffle(text, rng)
        elif kind == "boilerplate":
            copy = edit_boilerplate(text, rng, latin)
        else:
            copy = t2s.convert(text) if d.get("script") == "Hant" else s2t.convert(text)
        oid, cid = f"orig-{i}", f"copy-{i}-{kind}"
        rows += [{"id": oid, "text": text}, {"id": cid, "text": copy}]
        pairs.append((oid, cid, kind))
    rows += [{"id": f"neg-{i}", "text": d["text"]} for i, d in enumerate(negatives)]
    rng.shuffle(rows)
    with open(out, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return pairs, {r["id"]: r["text"] for r in rows}


def run_stage(corpus: Path, out: Path, overrides: dict, workers: int) -> tuple[dict[str, str], float]:
    """Run minhash_dedup alone; returns ({removed id: survivor id}, seconds)."""
    recipe = parse_recipe({"name": "dedup-quality", "stages": [{"minhash_dedup": overrides}]}, "bench")
    t0 = time.monotonic()
    prepare([str(corpus)], out, recipe, workers=workers, quiet=True)
    seconds = time.monotonic() - t0
    survivor = {}
    path = out / "rejected" / "minhash_dedup.jsonl.zst"
    if path.exists():
        for rec in read_rejected(path):
            survivor[rec["id"]] = rec["extra"]["survivor"]
    return survivor, seconds


class Truth:
    """Exact Jaccard of the stage's shingle sets, from the pure-Python reference shingler."""

    def __init__(self, texts: dict[str, str], params: dict):
        self.texts = texts
        self.params = params
        self.cache: dict[str, set[str]] = {}

    def shingles(self, doc_id: str) -> set[str]:
        if doc_id not in self.cache:
            p = self.params
            self.cache[doc_id] = set(
                mh.shingle_strings(self.texts[doc_id], p["ngram_cjk"], p["ngram_word"], p["fold_variants"])
            )
        return self.cache[doc_id]

    def jaccard(self, a: str, b: str) -> float:
        x, y = self.shingles(a), self.shingles(b)
        if not x and not y:
            return 0.0
        return len(x & y) / len(x | y)


def clusters_of(survivor: dict[str, str]) -> dict[str, str]:
    """{document id: cluster key (its survivor id)} for every clustered document."""
    cluster = {removed: surv for removed, surv in survivor.items()}
    cluster.update({surv: surv for surv in survivor.values()})
    return cluster


def report_pairs(pairs, cluster, truth: Truth, threshold: float) -> dict:
    per_kind = defaultdict(lambda: {"pairs": 0, "true": 0, "pred": 0, "tp": 0, "j": []})
    for oid, cid, kind in pairs:
        j = truth.jaccard(oid, cid)
        pred = oid in cluster and cluster.get(oid) == cluster.get(cid)
        k = per_kind[kind]
        k["pairs"] += 1
        k["true"] += j >= threshold
        k["pred"] += pred
        k["tp"] += pred and j >= threshold
        k["j"].append(j)
    return per_kind


def print_table(per_kind: dict, threshold: float) -> tuple[float, float]:
    print(f"\npair precision/recall against true Jaccard >= {threshold} (shingles of the stage)")
    print(
        f"{'edit kind':<12} {'pairs':>6} {'J>=t':>6} {'found':>6} {'TP':>6} {'precision':>9} {'recall':>7} "
        f"{'J median':>8} {'J<0.7':>6} {'0.7-0.9':>7}"
    )
    tot = {"pairs": 0, "true": 0, "pred": 0, "tp": 0, "j": []}
    for kind in KINDS:
        if kind not in per_kind:
            continue
        k = per_kind[kind]
        for key in ("pairs", "true", "pred", "tp"):
            tot[key] += k[key]
        tot["j"] += k["j"]
        _row(kind, k)
    _row("all", tot)
    precision = tot["tp"] / tot["pred"] if tot["pred"] else 1.0
    recall = tot["tp"] / tot["true"] if tot["true"] else 1.0
    return precision, recall


def _row(name: str, k: dict) -> None:
    j = np.asarray(k["j"])
    precision = k["tp"] / k["pred"] if k["pred"] else float("nan")
    recall = k["tp"] / k["true"] if k["true"] else float("nan")
    print(
        f"{name:<12} {k['pairs']:>6} {k['true']:>6} {k['pred']:>6} {k['tp']:>6} {precision:>9.3f} "
        f"{recall:>7.3f} {np.median(j):>8.3f} {np.mean(j < 0.7):>6.2f} "
        f"{np.mean((j >= 0.7) & (j < 0.9)):>7.2f}"
    )


def removal_precision(survivor: dict[str, str], truth: Truth, threshold: float) -> tuple[int, int]:
    good = sum(truth.jaccard(r, s) >= threshold for r, s in survivor.items())
    return good, len(survivor)


def poetry_check(args: argparse.Namespace, work: Path, overrides: dict, threshold: float) -> None:
    tang, yuding = [], []
    for d in read_jsonl(Path(args.poetry)):
        if "quantangshi/poet.tang." in d["id"]:
            tang.append(d)
        elif "yudingquantangshi" in d["id"]:
            yuding.append(d)
    fold, cls = mh.char_tables(True)

    def opening(text: str) -> str:
        body = text.split("\n", 1)[1] if "\n" in text else ""
        chars = [chr(int(fold[ord(c)])) for c in body if cls[ord(c)] == mh.CJK]
        return "".join(chars[:10]) if len(chars) >= 10 else ""

    by_open: dict[str, list[str]] = defaultdict(list)
    for d in tang:
        key = opening(d["text"])
        if key:
            by_open[key].append(d["id"])
    same: list[tuple[str, str]] = []
    for d in yuding:
        key = opening(d["text"])
        for tid in by_open.get(key, [])[:3]:
            same.append((tid, d["id"]))
    corpus = work / "tang.jsonl"
    with open(corpus, "w", encoding="utf-8") as f:
        for d in tang + yuding:
            f.write(json.dumps({"id": d["id"], "text": d["text"]}, ensure_ascii=False) + "\n")
    survivor, seconds = run_stage(corpus, work / "tang-out", overrides, args.workers)
    cluster = clusters_of(survivor)
    texts = {d["id"]: d["text"] for d in tang + yuding}
    truth = Truth(texts, {**DEFAULTS, **overrides})
    found = [a in cluster and cluster.get(a) == cluster.get(b) for a, b in same]
    js = [truth.jaccard(a, b) for a, b in same]
    near = [j >= threshold for j in js]
    print(
        f"\nTang poems in both editions ({len(tang):,} quantangshi + {len(yuding):,} yudingquantangshi docs, "
        f"stage {seconds:.1f}s):"
    )
    print(f"  pairs with the same opening (same poem):      {len(same):,}")
    print(f"  of which true Jaccard >= {threshold}:               {sum(near):,}")
    print(
        f"  found (same cluster), all same-poem pairs:    {sum(found):,} "
        f"({sum(found) / max(len(same), 1):.1%})"
    )
    hit = sum(f and n for f, n in zip(found, near, strict=True))
    print(f"  found among pairs with J >= {threshold}:             {hit:,} ({hit / max(sum(near), 1):.1%})")
    good, removed = removal_precision(survivor, truth, threshold)
    print(
        f"  removed documents: {removed:,}; J(removed, survivor) >= {threshold}: {good / max(removed, 1):.3f}"
    )


DEFAULTS = {"ngram_cjk": 5, "ngram_word": 5, "fold_variants": True, "threshold": 0.8}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", action="append", required=True, help="JSONL(.gz) of real documents")
    ap.add_argument("--poetry", help="zh_poetry.jsonl.gz (chinese-poetry): check the two Tang editions")
    ap.add_argument("--originals", type=int, default=2400)
    ap.add_argument("--negatives", type=int, default=6000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], help="minhash_dedup parameter override, k=v (YAML)")
    args = ap.parse_args()
    import yaml

    overrides = {}
    for item in args.set:
        key, value = item.split("=", 1)
        overrides[key] = yaml.safe_load(value)
    params = {**DEFAULTS, **overrides}
    threshold = params["threshold"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        pairs, texts = make_corpus(args, work / "labelled.jsonl")
        survivor, seconds = run_stage(work / "labelled.jsonl", work / "out", overrides, args.workers)
        print(
            f"labelled corpus: {len(texts):,} documents ({len(pairs):,} original/copy pairs), "
            f"minhash_dedup {overrides or 'defaults'}: {seconds:.1f}s, {len(survivor):,} removed"
        )
        truth = Truth(texts, params)
        per_kind = report_pairs(pairs, clusters_of(survivor), truth, threshold)
        precision, recall = print_table(per_kind, threshold)
        good, removed = removal_precision(survivor, truth, threshold)
        print(
            f"\nremoval precision (J(removed, survivor) >= {threshold}): {good}/{removed} = "
            f"{good / max(removed, 1):.3f}"
        )
        print(f"overall pair precision {precision:.3f}, recall {recall:.3f} (targets >= 0.95)")
        if args.poetry:
            poetry_check(args, work, overrides, threshold)


if __name__ == "__main__":
    main()
