"""Throughput of quality_classifier and decontaminate: the default chain's per-core rate with each
stage on and off, measured in the same run.

The chain: every stage of the default recipe before exact_dedup (bench_cleaning's chain, one
process, batches of 1000, reading included); "+ quality" adds quality_classifier (the demo model,
threshold 0.5) after pii, "+ decontaminate" adds decontaminate (the sample eval sets of
sample_corpus/.eval, as in recipes/quality.yaml) after pii, "+ decontaminate 1M" the same with a
synthetic eval set of about ``--index-ngrams`` random-Han 13-grams added, "+ both" adds both
(decontaminate with the sample eval sets). With ``--fasttext-model M`` (a quantized .ftz, or any
fastText model without the linear form), "+ quality (fastText predict)" adds quality_classifier
with that model, scored by fastText's predict one document at a time (the stage's fallback).
Each round runs every variant once, back to back, the order rotating per round against drift,
after one uncounted warm-up run of each; CPU seconds (user + sys of this process) per run; per
round the rate ratio variant / chain (MB per CPU-second), printed as median and range over the
``--repeat`` rounds, with the added stages' own CPU seconds.

    python bench/bench_quality.py CORPUS.jsonl[.gz] [--repeat 5] [--index-ngrams 1000000] [--fasttext-model M]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._measure import open_text, write_result  # noqa: E402

BATCH = 1000
SAMPLE_EVAL = [
    str(ROOT / "sample_corpus" / ".eval" / "sample_benchmark.jsonl"),
    {
        "path": str(ROOT / "sample_corpus" / ".eval" / "humaneval_first20.jsonl"),
        "fields": ["prompt", "canonical_solution"],
    },
]


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def synthetic_eval(path: Path, ngrams: int) -> None:
    """An eval set of 60-character random-Han items with about ``ngrams`` 13-grams in all."""
    rng = np.random.default_rng(0)
    han = np.arange(0x4E00, 0x9FA6)
    n_items = max(1, ngrams // 48)
    chars = rng.choice(han, n_items * 60)
    with path.open("w", encoding="utf-8") as f:
        for i in range(n_items):
            q = "".join(map(chr, chars[i * 60 : (i + 1) * 60]))
            f.write(json.dumps({"question": q, "choices": ["甲", "乙"], "answer": "甲"}, ensure_ascii=False))
            f.write("\n")


def build_chain(extra: list[tuple[str, dict[str, Any]]], work: Path) -> list[tuple[str, Any, Any]]:
    """(label, stage, StageContext) of the default chain before exact_dedup with ``extra`` stages
    inserted after pii; the extra stages set up as a run would (index built, model loaded)."""
    from dataprep.recipe import load_recipe
    from dataprep.stage import DriverContext, StageContext, build_params, get
    from dataprep.stats import StageStats

    recipe = load_recipe("default")
    names = [s.name for s in recipe.stages]
    base = [(s.label, s.build()) for s in recipe.stages[: names.index("exact_dedup")]]
    at = [label for label, _ in base].index("pii") + 1
    added = []
    for name, params in extra:
        cls = get(name)
        stage = cls(build_params(cls.Params, params, name))
        wd = work / name
        wd.mkdir(parents=True, exist_ok=True)
        stage.setup(DriverContext(wd, wd, ["0"], 0, {}, StageStats(), label=name))
        added.append((name, stage, wd))
    out = []
    for label, stage in base[:at]:
        out.append((label, stage, StageContext(stats=StageStats(), work_dir=work)))
    for label, stage, wd in added:
        out.append((label, stage, StageContext(stats=StageStats(), work_dir=wd)))
    for label, stage in base[at:]:
        out.append((label, stage, StageContext(stats=StageStats(), work_dir=work)))
    for _, stage, ctx in out:
        stage.begin_task(ctx)
    return out


def run_chain(path: str, chain: list[tuple[str, Any, Any]]) -> tuple[float, int, dict[str, float], int]:
    """(CPU seconds of the whole run, text bytes read, CPU seconds per stage, documents kept)."""
    from dataprep.document import Document, Drop
    from dataprep.stage import GlobalStage

    per_stage = {label: 0.0 for label, _, _ in chain}
    kept = 0

    def run(batch: list[Document]) -> int:
        for label, st, ctx in chain:
            c0 = _cpu()
            results = st.apply(batch, ctx) if isinstance(st, GlobalStage) else st.process(batch, ctx)
            per_stage[label] += _cpu() - c0
            batch = [r for r in results if not isinstance(r, Drop)]
        return len(batch)

    nbytes = 0
    c0 = _cpu()
    batch: list[Document] = []
    with open_text(path) as f:
        for i, line in enumerate(f):
            obj = json.loads(line)
            nbytes += len(obj["text"].encode("utf-8"))
            batch.append(Document(id=str(obj.get("id", i)), text=obj["text"]))
            if len(batch) >= BATCH:
                kept += run(batch)
                batch = []
    if batch:
        kept += run(batch)
    return _cpu() - c0, nbytes, per_stage, kept


def _named(argv: list[str]) -> list[str]:
    """The arguments with paths cut to their file names (the result file names no directory)."""
    return [Path(a).name if "/" in a else a for a in argv]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--index-ngrams", type=int, default=1_000_000)
    ap.add_argument("--fasttext-model", help="a fastText model scored by predict, as a further variant")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-quality-"))
    synth = work / "synthetic.jsonl"
    synthetic_eval(synth, args.index_ngrams)
    quality = ("quality_classifier", {"model": "demo", "threshold": 0.5})
    decont = ("decontaminate", {"eval_sets": SAMPLE_EVAL})
    decont_big = ("decontaminate", {"eval_sets": [*SAMPLE_EVAL, str(synth)]})
    variants: dict[str, list[tuple[str, dict[str, Any]]]] = {
        "chain": [],
        "+ quality": [quality],
        "+ decontaminate": [decont],
        f"+ decontaminate {args.index_ngrams / 1e6:g}M": [decont_big],
        "+ both": [decont, quality],
    }
    if args.fasttext_model:
        fallback = ("quality_classifier", {"model": args.fasttext_model, "threshold": 0.5})
        variants["+ quality (fastText predict)"] = [fallback]
    t0 = time.perf_counter()
    chains = {name: build_chain(extra, work / name.replace(" ", "_")) for name, extra in variants.items()}
    print(f"set up in {time.perf_counter() - t0:.1f} s", flush=True)
    runs: dict[str, list[tuple[float, dict[str, float], int]]] = {name: [] for name in variants}
    mb = 0.0
    names = list(variants)
    for name in names:  # warm-up (compiled kernels, tables, page cache): not counted
        run_chain(args.corpus, chains[name])
    for r in range(args.repeat):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            cpu, nbytes, per_stage, kept = run_chain(args.corpus, chains[name])
            mb = nbytes / 1e6
            runs[name].append((cpu, per_stage, kept))
            print(
                f"round {r + 1} {name:24s} {cpu:6.2f} CPU-s {mb / cpu:5.2f} MB/CPU-s kept {kept:,}",
                flush=True,
            )
    lines = [
        f"Corpus: {Path(args.corpus).name}, {mb:.1f} MB of text; {args.repeat} rounds, every variant once "
        "per round (order rotating); CPU seconds of this process (user + sys).",
        "",
        "| variant | MB per CPU-s (median) | rate / chain's, same round: median (range) | added stages' "
        "CPU s (median) | their share of the run's CPU | kept |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    base = [cpu for cpu, _, _ in runs["chain"]]
    for name, extra in variants.items():
        cpus = [cpu for cpu, _, _ in runs[name]]
        ratios = sorted(b / c for b, c in zip(base, cpus, strict=True))
        own = [sum(ps[label] for label, _ in extra) for _, ps, _ in runs[name]]
        own_med = statistics.median(own)
        lines.append(
            f"| {name} | {mb / statistics.median(cpus):.2f} | {statistics.median(ratios):.3f} "
            f"({ratios[0]:.3f}-{ratios[-1]:.3f}) | {own_med:.2f} | "
            f"{own_med / statistics.median(cpus):.1%} | {runs[name][0][2]:,} |"
        )
    text = "\n".join(lines)
    print(text)
    path = write_result(
        "quality_throughput",
        "quality_classifier and decontaminate throughput",
        " ".join(["python", "bench/bench_quality.py", Path(args.corpus).name, *_named(sys.argv[2:])]),
        text,
    )
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
