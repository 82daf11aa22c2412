"""MinHash signature throughput: the vectorised fast path against datasketch (and rensa when it
is installed), same shingles, same num_perm, one process, in the same run.

Usage:
    python bench/bench_dedup_signatures.py CORPUS.jsonl[.gz] [CORPUS ...] [--docs 20000] [--num-perm 128]

Rows (MB = UTF-8 bytes of the document text, median of --repeat runs):
* fast path, text -> signatures + band keys: what the minhash_dedup stage does per batch
  (regional fold included; also without it);
* signatures from shingle hashes: the hashing kernel alone, numpy (what a process uses for its
  first ``NUMBA_AFTER`` products) and the compiled numba loop (after them; its import and load
  not timed);
* the peers' input, for scale: building the same shingles as Python strings (reference shingler);
* datasketch per document: ``MinHash(num_perm).update_batch(shingles)`` on the same shingles as
  strings (built beforehand, not timed), the reference implementation;
* datasketch bulk: ``MinHash.bulk`` over the same shingle lists;
* rensa per document: ``RMinHash(num_perm, seed).update(shingles)`` (if importable; its R-MinHash
  is a different, non-standard hashing scheme).
The ratio column is docs/s relative to datasketch per document.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import time
from collections.abc import Callable

import numpy as np

from stages import _minhash as mh
from stages import _minhash_lsh as lsh


def load(paths: list[str], limit: int) -> list[str]:
    per_file = max(1, limit // len(paths))
    texts: list[str] = []
    for path in paths:
        opener = gzip.open if path.endswith(".gz") else open
        taken = 0
        with opener(path, "rt", encoding="utf-8") as f:
            for line in f:
                text = json.loads(line)["text"]
                if text.strip():
                    texts.append(text)
                    taken += 1
                    if taken >= per_file:
                        break
    return texts


def timed(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.process_time()  # CPU seconds: steadier than wall time on a shared machine
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", nargs="+", help="JSONL(.gz) files with a 'text' field")
    ap.add_argument("--docs", type=int, default=9000, help="documents, taken evenly from the corpora")
    ap.add_argument("--num-perm", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    texts = load(args.corpus, args.docs)
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    bands, rows = lsh.optimal_bands(0.8, args.num_perm, 0.05, 0.95)
    mh.char_tables(True)  # built once per process (not timed)
    hasher = lsh.MinHasher(args.num_perm, 0)
    batches = [texts[i : i + args.batch] for i in range(0, len(texts), args.batch)]

    def fast_full(regional: bool = True) -> None:
        for b in batches:
            sig = hasher.signatures(mh.shingle_batch(b, fold_regional=regional))
            lsh.band_keys(sig, bands, rows)

    shingled = [mh.shingle_batch(b, fold_regional=True) for b in batches]

    def fast_kernel(compiled: bool) -> None:
        kernel = lsh._signature_kernel() if compiled else lsh._signatures_numpy
        for s in shingled:
            out = np.full((len(s.offsets) - 1, args.num_perm), 0xFFFFFFFF, dtype=np.uint32)
            kernel(s.hashes, s.offsets, hasher.a, out)

    fast_kernel(compiled=True)  # numba's import and the cached kernel's load (not timed)

    results: list[tuple[str, int, float, float]] = []
    t = timed(fast_full, args.repeat)
    results.append(("fast path: text -> signatures + band keys", len(texts), t, mb))
    t = timed(lambda: fast_full(regional=False), args.repeat)
    results.append(("  the same without the regional fold", len(texts), t, mb))
    t = timed(lambda: fast_kernel(compiled=False), args.repeat)
    results.append(("signatures from shingle hashes: numpy", len(texts), t, mb))
    t = timed(lambda: fast_kernel(compiled=True), args.repeat)
    results.append(("signatures from shingle hashes: numba loop", len(texts), t, mb))

    from datasketch import MinHash

    t = timed(lambda: [mh.shingle_strings(x, fold_regional=True) for x in texts], 1)
    results.append(("(peers' input: shingle strings, Python)", len(texts), t, mb))
    shingles = [[s.encode("utf-8") for s in mh.shingle_strings(x, fold_regional=True)] for x in texts]

    def datasketch_per_doc() -> None:
        for sh in shingles:
            m = MinHash(num_perm=args.num_perm)
            m.update_batch(sh)

    t_ref = timed(datasketch_per_doc, args.repeat)
    results.append(("datasketch MinHash per document", len(texts), t_ref, mb))
    t = timed(lambda: MinHash.bulk(shingles, num_perm=args.num_perm), args.repeat)
    results.append(("datasketch MinHash.bulk", len(texts), t, mb))
    try:
        from rensa import RMinHash
    except ImportError:
        RMinHash = None
    if RMinHash is not None:
        str_shingles = [mh.shingle_strings(x, fold_regional=True) for x in texts]

        def rensa_per_doc() -> None:
            for sh in str_shingles:
                m = RMinHash(num_perm=args.num_perm, seed=0)
                m.update(sh)
                m.digest()

        t = timed(rensa_per_doc, args.repeat)
        results.append(("rensa RMinHash per document", len(texts), t, mb))
    else:
        print("(rensa not installed: pip install rensa to add it)")

    ref_rate = len(texts) / t_ref
    print(
        f"{len(texts):,} documents, {mb:.1f} MB, "
        f"num_perm {args.num_perm}, char/word 5-grams, bands x rows {bands} x {rows}"
    )
    print(f"{'method':<46} {'docs/s':>10} {'MB/s':>8} {'vs datasketch':>14}")
    for name, n, seconds, size in results:
        rate = n / seconds
        print(f"{name:<46} {rate:>10,.0f} {size / seconds:>8.2f} {rate / ref_rate:>13.1f}x")


if __name__ == "__main__":
    main()
