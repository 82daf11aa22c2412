"""Tokenizer training: seconds and quality per kind and sample size, on held-out text.

Usage:
    python bench/bench_tokenizer_training.py CORPUS.jsonl[.gz] [...] [--mb 2 4 8]
        [--kinds bytebpe bpe unigram]
        [--vocab-size 8192] [--heldout-mb 2]

The "text" fields of the corpora are split by text hash, as the tokenize stage samples them: the
documents with the smallest hashes form the training sample (the first --mb MiB of them), the
following --heldout-mb MiB are held out. For every kind and sample size it prints the training
wall and CPU seconds, seconds per MiB of sample, and on the held-out text: tokens per character,
UTF-8 bytes per token and the share of characters that do not round-trip (should be 0). Fewer
tokens per character is better (more text per training sequence).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _measure import open_text

from dataprep.tokenizers.load import load_tokenizer
from dataprep.tokenizers.sample import TextSample, text_hash
from dataprep.tokenizers.train import train_tokenizer


def corpus_texts(paths: list[str], max_bytes: int) -> list[str]:
    """The "text" fields of the JSONL corpora, up to max_bytes UTF-8 bytes per corpus."""
    texts: list[str] = []
    for path in paths:
        taken = 0
        with open_text(Path(path)) as f:
            for line in f:
                text = json.loads(line).get("text") or ""
                texts.append(text)
                taken += len(text.encode("utf-8"))
                if taken >= max_bytes:
                    break
    return texts


def split_by_hash(texts: list[str], train_bytes: int, heldout_bytes: int) -> tuple[list[str], list[str]]:
    """(training texts up to train_bytes, the next heldout_bytes of texts) in text-hash order."""
    ordered = sorted(texts, key=text_hash)
    sample = TextSample(train_bytes)
    for t in ordered:
        sample.add(t)
    train = sample.texts()
    rest = ordered[len(train) :]
    heldout, size = [], 0
    for t in rest:
        if size >= heldout_bytes:
            break
        heldout.append(t)
        size += len(t.encode("utf-8"))
    return train, heldout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpora", nargs="+")
    ap.add_argument("--mb", type=float, nargs="+", default=[2, 4, 8], help="training sample sizes (MiB)")
    ap.add_argument("--kinds", nargs="+", default=["bytebpe", "bpe", "unigram"])
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--heldout-mb", type=float, default=2.0)
    args = ap.parse_args(argv)

    largest = int(max(args.mb) * (1 << 20))
    heldout_bytes = int(args.heldout_mb * (1 << 20))
    texts = corpus_texts(args.corpora, (largest + heldout_bytes) * 2 // len(args.corpora) + (1 << 20))
    total = sum(len(t.encode("utf-8")) for t in texts)
    if total < largest + heldout_bytes:  # a small corpus: hold out a fifth, train on at most the rest
        heldout_bytes = total // 5
        largest = total - heldout_bytes
        args.mb = sorted({min(mb, largest / (1 << 20)) for mb in args.mb})
        print(f"small corpus ({total / 1e6:.1f} MB): sample sizes capped at {largest / (1 << 20):.2f} MiB")
    _, heldout = split_by_hash(texts, largest, heldout_bytes)
    heldout_chars = sum(len(t) for t in heldout)
    heldout_bytes_real = sum(len(t.encode("utf-8")) for t in heldout)
    print(
        f"corpora: {', '.join(Path(p).name for p in args.corpora)}; held out: {len(heldout)} docs, "
        f"{heldout_bytes_real / 1e6:.2f} MB; vocab {args.vocab_size}"
    )
    print(
        f"{'kind':8} {'sample MiB':>10} {'train s':>8} {'CPU s':>7} {'s/MiB':>6} "
        f"{'tok/char':>8} {'bytes/tok':>9} {'roundtrip':>9}"
    )
    for kind in args.kinds:
        for mb in args.mb:
            train, _ = split_by_hash(texts, int(mb * (1 << 20)), 0)
            sample_mib = sum(len(t.encode("utf-8")) for t in train) / (1 << 20)
            with tempfile.TemporaryDirectory() as tmp:
                wall, cpu = time.perf_counter(), time.process_time()
                path = train_tokenizer(train, tmp, kind, args.vocab_size)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                tok = load_tokenizer(path)
                encoded = tok.encode_batch(heldout)
                tokens = sum(len(ids) for ids in encoded)
                bad = sum(len(t) for t, ids in zip(heldout, encoded, strict=True) if tok.decode(ids) != t)
            print(
                f"{kind:8} {sample_mib:10.1f} {wall:8.1f} {cpu:7.1f} {wall / sample_mib:6.2f} "
                f"{tokens / heldout_chars:8.3f} {heldout_bytes_real / tokens:9.2f} {bad / heldout_chars:9.2%}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
