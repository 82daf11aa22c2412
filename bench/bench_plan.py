"""Planning: every input file cut into line-aligned splits and hashed, in one process and on a
pool of workers, against reading every input byte once in one process.

Usage: python bench/bench_plan.py CORPUS.jsonl[.gz|.zst] [--copies 8] [--limit-mb 160]

Writes --copies uncompressed copies of the first --limit-mb of CORPUS (a corpus of several line
files, as most are), then times on the same files:
  read once, 1 process     every byte read and SHA-256-hashed, nothing else: what a planner that
                           must hash its inputs costs at least in one process
  plan, 1 process          make_plan with hash_files (sniff, line splits, sha256 per file), as a
                           one-worker run plans
  plan, N workers          the same jobs through a pool of N spawned workers (started beforehand,
                           as the executor's pool is), as an N-worker run plans
and checks that the plans are identical. Files are read from the page cache after the first
round (every row runs twice; the second is reported).
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing as mp
import tempfile
import time
from pathlib import Path

from _measure import open_text, write_result

from dataprep.inputs import expand_inputs
from dataprep.planning import make_plan
from dataprep.recipe import load_recipe
from dataprep.stage import ReadReport
from dataprep.stats import StageStats


def read_once(paths: list[Path]) -> None:
    for path in paths:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(8 << 20):
                h.update(chunk)


def timed(fn, *args) -> tuple[float, object]:
    best = None
    for _ in range(2):  # the first round warms the page cache
        t0 = time.perf_counter()
        result = fn(*args)
        best = time.perf_counter() - t0, result
    assert best is not None
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--copies", type=int, default=8)
    ap.add_argument("--limit-mb", type=float, default=160)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    recipe = load_recipe("default")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        first = tmp / "c00.jsonl"
        with open_text(args.corpus) as f, open(first, "w", encoding="utf-8") as g:
            copied = 0
            for line in f:
                g.write(line)
                copied += len(line.encode("utf-8"))
                if copied >= args.limit_mb * 1e6:
                    break
        data = first.read_bytes()
        for k in range(1, args.copies):
            (tmp / f"c{k:02d}.jsonl").write_bytes(data)
        files = expand_inputs([str(tmp)])
        paths = [Path(f.path) for f in files]
        total_mb = sum(f.size for f in files) / 1e6

        def plan(parallel_map=None):
            report = ReadReport(StageStats(), "skip")
            return make_plan(files, recipe, report, parallel_map=parallel_map, hash_files=True)

        read_s, _ = timed(read_once, paths)
        serial_s, serial = timed(plan)
        with mp.get_context("spawn").Pool(args.workers) as pool:
            pool.map(abs, range(args.workers))  # workers up, as the executor's pool is
            pool_s, pooled = timed(plan, pool.map)
        assert pooled.to_json() == serial.to_json(), "the pooled plan differs from the serial one"
    tasks = len(serial.tasks)

    def row(what: str, seconds: float) -> str:
        return f"| {what} | {seconds:.2f} | {total_mb / seconds:.0f} | {read_s / seconds:.2f} |"

    rows = [
        f"corpus: {args.corpus.name}, {args.copies} files, {total_mb:.0f} MB of JSONL, {tasks} tasks",
        "",
        "| what | seconds | MB/s | vs reading once |",
        "|---|---:|---:|---:|",
        row("read once + sha256, 1 process", read_s),
        row("plan (splits + sha256), 1 process", serial_s),
        row(f"plan, {args.workers} workers", pool_s),
        "",
        f"{args.workers} workers / 1 process: {serial_s / pool_s:.2f}x",
    ]
    text = "\n".join(rows)
    print(text)
    write_result(
        "plan",
        "Planning on workers",
        f"python bench/bench_plan.py {args.corpus.name} --copies {args.copies} --limit-mb {args.limit_mb:g}",
        text,
    )


if __name__ == "__main__":
    main()
