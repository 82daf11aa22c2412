"""The whole pipeline against the tokenizer alone: `dataprep prepare` vs Hugging Face encode_batch.

Usage:
    python bench/bench_throughput.py CORPUS.jsonl.gz [CORPUS ...] [--mb 40] [--workers 1 2]

For each corpus, on the same text (its first --mb MB, written as 8 uncompressed JSONL files), in
one run:
  prepare, N workers        `dataprep prepare` with the default recipe (normalize, filters, PII,
                            exact + paragraph + MinHash dedup, tokenizer training, tokenize, pack,
                            MindRecord + .bin, stats, report), wall time from start to exit
  HF encode_batch, N thr.   tokenizers' encode_batch over the same texts, batches of 1000, with the
                            tokenizer that run trained (RAYON_NUM_THREADS=N)
  engine, N threads         the same through dataprep's tokenizer (the fast engine when it
                            applies), with the share of documents whose ids equal HF's
  per stage                 MB of corpus text per CPU-second of every stage in the 1-worker run
                            (timings.json's task_cpu_seconds), and the wall seconds of each
                            driver step (decides, finalize)
and prints the ratio prepare / HF encode_batch at equal cores (target >= 1.5). MB = 10**6 UTF-8
bytes of document text. The tables are also written to bench/results/throughput-<date>.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _measure import Measured, run_measured, write_result
from bench_end_to_end import bare_tokenizer, write_slice

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
TARGET = 1.5

ENGINE_CODE = """
import json, os, sys, time
import numpy as np
from tokenizers import Tokenizer
from dataprep.tokenizers.load import load_tokenizer
path, texts_file, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
texts = json.load(open(texts_file, encoding="utf-8"))
tok = load_tokenizer(path)  # threads: RAYON_NUM_THREADS
tok.encode_batch(texts[:600])  # the identity check on first use is not timed
t0 = time.perf_counter()
ids = []
for i in range(0, len(texts), 1000):
    ids += tok.encode_batch(texts[i : i + 1000])
seconds = time.perf_counter() - t0
ref = Tokenizer.from_file(path)
ref.encode_special_tokens = True
same = 0
for i in range(0, len(texts), 1000):
    for a, e in zip(ids[i : i + 1000], ref.encode_batch(texts[i : i + 1000], add_special_tokens=False)):
        same += np.array_equal(a, e.ids)
print(json.dumps({"seconds": seconds, "engine": tok.engine, "identical": same, "docs": len(texts)}))
"""


def engine_alone(tokenizer: Path, texts_file: Path, threads: int) -> dict:
    """Seconds of dataprep's tokenizer over the texts, its engine and its id identity with HF."""
    env = {**os.environ, "RAYON_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", ENGINE_CODE, str(tokenizer), str(texts_file), str(threads)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_corpus(
    corpus: Path, mb_limit: float, workers: list[int], tmp: Path
) -> tuple[list[str], list[float]]:
    """Markdown lines of this corpus's tables, and its prepare/HF ratios."""
    dataprep = str(Path(sys.executable).with_name("dataprep"))
    docs, nbytes, texts = write_slice(corpus, tmp / "in", int(mb_limit * 1e6))
    mb = nbytes / 1e6
    print(f"{corpus.name}: first {docs:,} documents, {mb:.1f} MB of text", flush=True)
    runs: dict[int, Measured] = {}
    for n in workers:
        out = tmp / f"out{n}"
        m = run_measured(
            [dataprep, "prepare", str(tmp / "in"), "--out", str(out), "--quiet", "--workers", str(n)]
        )
        if m.returncode:
            raise SystemExit(f"prepare failed:\n{m.stderr[-3000:]}")
        runs[n] = m
        print(f"  prepare, {n} worker(s): {m.seconds:.1f} s", flush=True)
    first = tmp / f"out{workers[0]}"
    tokenizer = first / "tokenizer" / "tokenizer.json"
    texts_file = tmp / "texts.json"
    texts_file.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    rows = [
        f"### {corpus.name}: {docs:,} documents, {mb:.1f} MB of text",
        "",
        "| run | seconds | MB/s | prepare / HF encode_batch |",
        "|---|---:|---:|---:|",
    ]
    ratios = []
    engine_rows = []
    for n in workers:
        hf = bare_tokenizer(tokenizer, texts, threads=n).seconds
        fast = engine_alone(tokenizer, texts_file, n)
        ratio = hf / runs[n].seconds
        ratios.append(ratio)
        rows.append(
            f"| prepare, {n} worker(s) | {runs[n].seconds:.1f} | {mb / runs[n].seconds:.2f} | {ratio:.2f} |"
        )
        rows.append(f"| HF encode_batch, {n} thread(s) | {hf:.1f} | {mb / hf:.2f} | |")
        engine_rows.append(
            f"| {fast['engine']}, {n} thread(s) | {fast['seconds']:.1f} | {mb / fast['seconds']:.2f} | "
            f"{hf / fast['seconds']:.2f} | {fast['identical']:,} / {fast['docs']:,} |"
        )
        print(f"  HF {n}: {hf:.1f} s; {fast['engine']} {n}: {fast['seconds']:.1f} s", flush=True)
    rows += [
        "",
        "| tokenizer engine alone | seconds | MB/s | × HF | docs with ids identical to HF |",
        "|---|---:|---:|---:|---:|",
        *engine_rows,
    ]
    timings = json.loads((first / "timings.json").read_text())
    rows += [
        "",
        f"Per stage, prepare with {workers[0]} worker(s) "
        "(CPU seconds summed over tasks; driver steps in wall seconds):",
        "",
        "| step | seconds | MB/s |",
        "|---|---:|---:|",
    ]
    for label, seconds in timings["task_cpu_seconds"].items():
        rows.append(f"| {label} | {seconds:.2f} | {mb / seconds if seconds else float('inf'):.1f} |")
    for step, seconds in timings["seconds"].items():
        if step.startswith("decide.") or step == "finalize":
            rows.append(f"| {step} (driver, wall) | {seconds:.2f} | |")
    rows.append("")
    return rows, ratios


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpora", type=Path, nargs="*")
    ap.add_argument("--mb", type=float, default=40)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    corpora = args.corpora
    if not corpora and os.environ.get("CORPORA"):
        corpora = [Path(os.environ["CORPORA"]) / n for n in ("zh_poetry.jsonl.gz", "zh_mixed.jsonl.gz")]
    corpora = [c for c in corpora if c.exists()]
    if not corpora:
        corpora = [REPO / "sample_corpus" / "mail" / "spamassassin.jsonl.gz"]
        print(f"no corpus given: using {corpora[0]} (too small for meaningful speeds)")
    lines: list[str] = []
    summary = ["| corpus | " + " | ".join(f"prepare / HF, {n} worker(s)" for n in args.workers) + " |"]
    summary.append("|---|" + "---:|" * len(args.workers))
    for corpus in corpora:
        with tempfile.TemporaryDirectory() as d:
            rows, ratios = bench_corpus(corpus, args.mb, args.workers, Path(d))
        lines += rows
        summary.append(f"| {corpus.name} | " + " | ".join(f"{r:.2f}" for r in ratios) + " |")
    summary.append(f"\nTarget: prepare / HF encode_batch >= {TARGET} at equal cores.")
    text = "\n".join(lines + summary)
    print("\n" + text)
    names = " ".join(c.name for c in corpora)
    workers = " ".join(map(str, args.workers))
    write_result(
        "throughput",
        "Pipeline vs tokenizer throughput",
        f"python bench/bench_throughput.py {names} --mb {args.mb:g} --workers {workers}",
        text,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
