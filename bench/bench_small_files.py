"""Many small files against the same texts in one JSONL: the whole `dataprep prepare` command.

Usage: python bench/bench_small_files.py [--files 20000] [--workers 2] [--also-200k]

Writes --files text files of ~1 KB each (lines of sample_corpus/, a tenth of them repeated so
exact_dedup has work), spread over 100 directories, and one JSONL with the same texts in the
same order; runs a small recipe (normalize, exact_dedup, a trained 400-id tokenizer, pack) on
each, alternately, and prints the wall-time ratio (target: at most 1.3). --also-200k repeats it
with 200,000 files. Also prints the phases of the best run of each (OUT/timings.json: plan,
pass 0) and the floor of any reader of the files: a bare Python loop that opens and reads every
file once.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml
from _measure import run_measured, write_result

REPO = Path(__file__).resolve().parent.parent
RECIPE = {
    "name": "small-files",
    "seed": 0,
    "input": {"on_error": "skip"},
    "stages": [
        {"normalize": {}},
        {"exact_dedup": {}},
        {"tokenize": {"tokenizer": "train", "vocab_size": 400, "train_sample_bytes": 200_000}},
        {"pack": {"seq_length": 256}},
    ],
}


def texts(n: int) -> list[str]:
    """n texts of ~1 KB (lines of the sample corpus joined), every tenth a repeat."""
    lines = [
        x.strip()
        for p in sorted((REPO / "sample_corpus").rglob("*.txt"))
        for x in p.read_text(encoding="utf-8", errors="replace").splitlines()
        if len(x.strip()) > 10 and "\ufffd" not in x
    ]
    out, k = [], 0
    for i in range(n):
        if i % 10 == 9:
            out.append(out[i // 2])
            continue
        parts: list[str] = []
        while sum(len(p.encode()) for p in parts) < 1000:
            parts.append(lines[k % len(lines)])
            k += 1
        out.append(" ".join(parts) + f" #{i}")
    return out


def case(root: Path, n: int, workers: int) -> list[str]:
    docs = texts(n)
    files = root / f"files{n}"
    for i, t in enumerate(docs):
        d = files / f"d{i * 100 // n:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:07d}.txt").write_text(t + "\n", encoding="utf-8")
    single = root / f"one{n}.jsonl"
    single.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in docs), "utf-8")
    recipe = root / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(RECIPE), encoding="utf-8")
    times: dict[str, list[float]] = {"files": [], "jsonl": []}
    phases: dict[str, dict[str, float]] = {}
    for rnd in range(2):
        for name, inp in (("files", files), ("jsonl", single)):
            out = root / f"out-{name}-{n}-{rnd}"
            cmd = [sys.executable, "-m", "dataprep.cli", "prepare", str(inp), "--out", str(out)]
            cmd += ["--recipe", str(recipe), "--workers", str(workers), "--quiet"]
            m = run_measured(cmd, cwd=str(REPO))
            if m.returncode:
                raise SystemExit(f"{name}: exit {m.returncode}: {m.stderr[-2000:]}")
            if not times[name] or m.seconds < min(times[name]):
                phases[name] = json.loads((out / "timings.json").read_text())["seconds"]
            times[name].append(m.seconds)
            print(f"{n} {name} round {rnd + 1}: {m.seconds:.1f} s", flush=True)
    best = {k: min(v) for k, v in times.items()}
    ratio = best["files"] / best["jsonl"]
    mb = sum(len(t.encode()) + 1 for t in docs) / 1e6
    floor = read_floor(files)
    print(f"{n} files: {best['files']:.1f} s, one JSONL: {best['jsonl']:.1f} s, ratio {ratio:.2f}")
    p = {k: (v.get("plan", 0.0), v.get("pass0", 0.0)) for k, v in phases.items()}
    return [
        f"| {n:,} | {mb:.1f} | {best['files']:.1f} | {best['jsonl']:.1f} | {ratio:.2f} "
        f"| {p['files'][0]:.1f} / {p['jsonl'][0]:.1f} | {p['files'][1]:.1f} / {p['jsonl'][1]:.1f} "
        f"| {floor:.1f} |"
    ]


def read_floor(root: Path) -> float:
    """Seconds a bare Python loop takes to open and read every file under ``root`` once."""
    paths = sorted(str(p) for p in root.rglob("*.txt"))
    t = time.perf_counter()
    for p in paths:
        with open(p, "rb") as f:
            f.read()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=20_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--also-200k", action="store_true")
    a = ap.parse_args()
    rows = [
        "| files | MB | files, s | one JSONL, s | ratio | plan, s (files / JSONL) | pass 0, s "
        "| open+read floor, s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for n in [a.files, *([200_000] if a.also_200k else [])]:
            rows += case(Path(tmp), n, a.workers)
    text = "Best of 2 alternating rounds each, whole `dataprep prepare` command.\n\n" + "\n".join(rows)
    command = "python bench/bench_small_files.py " + " ".join(sys.argv[1:])
    print(write_result("small_files", "Many small files against one JSONL", command, text))


if __name__ == "__main__":
    main()
