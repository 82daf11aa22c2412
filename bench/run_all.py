"""Run every benchmark in bench/ and print their figures.

Usage: python bench/run_all.py [--corpora DIR]   (or CORPORA=DIR make bench)

DIR holds the real corpora the benchmarks use (zh_poetry.jsonl.gz, zh_mixed.jsonl.gz,
en_mail.jsonl.gz; see sample_corpus/SOURCES for where they come from). Without it the
benchmarks run on the small sample_corpus/ files, which is enough to check they work but too
small for meaningful speeds.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
SAMPLE = BENCH.parent / "sample_corpus"

# (script, corpus file in DIR, fallback in sample_corpus/, extra arguments)
BENCHMARKS: list[tuple[str, str, str, list[str]]] = [
    ("bench_read.py", "zh_poetry.jsonl.gz", "mail/spamassassin.jsonl.gz", []),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", type=Path, default=os.environ.get("CORPORA") or None)
    args = ap.parse_args()
    failed = 0
    for script, name, fallback, extra in BENCHMARKS:
        corpus = args.corpora / name if args.corpora else SAMPLE / fallback
        if not corpus.exists():
            print(f"== {script}: {corpus} not found, using {SAMPLE / fallback}")
            corpus = SAMPLE / fallback
        print(f"== {script} {corpus.name}", flush=True)
        r = subprocess.run([sys.executable, str(BENCH / script), str(corpus), *extra])
        failed += r.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
