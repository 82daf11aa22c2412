"""End-to-end: this project's default recipe vs datatrove, the bare tokenizer, and itself on Ray.

Usage: python bench/bench_end_to_end.py [CORPUS.jsonl.gz] [--mb 40] [--repeat 1] [--skip-peer]
                                       [--skip-ray] [--marginal]

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
  Ray alone                         what Ray costs with no work in between: import, start a
                                    2-CPU instance and shut it down (or join the running
                                    cluster and leave it), as --executor ray does
and prints MB/s, docs/s, CPU seconds (with the cores busy on average) and peak RSS (summed over the
process tree) for each, then the ratios the project targets, each with its ceiling: the ratio had
our run wasted nothing (a local run taking just its CPU seconds spread over both cores, a run on
Ray just the local run plus what Ray alone costs), so a miss shows whether it is idle cores and
Ray's overhead or the CPU work itself. With --repeat N the runs of ours and
the bare tokenizer are repeated in N back-to-back rounds (datatrove, at 3x slower, once): the
table shows medians and ranges, and each ratio from the medians and per round (on a shared VM
speeds drift by 20% within minutes; a ratio within one round compares runs made minutes apart).
Without CORPUS it uses zh_poetry.jsonl.gz from $CORPORA, else the sample corpus. The table is also
written to bench/results/end_to_end-<date>.md with a machine description.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

from _measure import Measured, open_text, run_measured, write_result

from dataprep.executor.ray import local_ray_head

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


def bare_tokenizer(tokenizer: Path, texts: list[str], threads: int) -> Measured:
    """tokenizers' encode_batch over texts in batches of 1000 (loading excluded): wall and CPU
    seconds of the encoding alone."""
    code = (
        "import sys, json, time\n"
        "from tokenizers import Tokenizer\n"
        "tok = Tokenizer.from_file(sys.argv[1]); texts = json.load(open(sys.argv[2]))\n"
        "t0, c0 = time.perf_counter(), time.process_time()\n"
        "for i in range(0, len(texts), 1000): tok.encode_batch(texts[i:i + 1000], add_special_tokens=False)\n"
        "print(time.perf_counter() - t0, time.process_time() - c0)\n"
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
    seconds, cpu = (float(x) for x in out.stdout.split())
    return Measured(seconds, 0.0, 0, "", cpu)


RAY_CLUSTER = "ours ray, running 2-CPU cluster"
# what Ray itself costs a run, with no work in between: RayExecutor made and closed, with the
# import of ray (a new local instance started and shut down; or a running cluster joined and left)
RAY_ALONE = "Ray alone: start a 2-CPU instance, shut it down"
RAY_CLUSTER_ALONE = "Ray alone: join the running cluster, leave it"
RAY_ALONE_CODE = (
    "import sys; from dataprep.executor.ray import RayExecutor; RayExecutor(2, *sys.argv[1:]).__exit__()"
)


BARE = "bare tokenizer encode_batch, 2 threads"
PEER = "datatrove, 2 workers"
ONE, TWO, RAY = "ours local, 1 worker", "ours local, 2 workers", "ours ray, 2 CPUs"
CORES = 2  # of every run compared: 2 workers, 2 threads, 2 Ray CPUs


class Ratio(NamedTuple):
    """A speed ratio (higher is better), its target, and its ceiling: the ratio had our run wasted
    nothing (None when the round did not measure what that needs)."""

    name: str
    value: float
    target: float
    ceiling: float | None = None


def out_dir(tmp: Path, name: str, inp: str = "in") -> Path:
    """Where the run ``name`` on tmp/``inp`` writes its outputs."""
    return tmp / f"{inp}_{name.replace(' ', '_').replace(',', '')}"


def prepare_run(dataprep: str, tmp: Path, name: str, extra: list[str], inp: str = "in") -> Measured | None:
    """`dataprep prepare` on tmp/``inp`` with the default recipe, measured; None on failure."""
    out = out_dir(tmp, name, inp)
    shutil.rmtree(out, ignore_errors=True)
    m = run_measured([dataprep, "prepare", str(tmp / inp), "--out", str(out), "--quiet", *extra])
    if m.returncode:
        print(m.stderr[-3000:])
        return None
    print(f"  {name}: {m.seconds:.1f} s, {m.cpu_seconds:.1f} CPU-s", flush=True)
    return m


def run_peer(tmp: Path, tokenizer: Path) -> Measured | None:
    """bench/peer_datatrove.py on tmp/in with 2 workers, in its own venv; None when unavailable."""
    python = ensure_peer_venv()
    if python is None:
        return None
    cmd = [str(python), str(BENCH / "peer_datatrove.py"), str(tmp / "in"), str(tmp / "dt")]
    m = run_measured([*cmd, "--tokenizer", str(tokenizer), "--workers", "2"])
    if m.returncode:
        print("datatrove failed:\n" + m.stderr[-3000:])
        return None
    print(f"  datatrove: {m.seconds:.1f} s", flush=True)
    return m


def ray_alone(address: str | None = None) -> Measured:
    """What Ray costs a run with no work in between: a process that imports ray, starts a local
    2-CPU instance (or joins the cluster at ``address``) as ``--executor ray`` does, and shuts it
    down (or leaves)."""
    m = run_measured([sys.executable, "-c", RAY_ALONE_CODE, *([address] if address else [])])
    print(f"  {RAY_CLUSTER_ALONE if address else RAY_ALONE}: {m.seconds:.1f} s", flush=True)
    return m


def one_round(
    dataprep: str, tmp: Path, texts: list[str], ray: bool, inp: str = "in"
) -> dict[str, Measured] | None:
    """Every run of ours and the bare tokenizer once, back to back, on tmp/``inp``: {run name:
    measurement}."""
    runs = [(ONE, ["--workers", "1"]), (TWO, ["--workers", "2"])]
    if ray:
        runs.append((RAY, ["--workers", "2", "--executor", "ray"]))
    got: dict[str, Measured] = {}
    for name, extra in runs:
        m = prepare_run(dataprep, tmp, name, extra, inp)
        if m is None:
            return None
        got[name] = m
    if ray:
        got[RAY_ALONE] = ray_alone()
        with local_ray_head(2) as address:
            if address is None:
                print("  could not start a Ray head: skipping the running-cluster run", flush=True)
            else:
                extra = ["--workers", "2", "--executor", "ray", "--ray-address", address]
                m = prepare_run(dataprep, tmp, RAY_CLUSTER, extra)
                if m is None:
                    return None
                got[RAY_CLUSTER] = m
                got[RAY_CLUSTER_ALONE] = ray_alone(address)
    tokenizer = out_dir(tmp, ONE, inp) / "tokenizer" / "tokenizer.json"
    got[BARE] = bare_tokenizer(tokenizer, texts, threads=2)
    print(f"  bare tokenizer: {got[BARE].seconds:.1f} s", flush=True)
    return got


def ratios_of(by: dict[str, float], cpu: dict[str, float] | None = None) -> list[Ratio]:
    """The speed ratios from seconds per run name, with their ceilings: ours can take no less than
    its CPU seconds (``cpu``, per run name) spread over the cores, and a run on Ray no less than the
    local run plus what Ray alone costs (when measured)."""
    two = by[TWO]
    floor = cpu[TWO] / CORES if cpu and cpu.get(TWO) else None  # ours, with every core busy throughout

    def over_floor(reference: float) -> float | None:
        return reference / floor if floor else None

    def with_ray(alone: str) -> float | None:
        return two / (two + by[alone]) if alone in by else None

    out = [Ratio("ours(2) / bare tokenizer (2 threads)", by[BARE] / two, 0.8, over_floor(by[BARE]))]
    out.append(Ratio("2 workers / 1 worker", by[ONE] / two, 1.8, over_floor(by[ONE])))
    if PEER in by:
        out.append(Ratio("ours / datatrove (2 workers each)", by[PEER] / two, 2.0, over_floor(by[PEER])))
    if RAY in by:
        name = "ray / local (2 CPUs, Ray started by the run)"
        out.append(Ratio(name, two / by[RAY], 0.9, with_ray(RAY_ALONE)))
    if RAY_CLUSTER in by:
        name = "ray / local (2 CPUs, Ray already running)"
        out.append(Ratio(name, two / by[RAY_CLUSTER], 0.9, with_ray(RAY_CLUSTER_ALONE)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", type=Path, nargs="?")
    ap.add_argument("--mb", type=float, default=40)
    ap.add_argument(
        "--repeat", type=int, default=1, help="rounds of ours and the bare tokenizer (datatrove runs once)"
    )
    ap.add_argument("--skip-peer", action="store_true")
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument(
        "--marginal",
        action="store_true",
        help="also run ours local and the bare tokenizer on the first half of the text, and print "
        "the ratios of the extra seconds the second half costs (what the ratios tend to on a large corpus)",
    )
    args = ap.parse_args()
    corpus = args.corpus
    if corpus is None and os.environ.get("CORPORA"):
        corpus = Path(os.environ["CORPORA"]) / "zh_poetry.jsonl.gz"
    if corpus is None or not corpus.exists():
        corpus = REPO / "sample_corpus" / "mail" / "spamassassin.jsonl.gz"
        print(f"no corpus given: using {corpus} (too small for meaningful speeds)")
    dataprep = str(Path(sys.executable).with_name("dataprep"))
    rounds: list[dict[str, Measured]] = []
    halves: list[dict[str, Measured]] = []
    half_mb = 0.0
    peer: Measured | None = None
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        docs, nbytes, texts = write_slice(corpus, tmp / "in", int(args.mb * 1e6))
        mb = nbytes / 1e6
        print(f"corpus: {corpus.name}, first {docs:,} documents, {mb:.1f} MB of text, 8 files", flush=True)
        if args.marginal:
            line_bytes = sum(f.stat().st_size for f in (tmp / "in").iterdir())
            _, half_bytes, half_texts = write_slice(corpus, tmp / "half", line_bytes // 2)
            half_mb = half_bytes / 1e6
        for k in range(max(1, args.repeat)):
            print(f"round {k + 1}/{max(1, args.repeat)}", flush=True)
            got = one_round(dataprep, tmp, texts, not args.skip_ray)
            if got is None:
                return 1
            rounds.append(got)
            if args.marginal:
                print(f"round {k + 1}: the first half of the text", flush=True)
                half_got = one_round(dataprep, tmp, half_texts, False, "half")
                if half_got is None:
                    return 1
                halves.append(half_got)
        stats = json.loads((out_dir(tmp, ONE) / "stats.json").read_text())
        if not args.skip_peer:
            peer = run_peer(tmp, out_dir(tmp, ONE) / "tokenizer" / "tokenizer.json")
    text = result_table(corpus.name, docs, mb, stats, rounds, peer)
    if halves:
        text += "\n\n" + marginal_table(mb, half_mb, rounds, halves)
    print("\n" + text)
    write_result(
        "end_to_end",
        "End-to-end benchmark",
        f"python bench/bench_end_to_end.py {corpus.name} --mb {args.mb:g} --repeat {args.repeat}"
        + (" --marginal" if args.marginal else ""),
        text,
    )
    return 0


def result_table(
    corpus: str, docs: int, mb: float, stats: dict, rounds: list[dict[str, Measured]], peer: Measured | None
) -> str:
    """Markdown: per run the median over rounds (and the range), MB/s, docs/s, CPU seconds and
    cores busy on average, peak RSS; what Ray alone costs; then each ratio from the medians and
    per round, with its ceiling from the medians (:func:`ratios_of`)."""
    alone = [name for name in (RAY_ALONE, RAY_CLUSTER_ALONE) if name in rounds[0]]
    names = [name for name in rounds[0] if name not in alone] + ([PEER] if peer is not None else [])
    runs = {name: [r[name] for r in rounds if name in r] for name in rounds[0]}
    if peer is not None:
        runs[PEER] = [peer]
    median = {name: statistics.median(m.seconds for m in ms) for name, ms in runs.items()}
    median_cpu = {name: statistics.median(m.cpu_seconds for m in ms) for name, ms in runs.items()}
    table = [
        f"corpus: {corpus}, {docs:,} documents, {mb:.1f} MB of text; kept {stats['totals']['kept']:,}; "
        f"{len(rounds)} round(s), seconds are medians (range over rounds)",
        "",
        "| run | seconds | range | MB/s | docs/s | CPU s | cores busy | peak RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in names:
        ms, sec = runs[name], median[name]
        cpu = statistics.median(m.cpu_seconds for m in ms)
        # CPU is seen only for processes their parent waits for: not a running cluster's workers,
        # Ray's daemons and workers, or datatrove's pool workers (1.3 CPU-s seen for a 98 s run)
        seen = name not in (RAY_CLUSTER, RAY, PEER)
        rss = max(m.peak_rss_mb for m in ms)
        spread = f"{min(m.seconds for m in ms):.1f}–{max(m.seconds for m in ms):.1f}" if len(ms) > 1 else "-"
        table.append(
            f"| {name} | {sec:.1f} | {spread} | {mb / sec:.2f} | {docs / sec:.0f} | "
            + (f"{cpu:.1f} | {cpu / sec:.2f} | " if seen and cpu else "- | - | ")
            + (f"{rss:.0f} |" if rss and name != RAY_CLUSTER else "- |")
        )
    for name in alone:
        spread = ", ".join(f"{m.seconds:.1f}" for m in runs[name])
        table.append(f"\n{name}: {median[name]:.1f} s (per round {spread}), no work in between")
    peer_seconds = {PEER: peer.seconds} if peer is not None else {}
    per_round = [ratios_of({**{n: m.seconds for n, m in r.items()}, **peer_seconds}) for r in rounds]
    table += [
        "",
        "| ratio (speed) | from medians | per round | target | ceiling |",
        "|---|---:|---:|---:|---:|",
    ]
    for k, ratio in enumerate(ratios_of(median, median_cpu)):
        each = ", ".join(f"{rs[k].value:.2f}" for rs in per_round)
        ceiling = f"{ratio.ceiling:.2f}" if ratio.ceiling is not None else "-"
        table.append(f"| {ratio.name} | {ratio.value:.2f} | {each} | ≥ {ratio.target} | {ceiling} |")
    table += [
        "",
        f"ceiling: the ratio had our run wasted nothing. A local run of ours takes at least its CPU "
        f"seconds over the {CORES} cores; a run on Ray at least the local run plus what Ray alone costs.",
    ]
    return "\n".join(table)


def marginal_table(
    mb: float, half_mb: float, rounds: list[dict[str, Measured]], halves: list[dict[str, Measured]]
) -> str:
    """Markdown: per local run the seconds of the whole text and of its first half (medians), the
    extra seconds the second half cost and the MB/s at which it went; then the ratios of those extra
    seconds. Fixed costs (start-up, tokenizer training, imports) cancel out of the difference, so
    these are the ratios a much larger corpus tends to."""
    names = [ONE, TWO, BARE]
    whole = {n: statistics.median(r[n].seconds for r in rounds) for n in names}
    half = {n: statistics.median(r[n].seconds for r in halves) for n in names}
    extra = {n: whole[n] - half[n] for n in names}
    lines = [
        f"Marginal cost: the whole text ({mb:.1f} MB) against its first half ({half_mb:.1f} MB), "
        "medians over rounds",
        "",
        "| run | whole s | half s | extra s | MB/s on the extra text |",
        "|---|---:|---:|---:|---:|",
    ]
    for n in names:
        speed = f"{(mb - half_mb) / extra[n]:.2f}" if extra[n] > 0 else "-"
        lines.append(f"| {n} | {whole[n]:.1f} | {half[n]:.1f} | {extra[n]:.1f} | {speed} |")
    per_round = [{n: r[n].seconds - h[n].seconds for n in names} for r, h in zip(rounds, halves, strict=True)]
    lines += ["", "| ratio of extra seconds (speed) | from medians | per round | target |"]
    lines.append("|---|---:|---:|---:|")
    if min(extra.values()) <= 0 or min(min(e.values()) for e in per_round) <= 0:
        return "\n".join([*lines, "| (a half took as long as the whole: no ratio) | - | - | - |"])
    each_round = [ratios_of(e) for e in per_round]
    for k, ratio in enumerate(ratios_of(extra)):
        each = ", ".join(f"{rs[k].value:.2f}" for rs in each_round)
        lines.append(f"| {ratio.name} | {ratio.value:.2f} | {each} | ≥ {ratio.target} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
