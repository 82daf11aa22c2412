"""Training a tokenizer on a deterministic sample of text.

Kinds:

* ``bytebpe`` - byte-level BPE with the ``tokenizers`` library (GPT-2 style pre-tokenizer, every
  byte in the base alphabet, so nothing is ever unknown); writes ``tokenizer.json``.
* ``bpe`` / ``unigram`` - SentencePiece with byte fallback, identity normalization (the text is
  normalized by earlier stages; decoding gives back the exact text), digits split; writes
  ``tokenizer.model``.

Special tokens sit at fixed ids in every kind: <pad>=0, <s>=1 (bos), </s>=2 (eos), <unk>=3.

The texts are a sample (:mod:`dataprep.tokenizers.sample`); :func:`train_from_samples` is the
tokenize stage's training job (merge the tasks' samples, train, measure on held-out texts).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dataprep.document import texts_within_bytes
from dataprep.tokenizers.sample import heldout_budget, iter_json_array, merge_sorted_samples, split_heldout

SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
KINDS = ("bytebpe", "bpe", "unigram")
SPM_MAX_SENTENCE_BYTES = 1 << 14
SPM_MIN_COVERAGE = 0.98  # the lowest character_coverage SentencePiece accepts


def heldout_quality(tokenizer_path: str | Path, texts: list[str]) -> dict[str, Any]:
    """Tokens per character and UTF-8 bytes per token of a tokenizer on held-out ``texts``
    (ints for stats counters, floats rounded for training.json)."""
    from dataprep.tokenizers.load import load_tokenizer

    tok = load_tokenizer(tokenizer_path)
    tokens = sum(len(ids) for ids in tok.encode_batch(texts)) if texts else 0
    chars = sum(len(t) for t in texts)
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    return {
        "heldout_docs": len(texts),
        "heldout_chars": chars,
        "heldout_bytes": nbytes,
        "heldout_tokens": tokens,
        "tokens_per_char": round(tokens / chars, 4) if chars else None,
        "bytes_per_token": round(nbytes / tokens, 4) if tokens else None,
    }


def _spm_sentences(texts: list[str]) -> Iterator[str]:
    for text in texts:
        for line in text.split("\n"):
            if not line.strip():
                continue
            data = line.encode("utf-8")
            if len(data) <= SPM_MAX_SENTENCE_BYTES:
                yield line
            else:  # sentencepiece skips over-long sentences: cut them instead
                for i in range(0, len(data), SPM_MAX_SENTENCE_BYTES):
                    yield data[i : i + SPM_MAX_SENTENCE_BYTES].decode("utf-8", "ignore")


def character_coverage(texts: list[str], vocab_size: int, ceiling: float = 0.9995) -> float:
    """SentencePiece's character_coverage, lowered so that the characters it must keep as pieces
    fit next to the 256 byte pieces and some merges (the rest fall back to bytes): Chinese text
    has thousands of distinct characters."""
    from collections import Counter

    counts = Counter()
    for t in texts:
        counts.update(t)
    counts.pop("\n", None)
    total = sum(counts.values())
    if not total:
        return ceiling
    freq = sorted(counts.values(), reverse=True)
    keep = max(1, vocab_size - 256 - len(SPECIAL_TOKENS) - vocab_size // 8)  # bytes + room for merges
    if len(freq) <= keep:
        return ceiling
    share = sum(freq[:keep]) / total
    if share - 1e-4 < SPM_MIN_COVERAGE:
        cum = 0
        need = len(freq)
        for k, f in enumerate(freq):
            cum += f
            if cum / total >= SPM_MIN_COVERAGE:
                need = k + 1
                break
        raise ValueError(
            f"vocab_size {vocab_size} is too small for a SentencePiece model of this text: covering "
            f"{SPM_MIN_COVERAGE:.0%} of its characters takes {need} pieces; use vocab_size >= "
            f"{(need + 256 + len(SPECIAL_TOKENS)) * 8 // 7 + 1} or kind bytebpe"
        )
    return min(ceiling, share - 1e-4)


def train_tokenizer(texts: list[str], out_dir: str | Path, kind: str, vocab_size: int) -> Path:
    """Train on ``texts`` and write the tokenizer into ``out_dir``; returns the file written.

    Deterministic: the same texts (in the same order) give a byte-identical file.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown tokenizer kind {kind!r}; choose one of {', '.join(KINDS)}")
    if not texts:
        raise ValueError("no text to train a tokenizer on (every document was dropped?)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if kind == "bytebpe":
        if vocab_size < 256 + len(SPECIAL_TOKENS):
            raise ValueError("a byte-level BPE needs vocab_size >= 260")
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(SPECIAL_TOKENS),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(texts, trainer)
        dst = out / "tokenizer.json"
        tok.save(str(dst))
        return dst
    import io

    import sentencepiece as spm

    if vocab_size < 256 + len(SPECIAL_TOKENS) + 1:
        raise ValueError("a SentencePiece model with byte fallback needs vocab_size >= 261")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=_spm_sentences(texts),
        model_writer=model,
        model_type=kind,
        vocab_size=vocab_size,
        pad_id=0,
        bos_id=1,
        eos_id=2,
        unk_id=3,
        pad_piece=SPECIAL_TOKENS[0],
        bos_piece=SPECIAL_TOKENS[1],
        eos_piece=SPECIAL_TOKENS[2],
        unk_piece=SPECIAL_TOKENS[3],
        byte_fallback=True,
        character_coverage=character_coverage(texts, vocab_size),
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=False,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        hard_vocab_limit=False,
        max_sentence_length=SPM_MAX_SENTENCE_BYTES,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        num_threads=1,
        minloglevel=2,
    )
    dst = out / "tokenizer.model"
    dst.write_bytes(model.getvalue())
    return dst


def write_training_info(out_dir: Path, info: dict[str, Any]) -> None:
    (Path(out_dir) / "training.json").write_text(json.dumps(info, indent=1, ensure_ascii=False) + "\n")


def import_training(_: Any = None) -> None:
    """The imports of :func:`train_from_samples` (run ahead in its process)."""
    import tokenizers  # noqa: F401

    import dataprep.tokenizers.load  # noqa: F401


def train_from_samples(job: dict[str, Any]) -> dict[str, Any]:
    """Merge the tasks' samples, train on the smallest hashes, measure on the next ones, save.

    job: ``samples`` (the tasks' sample files, JSON arrays of (hash, text) sorted by hash),
    ``budget`` (training bytes), ``out`` (the tokenizer directory), ``kind``, ``vocab_size``,
    ``engine`` (the tokenize stage's mode). Returns training.json's content plus "path" (the
    tokenizer file; "" when there is no text) and "verdict" (the run's engine check on the first
    held-out texts, or None), or "path" and "refused" (why a demanded fastokens engine cannot be
    used).
    """
    parts = [iter_json_array(Path(path).read_text(encoding="utf-8")) for path in job["samples"]]
    items = merge_sorted_samples(parts, job["budget"] + heldout_budget(job["budget"]))
    texts, heldout = split_heldout(items, job["budget"])
    if not texts:
        return {"path": ""}
    out = Path(job["out"])
    path = train_tokenizer(texts, out, job["kind"], job["vocab_size"])
    verdict = None  # none (nothing held out): each task checks its first documents itself
    if job.get("engine", "tokenizers") != "tokenizers" and path.suffix == ".json" and heldout:
        from dataprep.tokenizers.base import TokenizerError
        from dataprep.tokenizers.check import RUN_CHECK_BYTES
        from dataprep.tokenizers.load import check_engines

        check = {
            "path": str(path),
            "engine": job["engine"],
            "texts": texts_within_bytes(heldout, RUN_CHECK_BYTES),
        }
        try:  # first, so that measuring on the held-out texts below encodes on the verdict
            verdict = check_engines(check)
        except TokenizerError as e:
            return {"path": str(path), "refused": str(e)}
    info = {
        "kind": job["kind"],
        "vocab_size": job["vocab_size"],
        "sample_docs": len(texts),
        "sample_bytes": sum(len(t.encode("utf-8")) for t in texts),
        **heldout_quality(path, heldout),
    }
    write_training_info(out, info)
    return {**info, "path": str(path), "verdict": verdict}
