"""Memory per phase of a whole run: driver and workers, on a real corpus.

Usage:
    python bench/bench_memory_phases.py CORPUS [--workers 2] [--recipe default] [--executor local|ray]

Runs ``dataprep prepare CORPUS --keep-work`` and samples every 0.1 s the resident memory (RSS, and
its anonymous part: RSS minus memory-mapped file pages, which are page cache) of the driver and of
every other process of its tree (pool workers, or Ray's processes). Each sample is attributed to
the phase the run is in, read from OUT/work (the pass markers and decided.json files): the passes
(read + cleaning + a global stage's compute, then each global stage's apply + compute) and the
decide of each global stage (minhash_dedup's decide runs its rounds on the workers). Prints per
phase: seconds, the driver's peak, the largest single other process's peak, the whole tree's peak,
and the work directory's size at the end of the phase; then the corpus's documents and average
document size (for the extrapolation in the README).
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

from _measure import children, proc_status_kb


def _du(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, name))
    return total


def spill_sizes(stage_dir: Path) -> dict[str, int]:
    """Bytes of a global stage's files by kind (the file name after the task id)."""
    out: dict[str, int] = {}
    for path in stage_dir.iterdir() if stage_dir.exists() else []:
        if path.is_file() and not path.name.startswith("."):
            kind = path.name.split(".", 1)[1] if "." in path.name else path.name
            with contextlib.suppress(OSError):
                out[kind] = out.get(kind, 0) + path.stat().st_size
    return out


def phase_names(recipe_ref: str) -> list[tuple[str, int, bool]]:
    """[(label, pass index, is_decide)] in run order."""
    from dataprep.executor import plan_passes
    from dataprep.recipe import load_recipe

    recipe = load_recipe(recipe_ref)
    labels = [s.label for s in recipe.stages]
    passes = plan_passes([s.build() for s in recipe.stages])
    out = []
    for p in passes:
        names = [f"{labels[p.apply]}.apply"] if p.apply is not None else []
        maps = [labels[i] for i in p.maps]
        if p.index == 0:
            maps = ["read", *maps]
        names += maps if len(maps) <= 2 else [f"{maps[0]} .. {maps[-1]} ({len(maps)} stages)"]
        if p.compute is not None:
            names.append(f"{labels[p.compute]}.compute")
        out.append((f"pass {p.index + 1}: " + ", ".join(names), p.index, False))
        if p.compute is not None:
            out.append((f"decide: {labels[p.compute]}", p.index, True))
    return out


def current_phase(work: Path, phases: list[tuple[str, int, bool]]) -> str:
    plan = work / "plan.json"
    if not plan.exists():
        return "plan (inputs, chunks)"
    try:
        tasks = len(json.loads(plan.read_text())["plan"]["tasks"])
    except (OSError, ValueError):
        return "plan (inputs, chunks)"
    for label, p, is_decide in phases:
        if is_decide:
            if not (work / f"pass{p}" / "decided.json").exists():
                return label
        else:
            done = work / f"pass{p}" / "done"
            if not done.exists() or sum(1 for _ in done.iterdir()) < tasks:
                return label
    return "final outputs"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", nargs="+")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--recipe", default="default")
    ap.add_argument("--executor", default="local", choices=["local", "ray"])
    ap.add_argument("--out", help="directory for the run (default: a temporary one)")
    args = ap.parse_args()
    phases = phase_names(args.recipe)
    order = ["plan (inputs, chunks)"] + [p[0] for p in phases] + ["final outputs"]
    with tempfile.TemporaryDirectory(dir=args.out) as tmp:
        out = Path(tmp) / "out"
        cmd = [sys.executable, "-m", "dataprep.cli", "prepare", *args.corpus, "--out", str(out)]
        cmd += ["--recipe", args.recipe, "--workers", str(args.workers), "--executor", args.executor]
        cmd += ["--keep-work", "--quiet"]
        stats: dict[str, dict[str, float]] = {}
        spills: dict[str, dict[str, int]] = {}  # at the start of each decide: the stage's files
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd)
        stop = threading.Event()

        def sample() -> None:
            last_phase, last_du = None, 0.0
            while not stop.is_set():
                phase = current_phase(out / "work", phases)
                now = time.monotonic()
                s = stats.setdefault(
                    phase, {"start": now, "end": now, "driver": 0, "driver_anon": 0, "worker": 0,
                            "worker_anon": 0, "tree": 0, "work": 0}
                )  # fmt: skip
                s["end"] = now
                driver = proc_status_kb(proc.pid)
                s["driver"] = max(s["driver"], driver.get("VmRSS", 0))
                s["driver_anon"] = max(s["driver_anon"], driver.get("RssAnon", 0))
                tree = driver.get("VmRSS", 0)
                for pid in children(proc.pid):
                    m = proc_status_kb(pid)
                    s["worker"] = max(s["worker"], m.get("VmRSS", 0))
                    s["worker_anon"] = max(s["worker_anon"], m.get("RssAnon", 0))
                    tree += m.get("VmRSS", 0)
                s["tree"] = max(s["tree"], tree)
                if phase != last_phase and phase.startswith("decide: "):
                    label = phase.removeprefix("decide: ")
                    dirs = list((out / "work" / "stages").glob(f"*-{label}"))
                    spills[label] = spill_sizes(dirs[0]) if dirs else {}
                if phase != last_phase or now - last_du > 2:
                    if last_phase is not None:
                        stats[last_phase]["work"] = max(stats[last_phase]["work"], _du(out / "work"))
                    last_phase, last_du = phase, now
                time.sleep(0.1)

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        code = proc.wait()
        seconds = time.monotonic() - t0
        stop.set()
        thread.join()
        if code:
            raise SystemExit(f"prepare failed with exit code {code}")
        run_stats = json.loads((out / "stats.json").read_text())
    totals = run_stats["totals"]
    text_bytes = run_stats["input"]["bytes"]
    print(
        f"\ncorpus: {', '.join(Path(p).name for p in args.corpus)} ({text_bytes / 1e6:.0f} MB on disk), "
        f"{totals['docs_in']:,} documents read, {totals['kept']:,} kept; "
        f"{run_stats['input']['tasks']} tasks; "
        f"{args.workers} workers, executor {args.executor}, recipe {args.recipe}; {seconds:.0f} s"
    )
    read = next(s for s in run_stats["stages"] if s["label"] == "read")
    print(f"average document: {read['chars_out'] / max(read['docs_out'], 1):.0f} characters (read)")
    print(
        f"\n| {'phase':<70} | {'s':>5} | {'driver RSS (anon) MiB':>21} | "
        f"{'largest worker RSS (anon) MiB':>29} | {'tree MiB':>8} | {'work dir MiB':>12} |"
    )
    print(f"|{'-' * 72}|{'-' * 6}:|{'-' * 22}:|{'-' * 30}:|{'-' * 9}:|{'-' * 13}:|")
    for name in order:
        s = stats.get(name)
        if s is None:
            continue
        print(
            f"| {name:<70} | {s['end'] - s['start']:5.1f} | "
            f"{s['driver'] / 1024:>10.0f} ({s['driver_anon'] / 1024:>5.0f}) {'':>2} | "
            f"{s['worker'] / 1024:>17.0f} ({s['worker_anon'] / 1024:>5.0f}) {'':>2} | "
            f"{s['tree'] / 1024:>8.0f} | {s['work'] / 2**20:>12.0f} |"
        )
    docs = max(totals["docs_in"], 1)
    print("\nfiles of each global stage when its decide starts (all tasks), per document read:")
    for label, sizes in spills.items():
        parts = ", ".join(f"{kind} {n / docs:.1f} B" for kind, n in sorted(sizes.items()))
        print(f"  {label}: {sum(sizes.values()) / 2**20:.1f} MiB: {parts}")


if __name__ == "__main__":
    main()
