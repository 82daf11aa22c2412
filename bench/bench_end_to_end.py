"""End-to-end: this project's default recipe vs datatrove, the bare tokenizer, and itself on Ray.

Usage: python bench/bench_end_to_end.py [CORPUS.jsonl.gz] [--mb 40] [--skip-peer] [--skip-ray]

On the same text (the first --mb MB of CORPUS, written as 8 uncompressed JSONL files so both tools
get 8 tasks), runs in one go:
  ours local 1 worker / 2 workers   `dataprep prepare` with the default recipe
  ours ray 2 CPUs                   the same with --executor ray, starting its own local Ray
                                    instance (Ray's start-up and shutdown included)
  ours ray, running cluster         the same joined to a 2-CPU Ray head started beforehand
                                    (`ray start --head --block`), as on a cluster that is up
  bare tokenizer                    tokenizers' encode_batch over the same texts with the run's
                                    tokenizer, 2 threads (the floor the pipeline cannot beat)
  datatrove                         bench/peer_datatrove.py: its closest stages (reader, ftfy, PII,
                                    repetition filter, MinHash in 4 steps with its Chinese word
                                    tokenizer, DocumentTokenizer), 2 workers, in its own venv
                                    (bench/.peer-venv, created on first use from the registry)
and prints MB/s, docs/s and peak RSS (summed over the process tree) for each, then the ratios the
project targets. Without CORPUS it uses zh_poetry.jsonl.gz from $CORPORA, else the sample corpus.
The table is also written to bench/results/end_to_end-<date>.md with a machine description.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _measure import Measured, open_text, run_measured, write_result

from dataprep.ray_executor import local_ray_head

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
PEER_VENV = BENCH / ".peer-venv"
PEER_PACKAGES = ["datatrove[processing]", "orjson", "spacy", "jieba"]


def write_slice(corpus: Path, dst: Path, limit_bytes: int, files: int = 8) -> tuple[int, int, list[str]]:
    """First limit_bytes of corpus as `files` JSONL files; returns (docs, text bytes, texts)."""
    dst.mkdir(parents=True)
    rows = []
    size = 0
    with open_text(corpus) as f:
        for line in f:
            rows.append(line)
            size += len(line.encode("utf-8"))
            if size >= limit_bytes:
                break
    per = -(-len(rows) // files)
    for k in range(files):
        (dst / f"part-{k:02d}.jsonl").write_text("".join(rows[k * per : (k + 1) * per]), encoding="utf-8")
    texts = [json.loads(r)["text"] for r in rows]
    return len(rows), sum(len(t.encode("utf-8")) for t in texts), texts


def ensure_peer_venv() -> Path | None:
    python = PEER_VENV / "bin" / "python"
    print(f"peer venv {PEER_VENV}: installing {' '.join(PEER_PACKAGES)} (once) ...", flush=True)
    try:
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PEER_PACKAGES], check=True)
    except subprocess.CalledProcessError as e:
        print(f"could not install the peer ({e}); skipping datatrove", flush=True)
        shutil.rmtree(PEER_VENV, ignore_errors=True)
        return None
    return python


def bare_tokenizer(tokenizer: Path, texts: list[str], threads: int) -> float:
    code = (
        "import sys, json, time\n"
        "from tokenizers import Tokenizer\n"
        "tok = Tokenizer.from_file(sys.argv[1]); texts = json.load(open(sys.argv[2]))\n"
        "t0 = time.perf_counter()\n"
        "for i in range(0, len(texts), 1000): tok.encode_batch(texts[i:i + 1000], add_special_tokens=False)\n"
        "print(time.perf_counter() - t0)\n"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump(texts, f, ensure_ascii=False)
    env = {**os.environ, "RAYON_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "true"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(tokenizer), f.name],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    os.unlink(f.name)
    return float(out.stdout.strip())


RAY_CLUSTER = "ours ray, running 2-CPU cluster"


def prepare_run(
    dataprep: str, tmp: Path, name: str, extra: list[str], rows: list[tuple[str, Measured]]
) -> bool:
    """`dataprep prepare` on tmp/in with the default recipe, measured into rows; False on failure."""
    out = tmp / name.replace(" ", "_").replace(",", "")
    m = run_measured([dataprep, "prepare", str(tmp / "in"), "--out", str(out), "--quiet", *extra])
    if m.returncode:
        print(m.stderr[-3000:])
        return False
    rows.append((name, m))
    print(f"  {name}: {m.seconds:.1f} s", flush=True)
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", type=Path, nargs="?")
    ap.add_argument("--mb", type=float, default=40)
    ap.add_argument("--skip-peer", action="store_true")
    ap.add_argument("--skip-ray", action="store_true")
    args = ap.parse_args()
    corpus = args.corpus
    if corpus is None and os.environ.get("CORPORA"):
        corpus = Path(os.environ["CORPORA"]) / "zh_poetry.jsonl.gz"
    if corpus is None or not corpus.exists():
        corpus = REPO / "sample_corpus" / "mail" / "spamassassin.jsonl.gz"
        print(f"no corpus given: using {corpus} (too small for meaningful speeds)")
    dataprep = str(Path(sys.executable).with_name("dataprep"))
    rows: list[tuple[str, Measured]] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        docs, nbytes, texts = write_slice(corpus, tmp / "in", int(args.mb * 1e6))
        mb = nbytes / 1e6
        print(f"corpus: {corpus.name}, first {docs:,} documents, {mb:.1f} MB of text, 8 files", flush=True)
        runs = [("ours local, 1 worker", ["--workers", "1"]), ("ours local, 2 workers", ["--workers", "2"])]
        if not args.skip_ray:
            runs.append(("ours ray, 2 CPUs", ["--workers", "2", "--executor", "ray"]))
        for name, extra in runs:
            if not prepare_run(dataprep, tmp, name, extra, rows):
                return 1
        if not args.skip_ray:
            with local_ray_head(2) as address:
                if address is None:
                    print("  could not start a Ray head: skipping the running-cluster run", flush=True)
                else:
                    extra = ["--workers", "2", "--executor", "ray", "--ray-address", address]
                    if not prepare_run(dataprep, tmp, RAY_CLUSTER, extra, rows):
                        return 1
        first_out = tmp / "ours_local_1_worker"
        tokenizer = first_out / "tokenizer" / "tokenizer.json"
        stats = json.loads((first_out / "stats.json").read_text())
        bare = bare_tokenizer(tokenizer, texts, threads=2)
        rows.append(("bare tokenizer encode_batch, 2 threads", Measured(bare, 0.0, 0, "")))
        print(f"  bare tokenizer: {bare:.1f} s", flush=True)
        if not args.skip_peer:
            python = ensure_peer_venv()
            if python is not None:
                m = run_measured(
                    [
                        str(python),
                        str(BENCH / "peer_datatrove.py"),
                        str(tmp / "in"),
                        str(tmp / "dt"),
                        "--tokenizer",
                        str(tokenizer),
                        "--workers",
                        "2",
                    ]
                )
                if m.returncode:
                    print("datatrove failed:\n" + m.stderr[-3000:])
                else:
                    rows.append(("datatrove, 2 workers", m))
                    print(f"  datatrove: {m.seconds:.1f} s", flush=True)
    table = [
        f"corpus: {corpus.name}, {docs:,} documents, {mb:.1f} MB of text; kept {stats['totals']['kept']:,}",
        "",
        f"| {'run':<40} | {'seconds':>8} | {'MB/s':>6} | {'docs/s':>8} | {'peak RSS MB':>11} |",
        f"|{'-' * 42}|{'-' * 10}:|{'-' * 7}:|{'-' * 9}:|{'-' * 12}:|",
    ]
    by = {}
    for name, m in rows:
        by[name] = m.seconds
        # a running cluster's workers are not the driver's children: their memory is not seen
        rss = f"{m.peak_rss_mb:.0f}" if m.peak_rss_mb and name != RAY_CLUSTER else "-"
        table.append(
            f"| {name:<40} | {m.seconds:8.1f} | {mb / m.seconds:6.2f} | {docs / m.seconds:8.0f} | {rss:>11} |"
        )
    two = by["ours local, 2 workers"]
    ratios = [
        ("ours(2) / bare tokenizer(2 threads)", by["bare tokenizer encode_batch, 2 threads"] / two, 0.8),
        ("2 workers / 1 worker", by["ours local, 1 worker"] / two, 1.8),
    ]
    if "datatrove, 2 workers" in by:
        ratios.append(("ours / datatrove (2 workers each)", by["datatrove, 2 workers"] / two, 2.0))
    if "ours ray, 2 CPUs" in by:
        ratios.append(("ray / local (2 CPUs, Ray started by the run)", two / by["ours ray, 2 CPUs"], 0.9))
    if RAY_CLUSTER in by:
        ratios.append(("ray / local (2 CPUs, Ray already running)", two / by[RAY_CLUSTER], 0.9))
    table += ["", "| ratio (speed) | value | target |", "|---|---:|---:|"]
    table += [f"| {n} | {v:.2f} | ≥ {t} |" for n, v, t in ratios]
    text = "\n".join(table)
    print("\n" + text)
    write_result(
        "end_to_end",
        "End-to-end benchmark",
        f"python bench/bench_end_to_end.py {corpus.name} --mb {args.mb:g}",
        text,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
