"""Megatron-LM's own code against dataprep's ``megatron`` and ``bin`` shards.

Torch is too heavy for CI, so this runs outside the test suite, in a side virtualenv
(bench/.megatron-venv, created on first use: torch==2.13.0 (CPU) and megatron-core==MCORE_VERSION
with --no-deps plus numpy and packaging, all its dataset code imports):

1. ``fixtures``: Megatron-core's ``IndexedDatasetBuilder`` writes the .bin/.idx of FIXED token
   lists (a uint16 and an int32 case, dtype by ``DType.optimal_dtype``) into tests/data/megatron/,
   with tokens.json (the lists) and SOURCES.md. tests/test_megatron_format.py compares dataprep's
   writer with them byte for byte, without torch.
2. ``prepare``: ``dataprep prepare`` on sample_corpus with the default recipe (pack.writers
   mindrecord, bin, megatron), and once without megatron for the cost of writing it.
3. ``gpt``: Megatron-core's ``GPTDataset`` (CPU, BlendedMegatronDatasetBuilder, one epoch) over
   OUT/shards/megatron/<split>_text_document and, for contrast, over the packed
   OUT/shards/bin/<split>-NNNNN files: every sequence ends with EOS? every boundary between two
   documents inside a sample falls at an EOS token?

The report goes to bench/results/megatron-<date>.md (and stdout).

    python bench/megatron_fixtures.py                 # all three
    python bench/megatron_fixtures.py --only fixtures # just the fixtures
    python bench/megatron_fixtures.py --out OUT --only gpt   # GPTDataset over an existing OUT
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "bench" / ".megatron-venv"
FIXTURES = ROOT / "tests" / "data" / "megatron"
TORCH_VERSION = "2.13.0"  # the CPU wheel; an unpinned torch would fetch a multi-GB CUDA build
MCORE_VERSION = "0.16.1"
SIDE_PACKAGES = ["numpy==2.4.6", "packaging==26.4"]  # megatron-core's other run-time imports
SEQUENCE_LENGTH = 512  # the default recipe's pack.seq_length
SEED = 1234

# Fixed token lists: documents WITHOUT their EOS (preprocess_data.py --append-eod adds it).
FIXTURE_CASES: dict[str, dict[str, Any]] = {
    "uint16": {
        "vocab_size": 8192,  # < 65500: DType.optimal_dtype -> uint16
        "eos_id": 2,
        "documents": [[5, 17, 300, 8191], [42], [0, 1, 3, 4, 5, 6, 7, 8], [65, 66, 67], [8000, 8001]],
    },
    "int32": {
        "vocab_size": 129280,  # >= 65500: int32 (DeepSeek-V3's vocabulary size)
        "eos_id": 1,
        "documents": [[128000, 65535, 65536, 7], [129279], [0, 2, 70000, 100000, 12], [3, 3, 3]],
    },
}


# ---------------------------------------------------------------------------------------------
# Side venv


def side_python() -> Path:
    """bench/.megatron-venv's python, the venv created first when missing (idempotent)."""
    python = VENV / "bin" / "python"
    stamp = VENV / f".installed-torch{TORCH_VERSION}-mcore{MCORE_VERSION}"
    if stamp.exists():
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, f"torch=={TORCH_VERSION}"], check=True)
    subprocess.run([*pip, "--no-deps", f"megatron-core=={MCORE_VERSION}", *SIDE_PACKAGES], check=True)
    stamp.touch()
    return python


def inside(python: Path, phase: str, *args: str) -> dict[str, Any]:
    """Run ``phase`` of this script in the side venv; its JSON answer."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [str(python), __file__, "--inside", phase, *args], capture_output=True, text=True, env=env
    )
    if done.returncode:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"the {phase} phase failed in {VENV.name} (exit {done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# Phases run inside the side venv (torch and megatron-core importable; dataprep not needed)


def inside_fixtures(dest: str) -> dict[str, Any]:
    """Megatron-core's IndexedDatasetBuilder on FIXTURE_CASES, as preprocess_data.py calls it."""
    import megatron.core
    import numpy
    import torch
    from megatron.core.datasets.indexed_dataset import DType, IndexedDataset, IndexedDatasetBuilder

    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    made: dict[str, Any] = {}
    for name, case in FIXTURE_CASES.items():
        dtype = DType.optimal_dtype(case["vocab_size"])
        prefix = out / f"{name}_text_document"
        builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
        for doc in case["documents"]:
            ids = [*doc, case["eos_id"]]
            builder.add_document(torch.IntTensor(ids), [len(ids)])
        builder.finalize(f"{prefix}.idx")
        back = IndexedDataset(str(prefix))
        made[name] = {
            "dtype": numpy.dtype(dtype).name,
            "sequences": len(back),
            "document_indices": back.document_indices.tolist(),
            "read_back": [back[i].tolist() for i in range(len(back))],
        }
    (out / "tokens.json").write_text(json.dumps(FIXTURE_CASES, indent=1) + "\n")
    return {"megatron_core": megatron.core.__version__, "torch": torch.__version__, "cases": made}


class _Tokenizer:
    """What GPTDataset asks of a tokenizer: vocab_size, eod, pad."""

    def __init__(self, vocab_size: int, eod: int, pad: int):
        self.vocab_size, self.eod, self.pad = vocab_size, eod, pad
        self.unique_identifiers = {"class": "dataprep-manifest", "vocab_size": vocab_size}


def _check_gpt(prefixes: list[str], eos: int, vocab: int, pad: int, cache: str) -> dict[str, Any]:
    """GPTDataset (one epoch, seeded) over ``prefixes`` blended as one train split; counts."""
    import numpy
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    sequences = not_ending = docs = 0
    for prefix in prefixes:
        ds = IndexedDataset(prefix)
        docs += len(ds.document_indices) - 1
        sizes = ds.sequence_lengths
        sequences += len(sizes)
        for i in range(len(ds)):
            not_ending += int(ds[i][-1] != eos)
    config = GPTDatasetConfig(
        random_seed=SEED,
        sequence_length=SEQUENCE_LENGTH,
        blend=(prefixes, None),
        split="100,0,0",
        tokenizer=_Tokenizer(vocab, eos, pad),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        path_to_cache=None,  # a cache needs torch.distributed initialised
        mid_level_dataset_surplus=0.005,
    )
    train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [None, None, None], lambda: True, config).build()
    assert train is not None
    datasets = getattr(train, "datasets", [train])
    samples = boundaries = glued = samples_glued = 0
    for dataset in datasets:
        dataset._query_document_sample_shuffle_indices(0)  # loads its indices
        seq_lengths = dataset.dataset.sequence_lengths
        for idx in range(len(dataset)):
            text, doc_ids = dataset._query_document_sample_shuffle_indices(idx)
            j = dataset.shuffle_index[idx]
            beg, beg_off = dataset.sample_index[j]
            end = dataset.sample_index[j + 1][0]
            pos = -1
            bad = 0
            for k, doc in enumerate(doc_ids[:-1]):  # every document boundary inside the sample
                pos += int(seq_lengths[doc]) - (int(beg_off) if k == 0 else 0)
                boundaries += 1
                bad += int(text[pos] != eos)
            assert len(doc_ids) == end - beg + 1
            samples += 1
            glued += bad
            samples_glued += int(bad > 0)
        assert numpy.all(numpy.asarray(dataset.document_index) < len(seq_lengths))
    return {
        "prefixes": len(prefixes),
        "documents_in_idx": docs,
        "sequences": sequences,
        "sequences_not_ending_with_eos": not_ending,
        "samples": samples,
        "boundaries_in_samples": boundaries,
        "boundaries_not_at_eos": glued,
        "samples_with_a_boundary_not_at_eos": samples_glued,
    }


def inside_gpt(out_dir: str) -> dict[str, Any]:
    """GPTDataset over OUT's megatron files, then over its packed bin files, per split."""
    import megatron.core
    import torch

    out = Path(out_dir)
    shards = json.loads((out / "manifest.json").read_text())["shards"]
    eos, vocab = shards["eos_id"], shards["vocab_size"]
    pad = shards["pad_id"] if shards["pad_id"] is not None else eos
    result: dict[str, Any] = {"megatron_core": megatron.core.__version__, "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as cache:
        for split, entry in shards["splits"].items():
            for fmt in ("megatron", "bin"):
                paths = [f["path"] for f in entry["files"] if f["format"] == fmt]
                prefixes = [str(out / p[: -len(".bin")]) for p in paths]
                if prefixes:
                    result[f"{split}/{fmt}"] = _check_gpt(prefixes, eos, vocab, pad, f"{cache}/{split}-{fmt}")
    return result


# ---------------------------------------------------------------------------------------------
# Driver (the project's venv)


def prepare(out: Path, writers: list[str]) -> dict[str, Any]:
    """``dataprep prepare`` on sample_corpus, default recipe with ``pack.writers`` = ``writers``."""
    import yaml

    recipe = yaml.safe_load((ROOT / "dataprep" / "recipes" / "default.yaml").read_text())
    for stage in recipe["stages"]:
        if "pack" in stage:
            stage["pack"]["writers"] = writers
    out.parent.mkdir(parents=True, exist_ok=True)
    recipe_path = out.parent / f"{out.name}.recipe.yaml"
    recipe_path.write_text(yaml.safe_dump(recipe, allow_unicode=True))
    shutil.rmtree(out, ignore_errors=True)
    dataprep = Path(sys.executable).with_name("dataprep")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    cmd = [str(dataprep), "prepare", "sample_corpus", "--out", str(out), "--recipe", str(recipe_path)]
    subprocess.run([*cmd, "--quiet"], check=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    shard_bytes = {
        d.name: sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) for d in (out / "shards").iterdir()
    }
    verify = subprocess.run([str(dataprep), "verify", str(out), "--quiet"], capture_output=True, text=True)
    verdict = "ok" if verify.returncode == 0 else verify.stderr.strip().splitlines()[-1]
    return {"wall_s": wall, "cpu_s": cpu, "shard_bytes": shard_bytes, "verify": verdict}


def report(fixtures: dict[str, Any] | None, runs: dict[str, Any], gpt: dict[str, Any] | None) -> str:
    today = datetime.date.today().isoformat()
    lines = [f"# Megatron-LM's own code on dataprep's shards ({today})", ""]
    lines += ["Command: `python bench/megatron_fixtures.py` (side venv bench/.megatron-venv).", ""]
    if fixtures:
        lines += [
            f"megatron-core {fixtures['megatron_core']}, torch {fixtures['torch']} (CPU).",
            "",
            "## Fixtures: IndexedDatasetBuilder on fixed token lists (tests/data/megatron/)",
            "",
            "| case | dtype (DType.optimal_dtype) | sequences | document_indices |",
            "|---|---|---|---|",
        ]
        for name, c in fixtures["cases"].items():
            lines.append(f"| {name} | {c['dtype']} | {c['sequences']} | {c['document_indices']} |")
        lines.append("")
    if runs:
        lines += [
            "## Cost of writing megatron by default (sample_corpus, default recipe, 2 cores)",
            "",
            "Medians of interleaved runs (`dataprep prepare sample_corpus --recipe R --quiet`, all cores); "
            "CPU s: the run's process tree.",
            "",
            "| pack.writers | runs | wall s | CPU s | shards/ bytes by format | verify |",
            "|---|---|---|---|---|---|",
        ]
        for name, r in runs.items():
            sizes = ", ".join(f"{k} {v:,}" for k, v in sorted(r["shard_bytes"].items()))
            lines.append(
                f"| {name} | {r['rounds']} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {sizes} | {r['verify']} |"
            )
        lines.append("")
    if gpt:
        lines += [
            f"## GPTDataset (megatron-core {gpt['megatron_core']}, CPU) over the output",
            "",
            f"GPTDatasetConfig(random_seed={SEED}, sequence_length={SEQUENCE_LENGTH}, "
            "blend=(prefixes, None), "
            'split="100,0,0", reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False); '
            "BlendedMegatronDatasetBuilder(GPTDataset, [None, None, None], lambda: True, config).build(): "
            "one epoch. Each split's files are built as the train split of their own GPTDataset.",
            "",
            "| split / format | .bin files | sequences | not ending with EOS | samples | document boundaries "
            "in samples | boundaries not at EOS | samples gluing a piece without EOS to other text |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for key, g in gpt.items():
            if "/" not in key:
                continue
            lines.append(
                f"| {key} | {g['prefixes']} | {g['sequences']:,} | {g['sequences_not_ending_with_eos']:,} | "
                f"{g['samples']:,} | {g['boundaries_in_samples']:,} | {g['boundaries_not_at_eos']:,} | "
                f"{g['samples_with_a_boundary_not_at_eos']:,} |"
            )
        lines += [
            "",
            "GPTDataset reads a .bin/.idx pair as a list of sequences, shuffles them (its document "
            "index, seeded) and cuts the concatenation into samples of sequence_length + 1 tokens. "
            "In the megatron files a sequence is a whole document ending with its EOS, so every "
            "document boundary inside a sample is an EOS. The packed bin files' .idx has one sequence "
            "per document piece of a row: a document continuing into the next row leaves a piece "
            "without EOS at the end of its row, which GPTDataset then places before an unrelated "
            "sequence with nothing between them ('boundaries not at EOS'). The bin format is "
            "pretrain/'s input (rows in order, actual_seq_len), not a GPTDataset input.",
        ]
        lines.append("")
    return "\n".join(lines)


def write_sources(fixtures: dict[str, Any]) -> None:
    text = f"""# Megatron indexed-dataset fixtures

Written by Megatron-core's own `IndexedDatasetBuilder` (megatron-core {fixtures["megatron_core"]},
torch {fixtures["torch"]} CPU), as Megatron-LM's tools/preprocess_data.py calls it with
`--append-eod`: one `add_document(ids + [eos], [len(ids) + 1])` per document, dtype
`DType.optimal_dtype(vocab_size)`, then `finalize(prefix.idx)`.

Made by `python bench/megatron_fixtures.py --only fixtures`; the token lists are in tokens.json
(documents without their EOS, with `vocab_size` and `eos_id`).

| files | vocab_size | dtype | documents |
|---|---|---|---|
"""
    for name, case in FIXTURE_CASES.items():
        dtype = fixtures["cases"][name]["dtype"]
        files = f"{name}_text_document.bin / .idx"
        text += f"| {files} | {case['vocab_size']} | {dtype} | {len(case['documents'])} |\n"
    text += "\ntests/test_megatron_format.py compares dataprep's `megatron` writer with them byte for byte.\n"
    (FIXTURES / "SOURCES.md").write_text(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["fixtures", "prepare", "gpt"], default=None)
    ap.add_argument(
        "--out", type=Path, default=None, help="output directory to check (default: prepared here)"
    )
    ap.add_argument("--repeat", type=int, default=3, help="prepare runs of each kind (medians)")
    ap.add_argument("--inside", default=None, help=argparse.SUPPRESS)
    ap.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inside:
        fn = {"fixtures": inside_fixtures, "gpt": inside_gpt}[args.inside]
        print(json.dumps(fn(*args.rest)))
        return 0
    python = side_python()
    fixtures = runs = gpt = None
    if args.only in (None, "fixtures"):
        fixtures = inside(python, "fixtures", str(FIXTURES))
        write_sources(fixtures)
        print(json.dumps(fixtures, indent=1))
    work = ROOT / "bench" / "results" / "tmp" / "megatron"
    out = args.out or work / "with-megatron"
    if args.only in (None, "prepare") and args.out is None:
        configs = {
            "mindrecord, bin": (work / "without-megatron", ["mindrecord", "bin"]),
            "mindrecord, bin, megatron": (out, ["mindrecord", "bin", "megatron"]),
        }
        rounds = [
            {name: prepare(*c) for name, c in configs.items()} for _ in range(args.repeat)
        ]  # interleaved
        runs = {}
        for name in configs:
            each = [r[name] for r in rounds]
            runs[name] = {
                **each[-1],
                "wall_s": statistics.median(r["wall_s"] for r in each),
                "cpu_s": statistics.median(r["cpu_s"] for r in each),
                "rounds": len(each),
            }
        print(json.dumps(runs, indent=1))
    if args.only in (None, "gpt"):
        gpt = inside(python, "gpt", str(out))
        print(json.dumps(gpt, indent=1))
    text = report(fixtures, runs or {}, gpt)
    if args.only is None:
        path = ROOT / "bench" / "results" / f"megatron-{datetime.date.today().isoformat()}.md"
        path.write_text(text + "\n")
        print(f"wrote {path.relative_to(ROOT)}")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
