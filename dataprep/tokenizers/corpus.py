"""``dataprep train-tokenizer``: the corpus a tokenizer trains on outside a run: texts of inputs,
sampled (:mod:`dataprep.tokenizers.sample`) and trained on (:mod:`dataprep.tokenizers.train`).

Inputs are raw corpus files/directories (read with the readers and the default recipe's input
options) or output directories of runs that kept their documents (OUT/documents/*.parquet, i.e.
a recipe without a packing stage): the cleaned text.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

from dataprep.tokenizers.sample import TextSample
from dataprep.tokenizers.train import train_tokenizer, write_training_info


def _run_documents(out: Path) -> Iterator[str]:
    from dataprep.docstore import read_docs

    for part in sorted((out / "documents").glob("*.parquet")):
        for batch in read_docs(part, 1000):
            for doc in batch:
                yield doc.text


def iter_texts(inputs: list[str]) -> Iterator[str]:
    """Document texts of every input, in a deterministic order."""
    raw: list[str] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir() and (p / "manifest.json").is_file():
            if not (p / "documents").is_dir():
                raise ValueError(
                    f"{p} is a run without documents/ (its recipe ended with packing): train on the corpus, "
                    "or on a run whose recipe stops before tokenize"
                )
            yield from _run_documents(p)
        else:
            raw.append(item)
    if not raw:
        return
    from dataprep.inputs import expand_inputs
    from dataprep.planning import make_plan
    from dataprep.recipe import load_recipe
    from dataprep.stage.reader import ReadReport, read_task
    from dataprep.stats import StageStats

    recipe = load_recipe("default")
    report = ReadReport(StageStats(), "skip")
    plan = make_plan(expand_inputs(raw), recipe, report)
    for split in plan.tasks:
        for doc in read_task(split, recipe.reader, report):
            yield doc.text


def train_tokenizer_command(
    inputs: list[str], out: str, kind: str, vocab_size: int, sample_bytes: int, quiet: bool = False
) -> int:
    started = time.monotonic()
    sample = TextSample(sample_bytes)
    last = started
    for text in iter_texts(inputs):
        sample.add(text)
        now = time.monotonic()
        if not quiet and now - last > 5:
            print(
                f"sampling: {sample.seen_docs:,} documents, {sample.seen_bytes / 1e6:,.1f} MB read",
                file=sys.stderr,
            )
            last = now
    texts = sample.texts()
    if not quiet:
        print(
            f"training a {kind} tokenizer ({vocab_size} ids) on {len(texts):,} documents, "
            f"{sample.nbytes / 1e6:.1f} MB",
            file=sys.stderr,
        )
    path = train_tokenizer(texts, out, kind, vocab_size)
    write_training_info(
        Path(out),
        {
            "kind": kind,
            "vocab_size": vocab_size,
            "special_tokens": {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3},
            "sample_docs": len(texts),
            "sample_bytes": sample.nbytes,
            "seen_docs": sample.seen_docs,
            "seen_bytes": sample.seen_bytes,
        },
    )
    got = _vocab_of(path)
    if got is not None and got < vocab_size:
        print(
            f"warning: the tokenizer has {got:,} ids, fewer than the {vocab_size:,} asked: the sample "
            "holds too little distinct text for more (give more text or a smaller --vocab-size)",
            file=sys.stderr,
        )
    print(f"{path} ({time.monotonic() - started:.1f}s)")
    return 0


def _vocab_of(path: Path) -> int | None:
    """The number of ids of a trained tokenizer file, None when it cannot be told."""
    try:
        if path.suffix == ".json":
            from tokenizers import Tokenizer

            return Tokenizer.from_file(str(path)).get_vocab_size(with_added_tokens=True)
        import sentencepiece as spm

        return spm.SentencePieceProcessor(model_file=str(path)).get_piece_size()
    except Exception:
        return None
