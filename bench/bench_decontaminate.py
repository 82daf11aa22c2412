"""Decontamination on real text: recall of planted benchmark items and false positives, per Chinese
n-gram length; index size and speed at millions of benchmark n-grams.

Items: benchmark-like multiple-choice items made from real Chinese documents of the corpora
(``--corpora``; zh_mixed: People's Daily 1998, product reviews, fortunes; zh_poetry): the
documents whose id hashes below 3% give each item a question (a 15-60 character window starting
at a sentence) and four choices (2-8 character phrases of other such documents); those documents
are then left out of the corpus. Planted: each variant puts a different item into a different
corpus document (poetry or news):

    exact          question + choices as a test prints them ("A. ..."), at the document's end
    repunctuated   punctuation removed or swapped (ASCII / full width), spaces inserted
    fullwidth      ASCII letters, digits and marks as full-width forms
    traditional    the item through OpenCC s2t
    inside_long    in the middle of three documents joined
    question_only  the question without its choices
    half_question  the first half of the question only (a partial quote)
    edited         one character in eight replaced (a light paraphrase)

Recall: planted documents flagged with their own item (or with an item of the same normalised
text: the index names the first of the items that share an n-gram). False positives: the other documents that
are flagged although they do not contain any item's question (normalised substring test with
Aho-Corasick); documents that do contain one (exact duplicates of a review, say) are reported as
true contamination and left out of both.

    python bench/bench_decontaminate.py --corpora DIR [--ngrams 8 10 13 15 20] [--scale 1000000 10000000]
    python bench/bench_decontaminate.py --mixed zh_mixed.jsonl.gz --poetry zh_poetry.jsonl.gz
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._measure import open_text, proc_status_kb, write_result  # noqa: E402

VARIANTS = (
    "exact",
    "repunctuated",
    "fullwidth",
    "traditional",
    "inside_long",
    "question_only",
    "half_question",
    "edited",
)
PUNCT = "，。、；：？！“”（）,.;:?!"


def _frac(key: str) -> float:
    return int.from_bytes(hashlib.sha1(key.encode()).digest()[:8], "big") / 2**64


def load_docs(mixed: Path, poetry: Path, poetry_docs: int) -> list[dict[str, Any]]:
    docs = []
    with open_text(mixed) as f:
        docs += [json.loads(line) for line in f]
    with open_text(poetry) as f:
        for i, line in enumerate(f):
            if i >= poetry_docs:
                break
            docs.append(json.loads(line))
    for i, d in enumerate(docs):
        d["id"] = str(d.get("id", i))
    return docs


def make_items(sources: list[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """Multiple-choice items from real sentences (see the module docstring)."""
    phrases = []
    for d in sources:
        for part in d["text"].replace("\n", "。").split("。"):
            part = part.strip("，、；： ")
            if 2 <= len(part) <= 8:
                phrases.append(part)
    if len(phrases) < 8:
        phrases += ["正确", "错误", "都不对", "无法判断"] * 2
    items = []
    for d in sources:
        text = d["text"].replace("\n", "")
        if len(text) < 20:
            continue
        starts = [0] + [i + 1 for i, c in enumerate(text) if c in "。！？" and i + 1 < len(text) - 15]
        start = starts[int(_frac("s" + d["id"]) * len(starts))]
        length = 15 + int(_frac("l" + d["id"]) * 46)
        question = text[start : start + length]
        if len(question) < 15:
            continue
        choices = rng.sample(phrases, 4)
        items.append({"id": f"item-{len(items)}", "question": question, "choices": choices, "answer": "A"})
    return items


def printed(item: dict[str, Any]) -> str:
    return item["question"] + "\n" + "\n".join(f"{'ABCD'[i]}. {c}" for i, c in enumerate(item["choices"]))


def variant_text(kind: str, item: dict[str, Any], host: str, others: list[str], rng: random.Random) -> str:
    body = printed(item)
    if kind == "repunctuated":
        out = []
        for c in body:
            if c in PUNCT or c == "\n":
                out.append(rng.choice([" ", "", ",", "、", "；", " - "]))
            else:
                out.append(c + (" " if rng.random() < 0.15 else ""))
        body = "".join(out)
    elif kind == "fullwidth":
        body = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in body)
    elif kind == "traditional":
        import opencc

        body = opencc.OpenCC("s2t").convert(body)
    elif kind == "question_only":
        body = item["question"]
    elif kind == "half_question":
        q = item["question"]
        body = q[: max(len(q) // 2, 8)]
    elif kind == "edited":
        chars = list(body)
        for i in range(3, len(chars), 8):
            if "\u4e00" <= chars[i] <= "\u9fff":
                chars[i] = "某"
        body = "".join(chars)
    if kind == "inside_long":
        return "\n".join([others[0], host, body, others[1]])
    return host + "\n" + body


def normalised(text: str) -> str:
    """The text as the n-gram tokens see it: folded characters of CJK and word runs only."""
    from stages._minhash import CJK, WORD
    from stages._ngrams import decontamination_tables

    fold, cls = decontamination_tables()
    cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    keep = (cls[cps] == CJK) | (cls[cps] == WORD)
    return fold[cps[keep]].astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")


def run_stage(eval_path: Path, texts: list[str], n_cjk: int) -> tuple[list[list[int]], float, int]:
    """(items matched per text, CPU seconds of process, index n-grams) for the real stage."""
    from dataprep.document import Document, Drop
    from dataprep.stage import DriverContext, StageContext, build_params, get
    from dataprep.stats import StageStats

    cls = get("decontaminate")
    params = build_params(cls.Params, {"eval_sets": [str(eval_path)], "ngram_cjk": n_cjk}, "bench")
    stage = cls(params)
    work = Path(tempfile.mkdtemp(prefix="decont-"))
    stats = StageStats()
    stage.setup(DriverContext(work, work, [], 0, {}, stats, label="decontaminate"))
    ctx = StageContext(stats=StageStats(), work_dir=work)
    stage.begin_task(ctx)
    items = json.loads((work / "items.json").read_text())
    index = {it["item"]: i for i, it in enumerate(items)}
    out: list[list[int]] = []
    cpu = 0.0
    for s in range(0, len(texts), 1000):
        batch = [Document(str(i), t) for i, t in enumerate(texts[s : s + 1000], s)]
        c0 = time.process_time()
        results = stage.process(batch, ctx)
        cpu += time.process_time() - c0
        for r in results:
            out.append([index[m["item"]] for m in r.extra["matches"]] if isinstance(r, Drop) else [])
    return out, cpu, stats.counters["index_ngrams"]


def plant_and_measure(args: argparse.Namespace) -> str:
    import ahocorasick

    rng = random.Random(0)
    docs = load_docs(args.mixed, args.poetry, args.poetry_docs)
    is_source = [_frac("src" + d["id"]) < 0.03 and not d["source"].startswith("npm:") for d in docs]
    items = make_items([d for d, s in zip(docs, is_source, strict=True) if s], rng)
    corpus = [d for d, s in zip(docs, is_source, strict=True) if not s]
    if not items:
        return "No benchmark items could be made from these corpora (too few Chinese documents)."
    hosts = [i for i, d in enumerate(corpus) if len(d["text"]) >= 40]
    rng.shuffle(hosts)
    per_variant = args.planted
    planted: dict[int, tuple[str, int]] = {}  # corpus index -> (variant, item)
    item_order = list(range(len(items)))
    rng.shuffle(item_order)
    k = 0
    texts = [d["text"] for d in corpus]
    for variant in VARIANTS:
        for _ in range(per_variant):
            host = hosts[k]
            item = item_order[k % len(item_order)]
            others = [corpus[hosts[-1 - k]]["text"], corpus[hosts[-2 - k - per_variant]]["text"]]
            texts[host] = variant_text(variant, items[item], corpus[host]["text"], others, rng)
            planted[host] = (variant, item)
            k += 1
    eval_path = Path(tempfile.mkdtemp(prefix="decont-eval-")) / "items.jsonl"
    eval_path.write_text("".join(json.dumps(it, ensure_ascii=False) + "\n" for it in items), encoding="utf-8")
    # ground truth for the documents not planted: do they contain a whole (normalised) question?
    automaton = ahocorasick.Automaton()
    for i, it in enumerate(items):
        automaton.add_word(normalised(it["question"]), i)
    automaton.make_automaton()
    keys = [normalised(printed(it)) for it in items]
    truly = {i for i, t in enumerate(texts) if i not in planted and next(automaton.iter(normalised(t)), None)}
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    clean = len(texts) - len(planted) - len(truly)
    lines = [
        f"Corpus: {len(texts):,} documents ({mb:.1f} MB: zh_mixed without the item sources, first "
        f"{args.poetry_docs:,} of zh_poetry); {len(items):,} items from {sum(is_source):,} source documents "
        f"(question 15-60 characters, median {int(np.median([len(it['question']) for it in items]))}); "
        f"{len(planted):,} planted ({per_variant} per variant); {len(truly):,} unplanted documents "
        f"contain a whole question (true contamination, left out); {clean:,} clean documents.",
        "",
        "| n (CJK chars) | " + " | ".join(VARIANTS) + " | all planted | false positives | FP rate | "
        "index n-grams | MB per CPU-s |",
        "|---:|" + "---:|" * (len(VARIANTS) + 6),
    ]
    fp_examples: dict[int, list[str]] = {}
    for n in args.ngrams:
        matched, cpu, ngrams = run_stage(eval_path, texts, n)
        hits = {v: 0 for v in VARIANTS}
        for host, (variant, item) in planted.items():  # its own item, or one with the same text
            hits[variant] += any(keys[m] == keys[item] for m in matched[host])
        fps = [i for i, m in enumerate(matched) if m and i not in planted and i not in truly]
        fp_examples[n] = [
            f"{texts[i][:60]!r} <- {items[matched[i][0]]['question']!r}" for i in fps[: args.show_fp]
        ]
        recall_all = sum(hits.values()) / len(planted)
        lines.append(
            f"| {n} | "
            + " | ".join(f"{hits[v] / per_variant:.3f}" for v in VARIANTS)
            + f" | {recall_all:.3f} | {len(fps):,} | {len(fps) / clean:.5f} | {ngrams:,} | {mb / cpu:.1f} |"
        )
        print(lines[-1], flush=True)
    lines.append("")
    for n, ex in fp_examples.items():
        if ex:
            lines.append(f"False positives at n = {n} (document <- item question), first {len(ex)}:")
            lines += [f"    {e}" for e in ex]
    return "\n".join(lines)


def _reset_peak_rss() -> None:
    """Reset this process's VmHWM to its current RSS (Linux: clear_refs 5), so each build's peak
    is its own."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def scale(args: argparse.Namespace) -> str:
    """Index build time and size, lookup speed and memory for millions of benchmark n-grams."""
    from stages._ngrams import NgramIndex, build_index, ngram_hashes, tokenize

    rng = np.random.default_rng(0)
    han = np.arange(0x4E00, 0x9FA6)
    lines = [
        "| benchmark n-grams | items | build s (CPU s) | index MB on disk | peak RSS MB during build "
        "(+ above the RSS before) | lookup M n-grams/s | RSS after lookups MB |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    probe = "".join(chr(c) for c in rng.choice(han, 2_000_000))
    probe_texts = [probe[i : i + 500] for i in range(0, len(probe), 500)]
    tokens = tokenize(probe_texts)
    queries, _ = ngram_hashes(tokens, 13)
    for target in args.scale:
        n_items = target // 48  # 60-character items: 48 13-grams each
        chars = rng.choice(han, n_items * 60)
        texts = ["".join(map(chr, chars[i * 60 : (i + 1) * 60])) for i in range(n_items)]
        work = Path(tempfile.mkdtemp(prefix="decont-scale-"))
        del chars
        _reset_peak_rss()
        before = proc_status_kb().get("VmRSS", 0)
        c0, t0 = time.process_time(), time.perf_counter()
        count, _ = build_index(texts, 13, 13, work)
        build, build_cpu = time.perf_counter() - t0, time.process_time() - c0
        peak = proc_status_kb().get("VmHWM", 0)
        del texts
        size = sum(p.stat().st_size for p in work.iterdir()) / 1e6
        index = NgramIndex(work)
        t0 = time.perf_counter()
        found = index.lookup(queries)
        lookup = len(queries) / (time.perf_counter() - t0) / 1e6
        lines.append(
            f"| {count:,} | {n_items:,} | {build:.1f} ({build_cpu:.1f}) | {size:.1f} | "
            f"{peak / 1024:.0f} (+{(peak - before) / 1024:.0f}) | {lookup:.1f} | "
            f"{proc_status_kb().get('VmRSS', 0) / 1024:.0f} |"
        )
        print(lines[-1], f"(random hits: {int((found >= 0).sum())})", flush=True)
        for p in work.iterdir():
            p.unlink()
        work.rmdir()
    lines.append("")
    lines.append(
        f"Lookups: {len(queries):,} 13-grams of random Han text (nothing matches: every query goes "
        "through the bit filter, the few it lets through through the binary search)."
    )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", type=Path, default=Path(os.environ.get("DATAPREP_BENCH_CORPORA_DIR", ".")))
    ap.add_argument("--ngrams", type=int, nargs="+", default=[8, 10, 13, 15, 20])
    ap.add_argument("--planted", type=int, default=100, help="planted documents per variant")
    ap.add_argument("--poetry-docs", type=int, default=100_000)
    ap.add_argument("--scale", type=int, nargs="*", default=[1_000_000, 10_000_000])
    ap.add_argument("--show-fp", type=int, default=3)
    ap.add_argument("--mixed", type=Path, help="zh_mixed.jsonl.gz (default: in --corpora)")
    ap.add_argument("--poetry", type=Path, help="zh_poetry.jsonl.gz (default: in --corpora)")
    args = ap.parse_args()
    args.mixed = args.mixed or args.corpora / "zh_mixed.jsonl.gz"
    args.poetry = args.poetry or args.corpora / "zh_poetry.jsonl.gz"
    parts = []
    if args.mixed.exists() and args.poetry.exists():
        parts.append("## Planted items, per Chinese n-gram length\n\n" + plant_and_measure(args))
    else:
        print(f"no {args.mixed} or {args.poetry}: planted-item measurement skipped", file=sys.stderr)
    if args.scale:
        parts.append("## Index at scale\n\n" + scale(args))
    text = "\n\n".join(parts)
    print(text)
    argv = [Path(a).name if os.path.isabs(a) else a for a in sys.argv[1:]]
    path = write_result(
        "decontaminate", "Decontamination", " ".join(["python bench/bench_decontaminate.py", *argv]), text
    )
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
