"""Synthetic corpora of a chosen document length, recombined from the sentences of real corpora.

Usage: python bench/make_kb_corpus.py ZH_POETRY.jsonl.gz ZH_MIXED.jsonl.gz OUT.jsonl [--mb 100]
                                     [--sentences 3 40] [--seed 0]

Every sentence of the source corpora (text cut after 。！？；!?; or a newline, empty pieces
dropped) goes into one pool; each document is then ``k`` sentences drawn from the pool with a
seeded generator, ``k`` uniform in [lo, hi], concatenated. With the default 3-40 sentences the
documents average about 1 KB of UTF-8 (the "~1 KB corpus" of bench_speed.py); a larger range gives
long documents for the per-document / per-byte fit. Same sources + arguments -> byte-identical
file. The pool is held in memory (a benchmark helper, not part of the pipeline).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np
from _measure import open_text

SENTENCE_END = re.compile(r"(?<=[。！？；!?;\n])")


def sentence_pool(corpora: list[Path]) -> list[str]:
    """Every non-blank sentence of every document of ``corpora``, in file order."""
    pool: list[str] = []
    for corpus in corpora:
        with open_text(corpus) as f:
            for line in f:
                text = json.loads(line)["text"]
                pool += [s for s in SENTENCE_END.split(text) if s.strip()]
    if not pool:
        raise SystemExit(f"no sentences in {', '.join(map(str, corpora))}")
    return pool


def write_recombined(
    pool: list[str], dst: Path, text_bytes: int, sentences: tuple[int, int] = (3, 40), seed: int = 0
) -> tuple[int, int]:
    """Write documents of ``sentences[0]..sentences[1]`` pool sentences to ``dst`` (JSONL with
    id, source, text) until they hold ``text_bytes`` UTF-8 bytes of text; (documents, bytes)."""
    lo, hi = sentences
    rng = np.random.default_rng(seed)
    docs = size = 0
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(dst, "w", encoding="utf-8") as f:
        while size < text_bytes:
            picks = rng.integers(0, len(pool), size=int(rng.integers(lo, hi + 1)))
            text = "".join(pool[i] for i in picks)
            record = {"id": f"kb-{docs}", "source": "recombined", "text": text}
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            docs += 1
            size += len(text.encode("utf-8"))
    return docs, size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpora", type=Path, nargs="+")
    ap.add_argument("out", type=Path)
    ap.add_argument("--mb", type=float, default=100, help="MB (10**6 bytes) of text to write")
    ap.add_argument("--sentences", type=int, nargs=2, default=[3, 40], metavar=("LO", "HI"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    docs, size = write_recombined(
        sentence_pool(args.corpora), args.out, int(args.mb * 1e6), tuple(args.sentences), args.seed
    )
    print(f"{args.out}: {docs:,} documents, {size / 1e6:.1f} MB of text, {size / docs:,.0f} bytes each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
