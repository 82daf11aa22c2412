"""Packing (concat, EOS-aware): documents' tokens, one EOS after each document, cut into rows of
seq_length + 1 tokens (inputs plus the shifted label) that documents may span.

compute: per task, append each document's tokens + EOS to a spill file (int32), in order.
decide:  stream the spill files in task order into rows and hand them to the shard writers.
The final partial row is padded with pad_id (``tail: pad``) or dropped (``tail: drop``); either
way it is counted. Token accounting: tokens_in = Σ document tokens + documents (one EOS each);
tokens_in = tokens_written + tail_dropped; rows * row_length = tokens_written + padding.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from dataprep import stage as registry
from dataprep.document import Document
from dataprep.stage import DriverContext, GlobalStage, StageContext, param, register

CHUNK_TOKENS = 1 << 22


@dataclass
class PackParams:
    seq_length: int = param(512, help="tokens per training sample; rows hold seq_length + 1")
    tail: Literal["pad", "drop"] = param("pad", help="the last partial row: pad it with pad_id, or drop it")
    dtype: Literal["int32", "uint16", "auto"] = param(
        "int32", help="token dtype of the row files (auto: uint16 when the vocabulary fits)"
    )
    writers: list[str] = param(["bin"], help="shard formats to write (registered writers)")
    rows_per_file: int = param(1 << 16, help="rows per shard file")

    def validate(self) -> None:
        if self.seq_length < 1:
            raise ValueError("seq_length must be positive")
        if self.rows_per_file < 1:
            raise ValueError("rows_per_file must be positive")


@register
class Pack(GlobalStage):
    """Concatenate documents with EOS and cut rows of seq_length + 1 tokens into shards."""

    name = "pack"
    Params = PackParams
    requires = ("tokenizer",)
    terminal = True

    def __init__(self, params: PackParams):
        super().__init__(params)
        self._spill: Any = None

    def setup(self, ctx: DriverContext) -> None:
        for name in self.params.writers:
            if registry.get(name).kind != "writer":
                raise registry.RecipeError(f"pack.writers: {name!r} is not a shard writer")

    def begin_task(self, ctx: StageContext) -> None:
        self._tmp = ctx.work_dir / f".{ctx.task_id}.tokens.tmp{os.getpid()}"
        self._spill = open(self._tmp, "wb")  # noqa: SIM115 (closed in finish_compute)

    def compute(self, batch: list[Document], ctx: StageContext) -> None:
        eos = np.asarray([ctx.artifacts["tokenizer"]["eos_id"]], dtype=np.int32)
        parts = []
        for doc in batch:
            if doc.tokens is None:
                raise RuntimeError("pack needs token ids: put a tokenize stage before it")
            parts += [np.asarray(doc.tokens, dtype=np.int32), eos]
        if parts:
            self._spill.write(np.concatenate(parts).tobytes())
        ctx.stats.count("documents", len(batch))

    def finish_compute(self, ctx: StageContext) -> None:
        self._spill.close()
        os.replace(self._tmp, ctx.work_dir / f"{ctx.task_id}.tokens.bin")

    def _dtype(self, vocab_size: int) -> str:
        if self.params.dtype == "auto":
            return "uint16" if vocab_size <= 1 << 16 else "int32"
        if self.params.dtype == "uint16" and vocab_size > 1 << 16:
            raise registry.RecipeError(
                f"pack.dtype uint16 cannot hold a vocabulary of {vocab_size}; use int32"
            )
        return self.params.dtype

    def decide(self, ctx: DriverContext) -> dict[str, Any]:
        tok = ctx.artifacts["tokenizer"]
        row_length = self.params.seq_length + 1
        dtype = self._dtype(tok["vocab_size"])
        pad_id = tok["pad_id"] if tok["pad_id"] is not None else tok["eos_id"]
        meta = {
            "seq_length": self.params.seq_length,
            "row_length": row_length,
            "dtype": dtype,
            "vocab_size": tok["vocab_size"],
            "rows_per_file": self.params.rows_per_file,
        }
        writers = [
            registry.get(w)(registry.NoParams(), ctx.output_dir / "shards", meta) for w in self.params.writers
        ]
        carry = np.zeros(0, dtype=np.int32)
        tokens_in = rows = 0
        for t in ctx.task_ids:
            spill = np.fromfile(ctx.work_dir / f"{t}.tokens.bin", dtype=np.int32)
            tokens_in += len(spill)
            for start in range(0, len(spill), CHUNK_TOKENS):
                buf = np.concatenate([carry, spill[start : start + CHUNK_TOKENS]])
                n = len(buf) // row_length
                if n:
                    block = buf[: n * row_length].reshape(n, row_length)
                    for w in writers:
                        w.write(block, "train")
                    rows += n
                carry = buf[n * row_length :]
        padding = tail_dropped = 0
        if len(carry):
            if self.params.tail == "pad":
                padding = row_length - len(carry)
                row = np.concatenate([carry, np.full(padding, pad_id, dtype=np.int32)]).reshape(1, row_length)
                for w in writers:
                    w.write(row, "train")
                rows += 1
            else:
                tail_dropped = len(carry)
        files = [entry for w in writers for entry in w.close()]
        documents = ctx.stats.counters.get("documents", 0)
        for name, value in (
            ("tokens_in", tokens_in),
            ("rows", rows),
            ("padding_tokens", padding),
            ("tail_tokens_dropped", tail_dropped),
        ):
            ctx.stats.count(name, value)
        written = rows * row_length - padding
        if written + tail_dropped != tokens_in:
            raise RuntimeError(
                f"token accounting: wrote {written} + dropped {tail_dropped} != {tokens_in} in"
            )
        return {
            "tokenizer": {k: v for k, v in tok.items() if k != "local_path"},
            "shards": {
                **{k: meta[k] for k in ("seq_length", "row_length", "dtype", "vocab_size")},
                "packing": "concat",
                "eos_id": tok["eos_id"],
                "pad_id": pad_id,
                "bos_id": tok["bos_id"],
                "splits": {
                    "train": {
                        "rows": rows,
                        "tokens": written,
                        "padding_tokens": padding,
                        "tail_tokens_dropped": tail_dropped,
                        "documents": documents,
                        "files": files,
                    }
                },
            },
        }
