"""False drops and catch rates of the cleaning chain on real labelled documents (bench/realdata).

Usage:
    python bench/filter_quality.py DOCS.jsonl[.gz] [--recipe default] [--before OLD_TREE]
        [--reasons] [--show CATEGORY] [--json OUT.json]

DOCS is the filter-quality set (``bench/realdata/build_quality.py``: OUT/quality/docs.jsonl) or a
slice of it (tests/data/filter_quality_real.jsonl.gz): one document a line with ``text``,
``quality`` (good / bad / neutral), ``category`` and ``split`` (dev / heldout).

It runs the recipe's cleaning chain (every stage before ``exact_dedup``, built as
bench/bench_cleaning.py builds it) on every document, in batches of 1000 in file order, and prints
per split (dev, heldout) one table: a row per stage and one for the whole chain, a column per
category; a cell is the share of the category's documents dropped (false drops for good
categories, catch rate for bad ones, what happens to the neutral code). A stage's row counts what
it drops of every document the text-changing stages before it hand on, whatever the filters
before it decided (so each filter is judged alone); the chain row counts documents dropped by any
stage (each filter's drop is what it would be in the real chain: filters do not change text).

Targets (marked ✗ when missed): a stage drops at most 2% of any good category, the chain at most
5%; with ``--before`` the chain's catch rate on each bad category is no lower than the old code's.
``--before OLD_TREE`` runs this same script with PYTHONPATH=OLD_TREE (e.g. a ``git worktree`` of
an older commit) and prints its tables first. The repository root is appended to sys.path, so an
explicit PYTHONPATH decides which ``dataprep`` and ``stages`` are measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "realdata"))

from _common import read_jsonl

BATCH = 1000
GOOD_STAGE_TARGET = 0.02
GOOD_CHAIN_TARGET = 0.05
CHAIN = "chain"
SPLITS = ("dev", "heldout")
SHORT = {
    "tech_doc_zh_cn": "tech zh_CN",
    "tech_doc_zh_tw": "tech zh_TW",
    "traditional": "trad.",
    "ham_mail": "ham",
    "keyword_dump": "keywords",
    "navigation": "nav",
    "boilerplate_page": "licence/legal",
    "code_only": "code",
}
ORDER = ("good", "bad", "neutral")


def cleaning_stages(recipe_name: str) -> list[tuple[str, Any]]:
    """(label, stage) of every stage of the recipe before exact_dedup."""
    from dataprep.recipe import load_recipe

    recipe = load_recipe(recipe_name)
    names = [s.name for s in recipe.stages]
    stop = names.index("exact_dedup") if "exact_dedup" in names else len(names)
    return [(s.label, s.build()) for s in recipe.stages[:stop]]


def verdicts(docs: list[dict[str, Any]], recipe_name: str) -> list[list[tuple[str, str, float, str]]]:
    """Per document, every (stage label, reason, score, detail) that drops it, in chain order: a
    filter sees every document the text-changing stages before it hand on, and a document a
    text-changing stage drops goes no further."""
    from dataprep.document import Document, Drop
    from dataprep.stage import ScoredFilter, StageContext
    from dataprep.stats import StageStats

    stages = cleaning_stages(recipe_name)
    contexts = [StageContext(stats=StageStats(), work_dir=Path(".")) for _ in stages]
    for (_, st), ctx in zip(stages, contexts, strict=True):
        st.begin_task(ctx)
    out: list[list[tuple[str, str, float, str]]] = [[] for _ in docs]
    for lo in range(0, len(docs), BATCH):
        index = list(range(lo, min(lo + BATCH, len(docs))))
        batch = [Document(id=str(docs[i].get("id", i)), text=docs[i]["text"]) for i in index]
        for (label, st), ctx in zip(stages, contexts, strict=True):
            results = st.process(batch, ctx)
            keep_index, keep = [], []
            for i, r in zip(index, results, strict=True):
                if isinstance(r, Drop):
                    out[i].append((label, r.reason, float(r.score or 0.0), r.detail))
                    if isinstance(st, ScoredFilter):  # filters do not change text: judge on
                        keep_index.append(i)
                        keep.append(r.doc)
                else:
                    keep_index.append(i)
                    keep.append(r)
            index, batch = keep_index, keep
    return out


def measure(docs: list[dict[str, Any]], recipe_name: str) -> dict[str, Any]:
    """Counts per split and category: documents, drops per stage, chain drops, chain first
    reasons."""
    found = verdicts(docs, recipe_name)
    labels = [label for label, _ in cleaning_stages(recipe_name)]
    result: dict[str, Any] = {"stages": labels, "quality": {}, "splits": {}}
    for d, vs in zip(docs, found, strict=True):
        result["quality"][d["category"]] = d["quality"]
        split = result["splits"].setdefault(d["split"], {})
        cat = split.setdefault(
            d["category"], {"docs": 0, "drops": defaultdict(int), "reasons": defaultdict(int)}
        )
        cat["docs"] += 1
        for label in {v[0] for v in vs}:
            cat["drops"][label] += 1
        if vs:
            cat["drops"][CHAIN] += 1
            cat["reasons"][f"{vs[0][0]}/{vs[0][1]}"] += 1
    return json.loads(json.dumps(result))


def categories(result: dict[str, Any]) -> list[str]:
    q = result["quality"]
    return sorted(q, key=lambda c: (ORDER.index(q[c]), c))


def rate(result: dict[str, Any], split: str, cat: str, row: str) -> float | None:
    cell = result["splits"].get(split, {}).get(cat)
    if not cell or not cell["docs"]:
        return None
    return cell["drops"].get(row, 0) / cell["docs"]


def table(result: dict[str, Any], split: str, baseline: dict[str, Any] | None = None) -> str:
    """Markdown table of one split: rows stages + chain, columns categories."""
    cats = [c for c in categories(result) if c in result["splits"].get(split, {})]
    q = result["quality"]
    head = [f"{SHORT.get(c, c)} ({q[c]})" for c in cats]
    docs = [str(result["splits"][split][c]["docs"]) for c in cats]
    lines = ["| stage | " + " | ".join(head) + " |", "|---|" + "---:|" * len(cats)]
    lines.append("| documents | " + " | ".join(docs) + " |")
    for row in [*result["stages"], CHAIN]:
        cells, any_drop = [], False
        for c in cats:
            r = rate(result, split, c, row) or 0.0
            any_drop |= r > 0
            mark = ""
            if q[c] == "good" and r > (GOOD_CHAIN_TARGET if row == CHAIN else GOOD_STAGE_TARGET):
                mark = " ✗"
            if q[c] == "bad" and row == CHAIN and baseline is not None:
                old = rate(baseline, split, c, CHAIN)
                if old is not None and r < old - 1e-12:
                    mark = " ✗"
            cells.append(f"{100 * r:.1f}%{mark}")
        if any_drop or row == CHAIN:
            name = f"**{row}**" if row == CHAIN else row
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def reasons_table(result: dict[str, Any], split: str) -> str:
    """The chain's first drop reason per category (documents)."""
    lines = []
    for c in categories(result):
        cell = result["splits"].get(split, {}).get(c)
        if cell and cell["reasons"]:
            top = Counter(cell["reasons"]).most_common()
            lines.append(f"  {c} ({cell['docs']}): " + ", ".join(f"{r} {n}" for r, n in top))
    return "\n".join(lines)


def report(result: dict[str, Any], title: str, reasons: bool, baseline: dict[str, Any] | None) -> None:
    for split in SPLITS:
        if split not in result["splits"]:
            continue
        print(f"\n### {title}: {split}\n")
        print(table(result, split, baseline))
        if reasons:
            print("\nfirst drop reason per category:")
            print(reasons_table(result, split))


def targets_met(result: dict[str, Any], baseline: dict[str, Any] | None) -> bool:
    for split in result["splits"]:
        for c, quality in result["quality"].items():
            for row in [*result["stages"], CHAIN]:
                r = rate(result, split, c, row)
                if r is None:
                    continue
                if quality == "good" and r > (GOOD_CHAIN_TARGET if row == CHAIN else GOOD_STAGE_TARGET):
                    return False
            old = rate(baseline, split, c, CHAIN) if baseline else None
            new = rate(result, split, c, CHAIN)
            if quality == "bad" and old is not None and new is not None and new < old - 1e-12:
                return False
    return True


def show(docs: list[dict[str, Any]], recipe_name: str, category: str) -> None:
    """Print the dropped documents of one category with every verdict."""
    picked = [d for d in docs if d["category"] == category]
    for d, vs in zip(picked, verdicts(picked, recipe_name), strict=True):
        if vs:
            print(f"== {d['id']} [{d['split']}]")
            for label, reason, score, detail in vs:
                print(f"   {label}/{reason} {score:g} {detail}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("docs", type=Path)
    ap.add_argument("--recipe", default="default")
    ap.add_argument("--before", default="", help="a source tree of older code to measure first")
    ap.add_argument("--reasons", action="store_true", help="print the chain's first drop reasons")
    ap.add_argument("--show", default="", help="print the dropped documents of this category")
    ap.add_argument("--json", type=Path, help="write the counts as JSON")
    args = ap.parse_args()
    docs = list(read_jsonl(args.docs))
    if args.show:
        show(docs, args.recipe, args.show)
        return
    baseline = None
    if args.before:
        env = dict(os.environ, PYTHONPATH=str(Path(args.before).resolve()))
        cmd = [sys.executable, __file__, str(args.docs), "--recipe", args.recipe, "--json", "/dev/stdout"]
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        baseline = json.loads(run.stdout)
        report(baseline, f"before ({args.before})", args.reasons, None)
    result = measure(docs, args.recipe)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
        if str(args.json) == "/dev/stdout":
            return
    import stages

    report(result, f"now ({Path(stages.__file__).resolve().parent.parent})", args.reasons, baseline)
    print("\ntargets met" if targets_met(result, baseline) else "\ntargets NOT met (✗)")


if __name__ == "__main__":
    main()
