"""Training a tokenizer on a deterministic sample of text.

Kinds:

* ``bytebpe`` - byte-level BPE with the ``tokenizers`` library (GPT-2 style pre-tokenizer, every
  byte in the base alphabet, so nothing is ever unknown); writes ``tokenizer.json``.
* ``bpe`` / ``unigram`` - SentencePiece with byte fallback, identity normalization (the text is
  normalized by earlier stages; decoding gives back the exact text), digits split; writes
  ``tokenizer.model``.

Special tokens sit at fixed ids in every kind: <pad>=0, <s>=1 (bos), </s>=2 (eos), <unk>=3.

Sampling (:class:`TextSample`): documents with the smallest 64-bit hashes of their text are kept
until the byte budget is reached; that is a uniform sample that depends only on the texts, not
on their order, the worker count or a seed, and holds at most the budget in memory.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
KINDS = ("bytebpe", "bpe", "unigram")
SPM_MAX_SENTENCE_BYTES = 1 << 14
SPM_MIN_COVERAGE = 0.98  # the lowest character_coverage SentencePiece accepts


def utf8_hash() -> Callable[[bytes], int]:
    """The sample's hash of a text's UTF-8 bytes (64-bit xxh3), as a function to keep at hand."""
    import xxhash

    return xxhash.xxh3_64_intdigest


def text_hash(text: str) -> int:
    return utf8_hash()(text.encode("utf-8"))


class TextSample:
    """Bottom-k-by-hash sample of texts bounded by ``budget`` UTF-8 bytes (plus one text).

    ``add`` texts in any order; ``texts()`` returns the kept texts sorted by hash, so the sample
    of a corpus is the same however it was split into parts (merge parts with ``merge``).
    """

    def __init__(self, budget: int):
        self.budget = budget
        self._hash = utf8_hash()
        self._heap: list[tuple[int, str, int]] = []  # (-hash, text, UTF-8 bytes): largest hash on top
        self.nbytes = 0
        self.seen_docs = 0
        self.seen_bytes = 0

    def add(self, text: str, h: int | None = None) -> None:
        data = text.encode("utf-8")
        size = len(data)
        self.seen_docs += 1
        self.seen_bytes += size
        key = -(self._hash(data) if h is None else h)
        heap = self._heap
        if self.nbytes >= self.budget and heap and key <= heap[0][0]:
            return  # hash larger than everything kept and the budget is full
        heapq.heappush(heap, (key, text, size))
        self.nbytes += size
        while self.nbytes - heap[0][2] >= self.budget and len(heap) > 1:
            self.nbytes -= heapq.heappop(heap)[2]

    def merge(self, items: Iterable[tuple[int, str]]) -> None:
        for h, text in items:
            self.add(text, h)

    def items(self) -> list[tuple[int, str]]:
        """(hash, text) sorted by hash."""
        return sorted((-k, t) for k, t, _ in self._heap)

    def texts(self) -> list[str]:
        return [t for _, t in self.items()]


def merge_sorted_samples(parts: Iterable[Iterable[Sequence[Any]]], budget: int) -> list[tuple[int, str]]:
    """The (hash, text) items a ``TextSample(budget)`` keeps after merging every part, sorted by
    hash: the shortest hash-ordered prefix of the parts' union that holds ``budget`` UTF-8 bytes
    (at least one item; everything when they hold less). Each part must be sorted by (hash, text), as
    :meth:`TextSample.items` is; parts are consumed only as far as the prefix reaches."""
    kept: list[tuple[int, str]] = []
    size = 0
    for h, text in heapq.merge(*parts):
        if kept and size >= budget:
            break
        kept.append((h, text))
        size += len(text.encode("utf-8"))
    return kept


def iter_json_array(text: str) -> Iterator[Any]:
    """The items of the JSON array ``text``, decoded one at a time (what is never asked for is
    never decoded)."""
    decoder = json.JSONDecoder()
    pos = _skip_space(text, text.index("[") + 1)
    if text.startswith("]", pos):
        return
    while True:
        item, pos = decoder.raw_decode(text, pos)
        yield item
        pos = _skip_space(text, pos)
        if text.startswith("]", pos):
            return
        if not text.startswith(",", pos):
            raise ValueError(f"malformed JSON array at character {pos}")
        pos = _skip_space(text, pos + 1)


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\n\r":
        pos += 1
    return pos


def split_heldout(items: list[tuple[int, str]], train_bytes: int) -> tuple[list[str], list[str]]:
    """(training texts, held-out texts) from hash-ordered ``items``: the first texts up to
    ``train_bytes`` UTF-8 bytes (at least one) train, the rest are held out (never trained on)."""
    train: list[str] = []
    size = 0
    for i, (_, text) in enumerate(items):
        if train and size >= train_bytes:
            return train, [t for _, t in items[i:]]
        train.append(text)
        size += len(text.encode("utf-8"))
    return train, []


def heldout_quality(tokenizer_path: str | Path, texts: list[str]) -> dict[str, Any]:
    """Tokens per character and UTF-8 bytes per token of a tokenizer on held-out ``texts``
    (ints for stats counters, floats rounded for training.json)."""
    from dataprep.tokenizers.engines import load_tokenizer

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
