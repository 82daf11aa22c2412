"""Memory of minhash_dedup's decide, in the driver and per worker call, on synthetic spills.

Usage:
    python bench/bench_dedup_decide_memory.py [--docs 1000000 4000000] [--dup-rate 0.1]
        [--workers 2] [--partition-keys N] [--time]

For each corpus size, writes synthetic spill files of the form compute writes (band keys of random
documents, with --dup-rate of them near copies sharing some bands with an original; signatures
for ``verify: signature``), then runs ``decide`` in a fresh process whose ``DriverContext.map``
runs every call in its own fresh process (--workers at a time; bench/_measure.MeasuredExecutor), and
reports the peak anonymous memory (RssAnon sampled every 2 ms; memory-mapped spill pages are page
cache and not counted) of the driver and, per round, of the largest call: absolute (a fresh
Python with numpy and pyarrow imported is ~60-80 MiB of it) and above the process's start. The
driver's part should not grow with the corpus; a call's part follows its partition's size
(LSH_PARTITION_KEYS band keys, PAIR_BUCKET pairs, EDGE_BUCKET edges), not the corpus.
No text is involved, so this measures decide only, at sizes the real corpora here do not reach.
With --time the calls run on one persistent pool of --workers processes, as in a run, and only
the decide time and the driver's memory are meaningful (fresh processes cost ~1 s each).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent

CHILD = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[5])
from _measure import AnonPeak, MeasuredExecutor
from dataprep.stage import DriverContext, build_params
from dataprep.stats import StageStats
import stages.minhash_dedup as md

work, tasks, workers = Path(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
if int(sys.argv[4]):
    md.LSH_PARTITION_KEYS = int(sys.argv[4])
stage = md.MinhashDedup(build_params(md.MinhashDedupParams, {"verify": "signature", "examples": 0}, "bench"))
records = []
pool = None
if int(sys.argv[6]):  # time it as a run does: one persistent pool (started before the clock)
    from dataprep.executor.pool import LocalExecutor
    pool = LocalExecutor(workers)
    pool.map(abs, [0, 1])
    executor = pool
else:
    executor = MeasuredExecutor(records, workers)
ctx = DriverContext(
    work_dir=work, output_dir=work / "o", task_ids=tasks, seed=0, artifacts={}, stats=StageStats(),
    workers=workers, quiet=True, executor=executor,
)
driver = AnonPeak()
t0 = time.monotonic()
stage.decide(ctx)
seconds = time.monotonic() - t0
driver.stop()
if pool is not None:
    pool.__exit__(None, None, None)
print(json.dumps({"driver_before": driver.before, "driver_peak": driver.peak, "seconds": seconds,
                  "calls": records, "counters": dict(ctx.stats.counters)}))
"""


def write_spills(work: Path, n: int, dup_rate: float, per_task: int, bands: int, num_perm: int) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    tasks = []
    for t, lo in enumerate(range(0, n, per_task)):
        m = min(per_task, n - lo)
        task = f"t{t:05d}"
        keys = rng.integers(0, np.iinfo(np.uint64).max, size=(m, bands), dtype=np.uint64, endpoint=True)
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


ROUNDS = {
    "index_task": "1 index (per task)",
    "find_candidates": "2 candidates (per key partition)",
    "verify_pairs": "3 verify (per pair bucket)",
    "large_star": "4 components: large-star",
    "small_star": "4 components: small-star",
    "choose_survivors": "5 survivors (per edge bucket)",
    "write_task_decision": "6 decisions (per task)",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, nargs="+", default=[1_000_000, 4_000_000])
    ap.add_argument("--dup-rate", type=float, default=0.1)
    ap.add_argument("--per-task", type=int, default=250_000)
    ap.add_argument("--workers", type=int, default=2, help="calls run at once (and DriverContext.workers)")
    ap.add_argument("--partition-keys", type=int, default=0, help="override LSH_PARTITION_KEYS")
    ap.add_argument(
        "--time",
        action="store_true",
        help="run the calls on one persistent pool, as a run does: decide time (no per-call memory)",
    )
    args = ap.parse_args()
    from stages._minhash_lsh import optimal_bands

    bands, _ = optimal_bands(0.8, 128, 0.05, 0.95)
    for n in args.docs:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            tasks = write_spills(work, n, args.dup_rate, args.per_task, bands, 128)
            cmd = [sys.executable, "-c", CHILD, str(work), json.dumps(tasks), str(args.workers)]
            out = subprocess.run(
                [*cmd, str(args.partition_keys), str(BENCH), str(int(args.time))],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        r = json.loads(out.strip().splitlines()[-1])
        c = r["counters"]
        print(
            f"\n{n:,} docs in {len(tasks)} tasks, {args.workers} workers: decide {r['seconds']:.1f} s; "
            f"{c.get('candidate_pairs', 0):,} candidate pairs, {c.get('pairs_verified', 0):,} distinct, "
            f"{c.get('clusters', 0):,} clusters, {c.get('component_rounds', 0)} component rounds"
        )
        driver = (r["driver_peak"] - r["driver_before"]) / 1024
        print(f"  driver: +{driver:.0f} MiB anonymous over its start ({driver * 2**20 / n:.1f} B/doc)")
        head = f"  {'round':<36} {'calls':>5} {'peak anon MiB':>14} {'above start MiB':>16}"
        print(f"{head} {'B/doc per call':>15}")
        for name, label in ROUNDS.items():
            calls = [x for x in r["calls"] if x[0] == name]
            if not calls:
                continue
            peak = max(p for _, _, p, _ in calls) / 1024
            above = max(p - b for _, b, p, _ in calls) / 1024
            per_doc = above * 2**20 / (n / len(calls)) if name in ("find_candidates", "index_task") else None
            per = f"{per_doc:15.1f}" if per_doc is not None else f"{'':>15}"
            print(f"  {label:<36} {len(calls):>5} {peak:>14.0f} {above:>16.0f} {per}")


if __name__ == "__main__":
    main()
