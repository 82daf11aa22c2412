"""End-to-end dedup time and peak memory: ``dataprep prepare`` with normalize -> exact_dedup ->
paragraph_dedup -> minhash_dedup on a corpus, against the same run with normalize alone (the floor:
reading, normalizing, writing), in the same run of the script.

Usage:
    python bench/bench_dedup_e2e.py CORPUS [CORPUS ...] [--workers 2] [--set verify=signature ...]

Prints wall time of both runs and their ratio, the time of each pass and decide (timings.json),
peak RSS of the whole process tree (driver + workers, summed, sampled every 50 ms) and of the
largest single process, documents removed per stage, and the work directory's peak size.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def _du(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, name))
    return total


def run(inputs: list[str], stages: list, workers: int, out: Path) -> dict:
    recipe = out.parent / f"{out.name}.yaml"
    recipe.write_text(yaml.safe_dump({"name": out.name, "seed": 0, "stages": stages}, allow_unicode=True))
    cmd = [sys.executable, "-m", "dataprep.cli", "prepare", *inputs, "--out", str(out)]
    cmd += ["--recipe", str(recipe), "--workers", str(workers)]
    peak = {"tree": 0, "single": 0, "work": 0}
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd)
    stop = threading.Event()

    def sample() -> None:
        ticks = 0
        while not stop.is_set():
            pids, todo = [], [proc.pid]
            while todo:
                p = todo.pop()
                pids.append(p)
                todo += _children(p)
            sizes = [_rss(p) for p in pids]
            peak["tree"] = max(peak["tree"], sum(sizes))
            peak["single"] = max(peak["single"], max(sizes, default=0))
            ticks += 1
            if ticks % 20 == 0:
                peak["work"] = max(peak["work"], _du(out / "work"))
            time.sleep(0.05)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    code = proc.wait()
    seconds = time.monotonic() - t0
    stop.set()
    thread.join()
    if code:
        raise SystemExit(f"prepare failed with exit code {code}")
    stats = json.loads((out / "stats.json").read_text())
    timings = json.loads((out / "timings.json").read_text())["seconds"]
    return {"seconds": seconds, "peak": peak, "stats": stats, "timings": timings}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", nargs="+")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], help="minhash_dedup parameter override, k=v")
    ap.add_argument("--out", help="directory for the runs (default: a temporary one)")
    args = ap.parse_args()
    overrides = {}
    for item in args.set:
        key, value = item.split("=", 1)
        overrides[key] = yaml.safe_load(value)
    size = sum(os.path.getsize(p) for p in args.corpus)
    with tempfile.TemporaryDirectory(dir=args.out) as tmp:
        root = Path(tmp)
        floor = run(args.corpus, ["normalize"], args.workers, root / "floor")
        dedup = run(
            args.corpus,
            ["normalize", "exact_dedup", "paragraph_dedup", {"minhash_dedup": overrides}],
            args.workers,
            root / "dedup",
        )
    totals = dedup["stats"]["totals"]
    print(
        f"\ncorpus: {', '.join(Path(p).name for p in args.corpus)} ({size / 1e6:.0f} MB on disk), "
        f"{totals['docs_in']:,} documents, {args.workers} workers"
    )
    print(f"{'run':<44} {'wall s':>8} {'peak RSS tree':>14} {'largest proc':>13} {'work dir peak':>14}")
    for name, r in (
        ("normalize only (read + write floor)", floor),
        ("normalize + exact + paragraph + minhash", dedup),
    ):
        p = r["peak"]
        print(
            f"{name:<44} {r['seconds']:>8.1f} {p['tree'] / 2**20:>11.0f} MiB {p['single'] / 2**20:>9.0f} MiB "
            f"{p['work'] / 2**20:>10.0f} MiB"
        )
    print(
        f"dedup run / floor: {dedup['seconds'] / floor['seconds']:.2f}x; dedup time beyond the floor: "
        f"{dedup['seconds'] - floor['seconds']:.1f}s"
    )
    print("phases of the dedup run (s): " + ", ".join(f"{k} {v:.1f}" for k, v in dedup["timings"].items()))
    for key, n in totals["dropped_by_reason"].items():
        print(f"  dropped {n:>8,}  {key}")
    for s in dedup["stats"]["stages"]:
        if s["label"] in ("paragraph_dedup", "minhash_dedup"):
            print(f"  {s['label']}: " + ", ".join(f"{k}={v:,}" for k, v in s["counters"].items()))


if __name__ == "__main__":
    main()
