"""Memory of minhash_dedup's decide (the LSH index, union-find, survivor choice) per document.

Usage:
    python bench/bench_dedup_decide_memory.py [--docs 1000000 2000000 4000000] [--dup-rate 0.1]

For each corpus size, writes synthetic spill files of the form compute writes (band keys of random
documents, with --dup-rate of them near copies sharing some bands with an original), runs
``decide`` alone in a fresh process (verify: signature) and reports its peak anonymous memory
(RssAnon sampled every 2 ms, minus its value before decide; during the LSH phase and over the
whole decide, which also resolves clusters and writes decisions; the signature files are read through
memory maps, whose pages are page cache, reported apart as the peak RSS). The slope between
sizes is the memory per document of the index; the target is <= 64 bytes. No text is involved,
so this measures decide only, at sizes the real corpora here do not reach.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CHILD = r"""
import json, sys, threading, time
from pathlib import Path
from dataprep.stage import DriverContext, build_params
from dataprep.stats import StageStats
from stages import _minhash as mh
from stages.minhash_dedup import MinhashDedup, MinhashDedupParams

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
work, tasks = Path(sys.argv[1]), json.loads(sys.argv[2])
stage = MinhashDedup(build_params(MinhashDedupParams, {"verify": "signature", "examples": 0}, "bench"))
before = status("RssAnon")
peak_anon = [before]
done = threading.Event()

def sample():
    while not done.is_set():
        peak_anon[0] = max(peak_anon[0], status("RssAnon"))
        time.sleep(0.002)

threading.Thread(target=sample, daemon=True).start()
lsh_peak = [0]
roots = mh.UnionFind.roots

def roots_after_lsh(self):  # called once, right after the last band
    time.sleep(0.01)
    lsh_peak[0] = peak_anon[0]
    return roots(self)

mh.UnionFind.roots = roots_after_lsh
t0 = time.monotonic()
ctx = DriverContext(
    work_dir=work, output_dir=work / "o", task_ids=tasks, seed=0, artifacts={}, stats=StageStats(),
    workers=int(sys.argv[3]), quiet=True,
)
stage.decide(ctx)
seconds = time.monotonic() - t0
done.set()
time.sleep(0.01)
print(json.dumps({"before": before, "peak": peak_anon[0], "lsh": lsh_peak[0], "hwm": status("VmHWM"),
                  "seconds": seconds,
                  "counters": dict(ctx.stats.counters)}))
"""


def write_spills(work: Path, n: int, dup_rate: float, per_task: int, bands: int, num_perm: int) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    tasks = []
    for t, lo in enumerate(range(0, n, per_task)):
        m = min(per_task, n - lo)
        task = f"t{t:05d}"
        keys = rng.integers(0, 2**63, size=(m, bands), dtype=np.uint64)
        dups = np.flatnonzero(rng.random(m) < dup_rate)
        dups = dups[dups > 0]
        originals = rng.integers(0, dups, dtype=np.int64) if dups.size else dups
        shared = rng.random((dups.size, bands)) < 0.5
        keys[dups] = np.where(shared, keys[originals], keys[dups])
        columns = {
            "id": pa.array([f"{task}-{i}" for i in range(m)]),
            "length": rng.integers(50, 5000, m).astype(np.int32),
            "shingles": np.full(m, 100, dtype=np.int32),
            "preview": pa.array([""] * m),
        }
        for j in range(bands):
            columns[f"band{j:03d}"] = keys[:, j]
        pq.write_table(pa.table(columns), work / f"{task}.bands.parquet", row_group_size=1 << 14)
        sig_path = work / f"{task}.sig.u32"
        with open(sig_path, "wb") as f:  # sparse: only near copies and their originals are ever read
            f.truncate(m * num_perm * 4)
        sig = np.memmap(sig_path, dtype=np.uint32, mode="r+", shape=(m, num_perm))
        base = rng.integers(0, 2**32, size=(dups.size, num_perm), dtype=np.uint64).astype(np.uint32)
        sig[originals] = base
        sig[dups] = np.where(rng.random((dups.size, num_perm)) < 0.9, base, base + 1)
        sig.flush()
        del sig
        tasks.append(task)
    return tasks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, nargs="+", default=[500_000, 1_000_000, 2_000_000])
    ap.add_argument("--dup-rate", type=float, default=0.1)
    ap.add_argument("--per-task", type=int, default=250_000)
    ap.add_argument("--workers", type=int, default=2, help="DriverContext.workers given to decide")
    args = ap.parse_args()
    from stages._minhash import optimal_bands

    bands, _ = optimal_bands(0.8, 128, 0.05, 0.95)
    rows = []
    for n in args.docs:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            tasks = write_spills(work, n, args.dup_rate, args.per_task, bands, 128)
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(work), json.dumps(tasks), str(args.workers)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            r = json.loads(out.strip().splitlines()[-1])
            rows.append((n, r))
            print(
                f"{n:>10,} docs: decide {r['seconds']:5.1f}s; anonymous memory over the process before "
                f"decide: LSH phase +{(r['lsh'] - r['before']) / 2**20:4.0f} MiB "
                f"({(r['lsh'] - r['before']) / n:5.1f} B/doc), whole decide "
                f"+{(r['peak'] - r['before']) / 2**20:4.0f} MiB "
                f"({(r['peak'] - r['before']) / n:5.1f} B/doc); "
                f"peak RSS incl. mapped signature pages {r['hwm'] / 2**20:5.0f} MiB; "
                f"clusters {r['counters'].get('clusters', 0):,}"
            )
    if len(rows) >= 2:
        (n0, r0), (n1, r1) = rows[0], rows[-1]
        for key, name in (("lsh", "LSH phase (band index, union-find)"), ("peak", "whole decide")):
            slope = ((r1[key] - r1["before"]) - (r0[key] - r0["before"])) / (n1 - n0)
            print(f"marginal anonymous memory, {name}: {slope:.1f} bytes per document")
        print("(target for the band index: <= 64 bytes per document; the rest of decide grows with the")
        print(" number of clustered documents: --dup-rate)")


if __name__ == "__main__":
    main()
