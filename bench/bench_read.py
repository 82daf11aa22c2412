"""Read + parse throughput of the pipeline's readers vs a bare json.loads loop, same run.

Usage: python bench/bench_read.py CORPUS.jsonl[.gz|.zst] [--limit-mb 200]

Measures, on the same text:
  bare     one process: decompress, split lines, json.loads each line (the floor of any reader)
  ours/1   `prepare` with an empty stage list (read, parse, account, write documents), 1 worker
  ours/2   the same with 2 workers
The corpus is first copied uncompressed (up to --limit-mb) so it can be split into tasks; a single
compressed file is one task and cannot use more than one worker. MB = uncompressed bytes.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import zstandard


def open_text(path: Path) -> io.BufferedIOBase:
    if path.suffix == ".gz":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if path.suffix in (".zst", ".zstd"):
        return io.BufferedReader(
            zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), read_across_frames=True)
        )
    return open(path, "rb")


def bare_loop(path: Path) -> tuple[int, int]:
    docs = nbytes = 0
    with open(path, "rb") as f:
        for line in f:
            nbytes += len(line)
            json.loads(line)
            docs += 1
    return docs, nbytes


def run_prepare(src: Path, workers: int, tmp: Path) -> float:
    from dataprep.executor import prepare
    from dataprep.recipe import parse_recipe

    recipe = parse_recipe({"name": "read-only", "input": {"split_bytes": 16 << 20}, "stages": []}, "bench")
    out = tmp / f"out{workers}"
    t0 = time.perf_counter()
    prepare([str(src)], out, recipe, workers=workers, quiet=True)
    seconds = time.perf_counter() - t0
    shutil.rmtree(out)
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--limit-mb", type=float, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        src = tmp / "corpus.jsonl"
        limit = int(args.limit_mb * 1e6)
        with open_text(args.corpus) as f, open(src, "wb") as g:
            copied = 0
            for line in f:
                g.write(line)
                copied += len(line)
                if copied >= limit:
                    break
        t0 = time.perf_counter()
        docs, nbytes = bare_loop(src)
        bare = time.perf_counter() - t0
        mb = nbytes / 1e6
        rows = [("bare json.loads loop (1 process)", bare)]
        for workers in (1, 2):
            rows.append((f"dataprep read+parse, {workers} worker(s)", run_prepare(src, workers, tmp)))
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"corpus: {args.corpus.name}, {docs:,} documents, {mb:.1f} MB uncompressed")
    print(f"{'what':<40} {'seconds':>8} {'MB/s':>8} {'docs/s':>10} {'vs bare':>8}")
    for name, seconds in rows:
        print(f"{name:<40} {seconds:8.2f} {mb / seconds:8.1f} {docs / seconds:10,.0f} {bare / seconds:8.2f}")
    print(f"2 workers / 1 worker: {rows[1][1] / rows[2][1]:.2f}x; peak RSS of a worker: {peak:.0f} MB")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
