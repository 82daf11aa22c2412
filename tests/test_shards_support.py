"""Helpers (no tests): small corpora, tokenizers and runs for the tokenize, shards, verify, inspect tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from dataprep.executor import prepare
from dataprep.recipe import parse_recipe
from dataprep.tokenizers.train import train_tokenizer

ROOT = Path(__file__).resolve().parent.parent
SONGCI = ROOT / "sample_corpus" / "poetry" / "songci.parquet"
REVIEWS = ROOT / "sample_corpus" / "reviews" / "reviews.txt"


def corpus_texts(n_poems: int = 120, n_reviews: int = 80) -> list[str]:
    """Real Chinese text (Song ci, reviews) plus a few English, multi-paragraph and tricky documents."""
    poems = pq.read_table(SONGCI, columns=["text"]).column("text").to_pylist()[:n_poems]
    reviews = [line for line in REVIEWS.read_text(encoding="utf-8").splitlines() if line.strip()][:n_reviews]
    extra = [
        "A plain English line.",
        "Two paragraphs.\n\nThe second one mentions </s> and <s> literally.",
        "Mixed 中文 and English, numbers 12345 and full-width １２３。",
        "\n".join(f"Line {i} of a long document with several paragraphs." for i in range(40)),
    ]
    texts: list[str] = []
    for i in range(max(len(poems), len(reviews))):
        if i < len(poems):
            texts.append(poems[i])
        if i < len(reviews):
            texts.append(reviews[i])
        if i % 30 == 0:
            texts.append(extra[(i // 30) % len(extra)])
    return texts


def write_corpus(directory: Path, texts: list[str], files: int = 2) -> Path:
    """JSONL files a.jsonl, b.jsonl, ... (documents in order across files); returns the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    per = -(-len(texts) // files)
    for k in range(files):
        part = texts[k * per : (k + 1) * per]
        with open(directory / f"{chr(97 + k)}.jsonl", "w", encoding="utf-8") as f:
            for j, t in enumerate(part):
                f.write(json.dumps({"id": f"{chr(97 + k)}{j}", "text": t}, ensure_ascii=False) + "\n")
    return directory


def small_tokenizer(directory: Path, texts: list[str], kind: str = "bytebpe", vocab: int = 600) -> Path:
    return train_tokenizer(texts, directory, kind, vocab)


def run_prepare(
    corpus: Path, out: Path, stages: list[Any], workers: int = 1, seed: int = 0
) -> dict[str, Any]:
    recipe = parse_recipe({"name": "test", "seed": seed, "stages": stages}, "test recipe")
    prepare([str(corpus)], out, recipe, workers=workers, quiet=True)
    return json.loads((out / "manifest.json").read_text())
