"""The default recipe's deduplication on real labelled pairs (tests/data/dedup_regional_pairs.jsonl.gz,
see tests/data/SOURCES): gettext catalogue chunks of Django, Wagtail, Sphinx, Trac and humanize in
their zh_CN and zh_TW (zh_HK) translations, the same Tang poems in two editions, and negative
pairs (different chunks of one catalogue, different poems).

Truth is the "as read" Jaccard of each pair (character 5-grams of the non-space characters after
OpenCC t2s, stored with the pair). bench/dedup_quality.py prints the full table on the whole real
set; this test keeps the two things that must not regress: every pair at 0.85 or above whose two
copies reach deduplication loses a copy to it, and no labelled negative pair does.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from dataprep.docstore import read_rejected
from dataprep.executor import prepare
from dataprep.recipe import load_recipe, parse_recipe

pytestmark = pytest.mark.e2e

DATA = Path(__file__).parent / "data" / "dedup_regional_pairs.jsonl.gz"
DEDUP = {"exact_dedup", "paragraph_dedup", "minhash_dedup"}


def pairs() -> list[dict]:
    with gzip.open(DATA, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def fates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """{document id: its rejected/ record} after the default recipe up to minhash_dedup."""
    tmp = tmp_path_factory.mktemp("real-pairs")
    docs = {}
    for p in pairs():
        docs[p["a"]["id"]], docs[p["b"]["id"]] = p["a"]["text"], p["b"]["text"]
    corpus = tmp / "pairs.jsonl"
    with open(corpus, "w", encoding="utf-8") as f:
        for doc_id in sorted(docs, reverse=True):  # the copies are not in edition order
            f.write(json.dumps({"id": doc_id, "text": docs[doc_id]}, ensure_ascii=False) + "\n")
    resolved = load_recipe("default").resolved()
    names = [next(iter(s)) for s in resolved["stages"]]
    resolved["stages"] = resolved["stages"][: names.index("minhash_dedup") + 1]
    prepare([str(corpus)], tmp / "out", parse_recipe(resolved, "test"), workers=1, quiet=True)
    out = {}
    for path in (tmp / "out" / "rejected").glob("*.jsonl.zst"):
        for rec in read_rejected(path):
            out[rec["id"]] = rec
    return out


def lost_to_dedup(fates: dict[str, dict], a: str, b: str) -> bool:
    """One copy was dropped by deduplication against the other (or emptied of boilerplate)."""
    for x, y in ((a, b), (b, a)):
        rec = fates.get(x)
        if (
            rec
            and rec["stage"] in DEDUP
            and (rec["stage"] == "paragraph_dedup" or rec["extra"].get("survivor") == y)
        ):
            return True
    return False


def test_every_pair_at_085_or_above_loses_a_copy_to_dedup(fates: dict[str, dict]) -> None:
    near = [p for p in pairs() if p["label"] == "duplicate" and p["jaccard_t2s"] >= 0.85]
    reached = [
        p
        for p in near
        if not any(
            fates.get(d["id"], {}).get("stage", "dedup") not in DEDUP
            for d in (p["a"], p["b"])
            if d["id"] in fates
        )
    ]
    assert len(near) >= 150 and len(reached) >= len(near) - 3  # a filter may drop a copy
    missed = [p["pair_id"] for p in reached if not lost_to_dedup(fates, p["a"]["id"], p["b"]["id"])]
    assert missed == []


def test_the_regional_fold_finds_translations_that_differ_beyond_characters(tmp_path: Path) -> None:
    """Catalogue chunks whose zh_TW wording differs from zh_CN's beyond t2s (as read below 0.85,
    at 0.8 or above once OpenCC's tw2sp phrases are applied): minhash_dedup finds more of them with
    ``fold_regional`` than without, and most of them."""
    regional = [
        p
        for p in pairs()
        if p["label"] == "duplicate"
        and p["kind"] == "regional"
        and p["jaccard_t2s"] < 0.85
        and p.get("jaccard_tw2sp", 0) >= 0.8
    ]
    corpus = tmp_path / "regional.jsonl"
    with open(corpus, "w", encoding="utf-8") as f:
        for p in regional:
            for d in (p["a"], p["b"]):
                f.write(json.dumps({"id": d["id"], "text": d["text"]}, ensure_ascii=False) + "\n")
    found = {}
    for fold in (True, False):
        stages = [{"normalize": {"opencc": "t2s"}}, {"minhash_dedup": {"fold_regional": fold}}]
        out = tmp_path / f"fold-{fold}"
        prepare([str(corpus)], out, parse_recipe({"name": "t", "stages": stages}, "test"), quiet=True)
        path = out / "rejected" / "minhash_dedup.jsonl.zst"
        fates = {r["id"]: r for r in read_rejected(path)} if path.exists() else {}
        found[fold] = sum(lost_to_dedup(fates, p["a"]["id"], p["b"]["id"]) for p in regional)
    assert found[True] >= 0.75 * len(regional) and found[True] > found[False]


def test_no_negative_pair_loses_a_copy_against_the_other(fates: dict[str, dict]) -> None:
    negatives = [p for p in pairs() if p["label"] == "different"]
    assert len(negatives) >= 150
    assert not [p["pair_id"] for p in negatives if lost_to_dedup(fates, p["a"]["id"], p["b"]["id"])]
