"""How well the lang_id stage labels and keeps real documents, and what it costs the cleaning chain.

Usage:
    python bench/langid_quality.py --docs OUT/langid/docs.jsonl [--split heldout|dev|all]
                                   [--set name=value ...] [--peers] [--errors N]
    python bench/langid_quality.py --throughput CORPUS.jsonl[.gz] ... [--repeat 3]

Quality: the language-identification set of bench/realdata (``build_langid.py``, or
``DATAPREP_REALDATA=OUT`` for OUT/langid/docs.jsonl: documents
labelled with the locale their source names, never a model's guess; fields lang, script,
category, split, text). The stage runs as in a recipe (``lang_id`` with its defaults, ``--set``
overrides a parameter, e.g. ``--set min_letters=30``) over the documents of ``--split``; tune on
``dev``, report ``heldout``. Printed:

* accuracy of ``meta["lang"]`` per language x category (short: one UI message of 10-80
  characters, message_chunk: 15-40 messages, document: a manual page or section, mixed_zh_en_tech:
  Chinese sections full of commands and tables), with ``yue`` documents right only as ``yue``;
* script accuracy (Hans / Hant) of the Chinese and Cantonese documents;
* accuracy per length bucket (characters) over all languages;
* keep rates under the stage's ``keep`` (default zh, en; yue kept as zh): for each language the share
  kept; kept languages' drop rate and the other languages' keep rate;
* with ``--peers``, the same accuracy for the bare model on whole texts (fastText lid.176 with no
  script rule) and, if installed, lingua-language-detector and py3langid, with their speed.

Throughput (``--throughput``): bench_cleaning's chain (every stage of the default recipe before
exact_dedup, 1 process) with and without lang_id in ``--repeat`` back-to-back pairs of runs (the
order alternating), MB of text per CPU-second of the whole chain (with reading) and of the stages
alone (medians), the rate ratio with/without per pair (median and range), and lang_id's own CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

REALDATA_ENV = "DATAPREP_REALDATA"  # the OUT directory of bench/realdata/build_all.py
CATEGORIES = ("short", "message_chunk", "document", "mixed_zh_en_tech")
LENGTHS = (0, 20, 50, 100, 300, 1000, 3000)


def load_docs(path: Path, split: str) -> list[dict[str, Any]]:
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    return [d for d in docs if split == "all" or d["split"] == split]


def parse_sets(items: list[str]) -> dict[str, Any]:
    import yaml

    out = {}
    for item in items:
        key, _, value = item.partition("=")
        out[key] = yaml.safe_load(value)
    return out


def run_stage(docs: list[dict[str, Any]], params: dict[str, Any]) -> tuple[list[dict[str, Any]], Any, float]:
    """[{lang, script, score, kept, detail}] per document, the stage's stats, CPU seconds."""
    from dataprep.document import Document, Drop
    from dataprep.stage import StageContext, build_params
    from dataprep.stats import StageStats
    from stages.lang_id import LangId, LangIdParams

    stage = LangId(build_params(LangIdParams, params, "lang_id"))
    ctx = StageContext(stats=StageStats(), work_dir=Path("."))
    out: list[dict[str, Any]] = []
    cpu = time.process_time()
    for i in range(0, len(docs), 1000):
        batch = [Document(id=d["id"], text=d["text"]) for d in docs[i : i + 1000]]
        for r in stage.process(batch, ctx):
            doc = r.doc if isinstance(r, Drop) else r
            out.append(
                {
                    "lang": doc.meta["lang"],
                    "script": doc.meta["script"],
                    "score": doc.meta["lang_score"],
                    "kept": not isinstance(r, Drop),
                    "detail": r.detail if isinstance(r, Drop) else "",
                }
            )
    return out, ctx.stats, time.process_time() - cpu


def pct(a: int, b: int) -> str:
    return f"{100 * a / b:5.1f}" if b else "    -"


def accuracy_tables(docs: list[dict[str, Any]], preds: list[str], title: str) -> float:
    right: Counter[tuple[str, str]] = Counter()
    total: Counter[tuple[str, str]] = Counter()
    for d, p in zip(docs, preds, strict=True):
        for key in ((d["lang"], d["category"]), (d["lang"], "all"), ("all", d["category"]), ("all", "all")):
            total[key] += 1
            right[key] += p == d["lang"]
    langs = [*sorted({d["lang"] for d in docs}), "all"]
    cats = [c for c in CATEGORIES if total[("all", c)]] + ["all"]
    print(f"\n{title}: accuracy % of meta['lang'] (documents)")
    print("| lang | " + " | ".join(cats) + " |")
    print("|---|" + "---:|" * len(cats))
    for lang in langs:
        cells = [
            f"{pct(right[(lang, c)], total[(lang, c)]).strip()} ({total[(lang, c)]})"
            if total[(lang, c)]
            else "-"
            for c in cats
        ]
        print(f"| {lang} | " + " | ".join(cells) + " |")
    return right[("all", "all")] / total[("all", "all")]


def length_table(docs: list[dict[str, Any]], preds: list[str]) -> None:
    right: Counter[int] = Counter()
    total: Counter[int] = Counter()
    for d, p in zip(docs, preds, strict=True):
        n = len(d["text"])
        b = max(i for i, edge in enumerate(LENGTHS) if n >= edge)
        total[b] += 1
        right[b] += p == d["lang"]
    print("\naccuracy % per length (characters), all languages")
    heads = [
        f"{LENGTHS[i]}-{LENGTHS[i + 1] - 1}" if i + 1 < len(LENGTHS) else f">={LENGTHS[i]}"
        for i in range(len(LENGTHS))
    ]
    print("| " + " | ".join(heads) + " |")
    print("|" + "---:|" * len(heads))
    print(
        "| "
        + " | ".join(f"{pct(right[i], total[i]).strip()} ({total[i]})" for i in range(len(LENGTHS)))
        + " |"
    )


def script_table(docs: list[dict[str, Any]], out: list[dict[str, Any]]) -> None:
    right: Counter[tuple[str, str]] = Counter()
    total: Counter[tuple[str, str]] = Counter()
    for d, o in zip(docs, out, strict=True):
        if d["lang"] not in ("zh", "yue"):
            continue
        key = (f"{d['lang']}/{d['script']}", d["category"])
        total[key] += 1
        right[key] += o["script"] == d["script"]
    rows = sorted({k[0] for k in total})
    cats = [c for c in CATEGORIES if any(total[(r, c)] for r in rows)]
    print("\nscript accuracy % (Hans / Hant) of the Chinese and Cantonese documents")
    print("| lang/script | " + " | ".join(cats) + " |")
    print("|---|" + "---:|" * len(cats))
    for r in rows:
        cells = [
            f"{pct(right[(r, c)], total[(r, c)]).strip()} ({total[(r, c)]})" if total[(r, c)] else "-"
            for c in cats
        ]
        print(f"| {r} | " + " | ".join(cells) + " |")


def keep_table(docs: list[dict[str, Any]], out: list[dict[str, Any]], keep: set[str]) -> None:
    kept: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for d, o in zip(docs, out, strict=True):
        for key in (d["lang"], f"{d['lang']}/{d['category']}"):
            total[key] += 1
            kept[key] += o["kept"]
    langs = sorted({d["lang"] for d in docs})
    cats = [c for c in CATEGORIES if any(total[f"{x}/{c}"] for x in langs)]
    print(f"\nkept % per language (keep: {', '.join(sorted(keep))})")
    print("| lang | " + " | ".join(cats) + " | all |")
    print("|---|" + "---:|" * (len(cats) + 1))
    for lang in langs:
        cells = [
            pct(kept[f"{lang}/{c}"], total[f"{lang}/{c}"]).strip() if total[f"{lang}/{c}"] else "-"
            for c in cats
        ]
        print(f"| {lang} | " + " | ".join(cells) + f" | {pct(kept[lang], total[lang]).strip()} |")
    own = [x for x in langs if x in keep]
    other = [x for x in langs if x not in keep]
    own_total = sum(total[x] for x in own)
    other_total = sum(total[x] for x in other)
    own_dropped = own_total - sum(kept[x] for x in own)
    other_kept = sum(kept[x] for x in other)
    print(
        f"\nkept languages ({', '.join(own)}) dropped: {pct(own_dropped, own_total).strip()}% of {own_total};"
        f"  other languages kept: {pct(other_kept, other_total).strip()}% of {other_total}"
    )
    for cat in cats:
        ot = sum(total[f"{x}/{cat}"] for x in own)
        xt = sum(total[f"{x}/{cat}"] for x in other)
        od = ot - sum(kept[f"{x}/{cat}"] for x in own)
        xk = sum(kept[f"{x}/{cat}"] for x in other)
        print(
            f"  {cat:18s} kept languages dropped {pct(od, ot).strip()}% of {ot},"
            f" others kept {pct(xk, xt).strip()}% of {xt}"
        )


def peers(docs: list[dict[str, Any]]) -> None:
    texts = [d["text"] for d in docs]
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    from stages._lid176 import load_model, model_path

    model = load_model(str(model_path("")))
    cpu = time.process_time()
    preds = [model.f.predict(" ".join(t.split()) + "\n", 1, 0.0, "replace")[0][1][9:] for t in texts]
    secs = time.process_time() - cpu
    acc = accuracy_tables(
        docs, preds, f"bare fastText lid.176, whole text ({mb / secs:.2f} MB per CPU-second)"
    )
    print(f"all: {100 * acc:.1f}%")
    try:
        from lingua import LanguageDetectorBuilder
    except ImportError:
        print("\n(lingua-language-detector not installed)")
    else:
        det = LanguageDetectorBuilder.from_all_languages().build()
        cpu = time.process_time()
        res = [det.detect_language_of(t) for t in texts]
        secs = time.process_time() - cpu
        preds = [r.iso_code_639_1.name.lower() if r else "und" for r in res]
        acc = accuracy_tables(docs, preds, f"lingua 2.x, all languages ({mb / secs:.2f} MB per CPU-second)")
        print(f"all: {100 * acc:.1f}%")
    try:
        import py3langid
    except ImportError:
        print("\n(py3langid not installed)")
    else:
        cpu = time.process_time()
        preds = [py3langid.classify(t)[0] for t in texts]
        secs = time.process_time() - cpu
        acc = accuracy_tables(docs, preds, f"py3langid ({mb / secs:.2f} MB per CPU-second)")
        print(f"all: {100 * acc:.1f}%")


def quality(args: argparse.Namespace) -> None:
    docs = load_docs(args.docs, args.split)
    params = parse_sets(args.set)
    out, stats, secs = run_stage(docs, params)
    mb = sum(len(d["text"].encode("utf-8")) for d in docs) / 1e6
    print(f"{len(docs)} documents ({args.split}), {mb:.2f} MB; lang_id {params or '(defaults)'}")
    print(f"stage CPU {secs:.2f} s ({mb / secs:.1f} MB per CPU-second, first batch loads the model)")
    print(
        "decided by: "
        + ", ".join(f"{k[8:]} {v}" for k, v in sorted(stats.counters.items()) if k.startswith("lang_by."))
    )
    preds = [o["lang"] for o in out]
    acc = accuracy_tables(docs, preds, "lang_id")
    print(f"all: {100 * acc:.1f}%")
    length_table(docs, preds)
    script_table(docs, out)
    from dataprep.stage import build_params
    from stages.lang_id import LangIdParams

    p = build_params(LangIdParams, params, "lang_id")
    keep = set(p.keep) | ({"yue"} if p.yue_as_zh and "zh" in p.keep else set())
    keep_table(docs, out, keep)
    if args.errors:
        errors = defaultdict(list)
        for d, o in zip(docs, out, strict=True):
            if o["lang"] != d["lang"]:
                errors[(d["lang"], o["lang"])].append(
                    (d["category"], d["text"][:100].replace("\n", " | "), o["detail"])
                )
        print("\nerrors (truth -> label: count, examples)")
        for key, items in sorted(errors.items(), key=lambda kv: -len(kv[1])):
            print(f"  {key[0]} -> {key[1]}: {len(items)}")
            for cat, text, detail in items[: args.errors]:
                print(f"      [{cat}] {text!r} {detail}")
    if args.peers:
        peers(docs)


def throughput(args: argparse.Namespace) -> None:
    import bench_cleaning
    import yaml

    recipe = yaml.safe_load((ROOT / "dataprep" / "recipes" / "default.yaml").read_text(encoding="utf-8"))
    names = [next(iter(s)) for s in recipe["stages"]]
    if "lang_id" not in names:
        sys.exit("the default recipe has no lang_id stage")
    without = dict(recipe, stages=[s for s in recipe["stages"] if "lang_id" not in s])
    with tempfile.TemporaryDirectory() as tmp:
        path_without = Path(tmp) / "without_lang_id.yaml"
        path_without.write_text(yaml.safe_dump(without, allow_unicode=True), encoding="utf-8")
        for corpus in args.corpora:
            pairs: list[tuple[float, float, float, float, float]] = []
            mb = 0.0
            for k in range(args.repeat):  # back-to-back pairs, the order alternating against drift
                order = [("with", "default"), ("without", str(path_without))]
                runs = {}
                for label, recipe_ref in order if k % 2 == 0 else order[::-1]:
                    _, nbytes, _, cpu, per_stage = bench_cleaning.clean_share(corpus, recipe_ref, 0, 1)
                    mb = nbytes / 1e6
                    runs[label] = (cpu, sum(per_stage.values()), per_stage.get("lang_id", 0.0))
                (w, ws, lc), (wo, wos, _) = runs["with"], runs["without"]
                pairs.append((w, wo, ws, wos, lc))
            med = [statistics.median(p[i] for p in pairs) for i in range(5)]
            w, wo, ws, wos, lc = med
            print(f"\n{Path(corpus).name}: {mb:.1f} MB of text, {args.repeat} back-to-back pairs of runs")
            for label, i, j in (("chain with reading", 0, 1), ("stages only", 2, 3)):
                ratios = sorted(p[j] / p[i] for p in pairs)  # rate with / rate without, per pair
                print(
                    f"  {label:19s} MB per CPU-second: without lang_id {mb / med[j]:6.2f}, with"
                    f" {mb / med[i]:6.2f}; rate with/without per pair: median {statistics.median(ratios):.3f}"
                    f" (range {ratios[0]:.3f}-{ratios[-1]:.3f})"
                )
            share = f"{lc / w:.1%} of the chain's CPU"
            print(f"  lang_id alone       {lc:.2f} CPU-s, {mb / lc:.1f} MB per CPU-second ({share})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--docs", type=Path, help=f"langid/docs.jsonl of build_langid.py (default: ${REALDATA_ENV}/...)"
    )
    ap.add_argument("--split", default="heldout", choices=["dev", "heldout", "all"])
    ap.add_argument("--set", action="append", default=[], help="lang_id parameter override, name=value")
    ap.add_argument("--peers", action="store_true", help="also the bare model and other libraries")
    ap.add_argument("--errors", type=int, default=0, help="print up to N examples of each confusion")
    ap.add_argument("--throughput", dest="corpora", nargs="+", help="JSONL corpora for the chain timing")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if args.corpora:
        throughput(args)
        return
    if args.docs is None:
        if not os.environ.get(REALDATA_ENV):
            sys.exit(
                f"give --docs OUT/langid/docs.jsonl or set {REALDATA_ENV}=OUT, OUT being built by\n"
                "  python bench/realdata/build_all.py --cache CACHE --out OUT --sets langid"
            )
        args.docs = Path(os.environ[REALDATA_ENV]) / "langid" / "docs.jsonl"
    quality(args)


if __name__ == "__main__":
    main()
