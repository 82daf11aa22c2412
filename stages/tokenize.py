"""Tokenization: encode each document's text into token ids (``doc.tokens``, int32).

The tokenizer is either a Hugging Face ``tokenizer.json`` given in the recipe, or ``train``: a
byte-level BPE trained with the ``tokenizers`` library on a deterministic sample of this run's
cleaned text (the documents with the smallest text hashes, up to ``train_sample_bytes``).
Trained tokenizers have fixed special ids: <pad>=0, <s>=1, </s>=2, <unk>=3.
Publishes the "tokenizer" artifact (file, sha256, vocab_size, special ids) for packing.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.document import Document
from dataprep.stage import DriverContext, GlobalStage, RecipeError, StageContext, StageResult, param, register

SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>"]
EOS_CANDIDATES = ["</s>", "<|endoftext|>", "<eos>", "<|end_of_text|>", "<|im_end|>", "<｜end▁of▁sentence｜>"]
TOKENIZER_FILE = "tokenizer/tokenizer.json"


@dataclass
class TokenizeParams:
    tokenizer: str = param("train", help="'train', or the path of a Hugging Face tokenizer.json")
    vocab_size: int = param(8192, help="vocabulary size when training")
    train_sample_bytes: int = param(64 << 20, help="UTF-8 bytes of text sampled for training")
    eos_token: str = param("", help="EOS token of a given tokenizer (found automatically when empty)")

    def validate(self) -> None:
        if self.tokenizer == "train" and self.vocab_size < 256 + len(SPECIAL_TOKENS):
            raise ValueError("vocab_size must be at least 260 for a byte-level BPE")


def _text_hash(text: str) -> int:
    import xxhash

    return xxhash.xxh3_64_intdigest(text.encode("utf-8"))


def describe_tokenizer(path: Path, eos_token: str = "") -> dict[str, Any]:
    """Special ids, vocabulary size and checksum of a tokenizer.json; RecipeError without EOS."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    names = [eos_token] if eos_token else EOS_CANDIDATES
    eos = next((n for n in names if tok.token_to_id(n) is not None), None)
    if eos is None:
        raise RecipeError(
            f"tokenizer {path} has no EOS token (looked for {', '.join(names)}); set tokenize.eos_token"
        )
    ids = {n: tok.token_to_id(n) for n in ("<pad>", "<s>", "<unk>")}
    return {
        "file": TOKENIZER_FILE,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "eos_token": eos,
        "eos_id": tok.token_to_id(eos),
        "pad_id": ids["<pad>"],
        "bos_id": ids["<s>"],
        "unk_id": ids["<unk>"],
    }


@register
class Tokenize(GlobalStage):
    """Encode documents into token ids with a given or freshly trained tokenizer."""

    name = "tokenize"
    Params = TokenizeParams
    provides = ("tokenizer",)

    def __init__(self, params: TokenizeParams):
        super().__init__(params)
        self._sample: list[tuple[int, str]] = []
        self._sample_bytes = 0
        self._tokenizer: Any = None

    def needs_global_pass(self) -> bool:
        return self.params.tokenizer == "train"

    def setup(self, ctx: DriverContext) -> None:
        if self.params.tokenizer == "train":
            return
        src = Path(self.params.tokenizer)
        if not src.is_file():
            raise RecipeError(f"tokenize.tokenizer: {src} does not exist (give a tokenizer.json or 'train')")
        dst = ctx.output_dir / TOKENIZER_FILE
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        ctx.publish("tokenizer", {**describe_tokenizer(dst, self.params.eos_token), "local_path": str(dst)})

    # -- training sample: per task, the texts with the smallest hashes (a uniform, seed-free sample)
    def begin_task(self, ctx: StageContext) -> None:
        self._sample, self._sample_bytes = [], 0

    def compute(self, batch: list[Document], ctx: StageContext) -> None:
        budget = 2 * self.params.train_sample_bytes // max(ctx.num_tasks, 1) + 1
        for doc in batch:
            size = len(doc.text.encode("utf-8"))
            heapq.heappush(self._sample, (-_text_hash(doc.text), doc.text))
            self._sample_bytes += size
            while self._sample_bytes > budget and len(self._sample) > 1:
                _, dropped = heapq.heappop(self._sample)
                self._sample_bytes -= len(dropped.encode("utf-8"))

    def finish_compute(self, ctx: StageContext) -> None:
        rows = sorted((-h, t) for h, t in self._sample)
        (ctx.work_dir / f"{ctx.task_id}.sample.json").write_text(json.dumps(rows, ensure_ascii=False))
        self._sample = []

    def decide(self, ctx: DriverContext) -> dict[str, Any]:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        pool: list[tuple[int, str]] = []
        for t in ctx.task_ids:
            pool += [tuple(x) for x in json.loads((ctx.work_dir / f"{t}.sample.json").read_text())]  # type: ignore[misc]
        pool.sort()
        texts, total = [], 0
        for _, text in pool:
            if total >= self.params.train_sample_bytes:
                break
            texts.append(text)
            total += len(text.encode("utf-8"))
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=self.params.vocab_size,
            special_tokens=SPECIAL_TOKENS,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(texts, trainer)
        dst = ctx.output_dir / TOKENIZER_FILE
        dst.parent.mkdir(parents=True, exist_ok=True)
        tok.save(str(dst))
        ctx.stats.count("train_sample_docs", len(texts))
        ctx.stats.count("train_sample_bytes", total)
        ctx.publish("tokenizer", {**describe_tokenizer(dst), "local_path": str(dst)})
        return {}

    def apply(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        if self._tokenizer is None:
            from tokenizers import Tokenizer

            self._tokenizer = Tokenizer.from_file(ctx.artifacts["tokenizer"]["local_path"])
        encodings = self._tokenizer.encode_batch([d.text for d in batch], add_special_tokens=False)
        for doc, enc in zip(batch, encodings, strict=True):
            doc.tokens = np.asarray(enc.ids, dtype=np.int32)
        ctx.stats.count("tokens", sum(len(e.ids) for e in encodings))
        return list(batch)
