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

# (script, arguments); {name} is a corpus file of DIR (or its stand-in from sample_corpus/)
BENCHMARKS: list[tuple[str, list[str]]] = [
    ("bench_read.py", ["{zh_poetry.jsonl.gz}"]),
    ("bench_plan.py", ["{zh_poetry.jsonl.gz}"]),
    ("bench_cleaning.py", ["{zh_mixed.jsonl.gz}", "{en_mail.jsonl.gz}"]),
    ("bench_dedup_signatures.py", ["{zh_mixed.jsonl.gz}", "{en_mail.jsonl.gz}"]),
    (
        "dedup_quality.py",
        [
            "--corpus",
            "{zh_mixed.jsonl.gz}",
            "--corpus",
            "{en_mail.jsonl.gz}",
            "--poetry",
            "{zh_poetry.jsonl.gz}",
        ],
    ),
    ("bench_dedup_e2e.py", ["{zh_poetry.jsonl.gz}"]),
    ("bench_dedup_decide_memory.py", []),
    ("bench_tokenize_pack.py", ["{zh_mixed.jsonl.gz}"]),
    ("bench_tokenizer_engines.py", ["{zh_mixed.jsonl.gz}", "{zh_poetry.jsonl.gz}"]),
    ("bench_tokenizer_training.py", ["{zh_mixed.jsonl.gz}", "{zh_poetry.jsonl.gz}"]),
    ("bench_train_loader.py", []),
    ("bench_end_to_end.py", ["{zh_poetry.jsonl.gz}", "--repeat", "2"]),
    ("bench_throughput.py", ["{zh_poetry.jsonl.gz}", "{zh_mixed.jsonl.gz}"]),
    ("bench_speed.py", ["{zh_poetry.jsonl.gz}", "{zh_mixed.jsonl.gz}"]),
    ("bench_quality.py", ["{zh_mixed.jsonl.gz}", "--repeat", "3"]),
    (
        "bench_decontaminate.py",
        ["--mixed", "{zh_mixed.jsonl.gz}", "--poetry", "{zh_poetry.jsonl.gz}", "--ngrams", "10", "13", "15"],
    ),
]
STAND_INS = {
    "zh_poetry.jsonl.gz": SAMPLE / "poetry" / "tang_two_editions.jsonl.zst",
    "zh_mixed.jsonl.gz": SAMPLE / "mail" / "spamassassin.jsonl.gz",
    "en_mail.jsonl.gz": SAMPLE / "mail" / "spamassassin.jsonl.gz",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", type=Path, default=os.environ.get("CORPORA") or None)
    ap.add_argument("--only", nargs="*", default=[], help="run only these scripts (e.g. bench_read.py)")
    args = ap.parse_args()
    failed = 0
    only = set(args.only)
    for script, template in BENCHMARKS:
        if only and script not in only:
            continue
        argv = []
        for arg in template:
            if arg.startswith("{"):
                name = arg[1:-1]
                path = args.corpora / name if args.corpora else None
                arg = str(path if path is not None and path.exists() else STAND_INS[name])
            argv.append(arg)
        print(f"\n== {script} {' '.join(Path(a).name for a in argv)}", flush=True)
        r = subprocess.run([sys.executable, str(BENCH / script), *argv])
        failed += r.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
