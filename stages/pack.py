"""Packing documents into rows of seq_length + 1 tokens (EOS-aware), split, shuffle, shard.

compute (workers, per task): each document goes to the train or validation split by a hash of its
id (``validation_fraction``); its tokens, length and cut points are appended to the task's spill
files for that split.

decide: per split, the spills are packed in task order (stream order):

* ``concat``: one EOS after each document, the stream cut into rows; documents span rows. The
  last partial row is padded (``tail: pad``) or dropped (``tail: drop``), counted either way;
  the documents whose EOS it held are rejected (``tail_dropped``): a document is kept, in the
  shards, exactly when its EOS is.
* ``pad``: one document per row, padded; a document longer than a row is split into several rows
  (``long_docs: split``, at paragraph cuts when the tokenizer recorded them) or truncated
  (``long_docs: truncate``: its first row_length - 1 tokens plus the EOS are kept).
* ``bestfit``: best-fit-decreasing bin packing of the documents within a window of
  ``bestfit_window_rows`` rows' worth of tokens (windows end with each task): documents that fit
  a row are never split; longer ones are split as in ``pad``. Padding and splits are reported
  against ``concat``.

Every row carries ``actual_seq_len`` (cumulative ends of its document pieces). The packers are
in :mod:`stages._packers`, the jobs that run them on the workers (into the shuffle spool) in
:mod:`stages._pack_jobs`, and the mix of a recipe with ``sources`` (the train spills rewritten,
copies and all, before packing) in :mod:`stages._mix`.

Then one call to :func:`dataprep.shards.output.write_shards` writes the shards: a seeded,
bounded-memory shuffle (rows scattered into buckets of at most ``shuffle_buffer_mb``, each bucket
permuted), the files of every row format in ``writers`` in the same order, each split's kept
documents in every format of whole documents (``megatron``), train files of equal rows (their
number a multiple of ``shard_multiple``) plus the remainder file ``train-remainder``
(``equal_shards``), the token accounting checked (tokens = Σ document tokens + documents (EOS) -
dropped; EOS written = documents - EOS dropped), and the manifest's ``shards`` block. When no
train row can be made (no train document, or under ``tail: drop`` fewer train tokens than a row)
every document is rejected and decide raises NothingLeft: the run ends there.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from dataprep.document import Document, Drop
from dataprep.formats.manifest import MixManifest
from dataprep.formats.rows import raw
from dataprep.inputs import source_of
from dataprep.shards.accounting import PackStats
from dataprep.shards.output import (
    SPLITS,
    ShardOutput,
    SplitInput,
    check_writers,
    write_shards,
    writer_warm_ups,
)
from dataprep.shards.plan import TOKEN_DTYPES, FilesSettings
from dataprep.stage import (
    DriverContext,
    GlobalStage,
    NothingLeft,
    RecipeError,
    StageContext,
    param,
    register,
)
from dataprep.tokenizers.check import roundtrip_report, roundtrip_warning
from stages import _mix
from stages._pack_jobs import PackSettings, SplitSpills, pack_split, read_spills
from stages._packers import Packing

UINT16_LIMIT = 1 << 16


@dataclass
class PackParams:
    seq_length: int = param(512, help="tokens per training sample; rows hold seq_length + 1")
    packing: Literal["concat", "pad", "bestfit"] = param(
        "concat", help="concat: documents span rows; pad: one document per row; bestfit: bin packing"
    )
    tail: Literal["pad", "drop"] = param("pad", help="concat: the last partial row is padded or dropped")
    long_docs: Literal["split", "truncate"] = param(
        "split", help="pad/bestfit: documents longer than a row are split over rows, or truncated"
    )
    bestfit_window_rows: int = param(
        4096, help="bestfit: rows' worth of tokens packed together (a window ends with its task)"
    )
    validation_fraction: float = param(0.0, help="share of documents (by id hash) in the validation split")
    shuffle: bool = param(True, help="shuffle rows (seeded by the recipe seed, bounded memory)")
    shuffle_buffer_mb: int = param(256, help="memory bound of one shuffle bucket")
    dtype: Literal["int32", "uint16", "auto"] = param(
        "auto", help="token dtype of the .bin files (auto: uint16 when the vocabulary fits)"
    )
    writers: list[str] = param(["mindrecord", "bin"], help="shard formats to write (registered writers)")
    shards: int = param(0, help="train files (0: about shard_mb each, rounded up to shard_multiple)")
    shard_mb: int = param(256, help="target size of a shard file (int32 tokens) when shards is 0")
    shard_multiple: int = param(
        8, help="the number of train files is a multiple of this (data-parallel sizes)"
    )
    equal_shards: bool = param(
        True,
        help="train files hold equal rows, the rows mod files left over go to a remainder file "
        "(train-remainder); false: file sizes differ by at most one row",
    )

    @property
    def row_length(self) -> int:
        return self.seq_length + 1

    @property
    def packer(self) -> Packing:
        return Packing(self.packing, self.tail, self.long_docs, self.bestfit_window_rows)

    @property
    def files(self) -> FilesSettings:
        return FilesSettings(self.shards, self.shard_mb, self.shard_multiple, self.equal_shards)

    def validate(self) -> None:
        if self.seq_length < 1:
            raise ValueError("seq_length must be positive")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ValueError("validation_fraction must be in [0, 1)")
        if min(self.bestfit_window_rows, self.shuffle_buffer_mb, self.shard_mb, self.shard_multiple) < 1:
            raise ValueError(
                "bestfit_window_rows, shuffle_buffer_mb, shard_mb and shard_multiple must be >= 1"
            )
        if self.shards < 0:
            raise ValueError("shards must be >= 0")
        if not self.writers:
            raise ValueError("writers must name at least one shard format")


def split_of(doc_id: str, fraction: float) -> str:
    """'validation' for a deterministic ``fraction`` of document ids (xxh3-64 of the id), else 'train'."""
    if fraction <= 0.0:
        return "train"
    import xxhash

    h = xxhash.xxh3_64_intdigest(doc_id.encode("utf-8"))
    return "validation" if h < fraction * 2.0**64 else "train"


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@register
class Pack(GlobalStage):
    """EOS-aware packing (concat / pad / bestfit) into shuffled, verified shards with a manifest."""

    name = "pack"
    Params = PackParams
    requires = ("tokenizer",)
    uses = ("sources",)  # the mix, when the recipe has sources
    terminal = True

    def __init__(self, params: PackParams):
        super().__init__(params)
        self._files: dict[str, Any] = {}
        self._meta: dict[str, dict[str, int]] = {}
        self._spill_dtype = "<i4"

    def setup(self, ctx: DriverContext) -> None:
        try:
            check_writers(self.params.writers)
        except ValueError as e:
            raise RecipeError(f"pack.writers: {e}") from None
        ctx.publish("seq_length", self.params.seq_length)  # a trained tokenizer's model_max_length

    def warm_ups(self) -> list[Callable[[Any], Any]]:
        """The shard writers' warm-ups (e.g. MindRecord's MindSpore import), run ahead in the
        processes that will write the files (the driver at one worker, else the pool's workers)."""
        return writer_warm_ups(self.params.writers)

    # -- workers
    def begin_task(self, ctx: StageContext) -> None:
        self._files = {}
        # token spills in uint16 when every id of the tokenizer fits: half the disk and I/O
        size = ctx.artifacts.get("tokenizer", {}).get("size", 1 << 31)
        self._spill_dtype = "<u2" if size <= UINT16_LIMIT else "<i4"
        self._meta = {s: {"documents": 0, "doc_tokens": 0, "min_id": -1, "max_id": -1} for s in SPLITS}
        self._tag = f"tmp{os.getpid()}"
        self._names = [s["name"] for s in ctx.artifacts.get("sources", {}).get("sources", [])]
        self._source = -1

    def _spill(self, ctx: StageContext, split: str, kind: str) -> Any:
        key = f"{split}.{kind}"
        f = self._files.get(key)
        if f is None:
            f = self._files[key] = open(ctx.work_dir / f".{ctx.task_id}.{key}.{self._tag}", "wb")  # noqa: SIM115
        return f

    def compute(self, batch: list[Document], ctx: StageContext) -> None:
        groups: dict[str, list[Document]] = {}
        for doc in batch:
            if doc.tokens is None:
                raise RuntimeError("pack needs token ids: put a tokenize stage before it")
            groups.setdefault(split_of(doc.id, self.params.validation_fraction), []).append(doc)
            if self._names:
                source = source_of(doc.source, self._names)
                if source < 0 or (self._source >= 0 and source != self._source):
                    raise RuntimeError(f"pack: {doc.where}: in no source of the recipe, or a task of two")
                self._source = source
        for split, docs in groups.items():
            arrays = [np.asarray(d.tokens, dtype=np.int32) for d in docs]
            flat = np.concatenate(arrays)
            cuts = [d.meta_get("tokenize", {}).get("cuts", []) for d in docs]
            table = np.asarray([[len(a), len(c)] for a, c in zip(arrays, cuts, strict=True)], dtype="<i8")
            if (
                len(flat)
                and self._spill_dtype == "<u2"
                and not 0 <= int(flat.min()) <= int(flat.max()) < UINT16_LIMIT
            ):
                raise RuntimeError(
                    "pack: token ids outside the tokenizer's ids: the tokenizer file is inconsistent"
                )
            self._spill(ctx, split, "tokens").write(raw(flat, self._spill_dtype))
            self._spill(ctx, split, "docs").write(raw(table, "<i8"))
            where = [[d.id, d.source, len(d.text)] for d in docs]  # to name documents dropped in decide
            self._spill(ctx, split, "ids").write(json.dumps(where, ensure_ascii=False).encode() + b"\n")
            if any(cuts):
                flat_cuts = np.asarray([c for cs in cuts for c in cs], dtype="<i4")
                self._spill(ctx, split, "cuts").write(raw(flat_cuts, "<i4"))
            meta = self._meta[split]
            meta["documents"] += len(docs)
            meta["doc_tokens"] += len(flat)
            if len(flat):
                lo, hi = int(flat.min()), int(flat.max())
                meta["min_id"] = lo if meta["min_id"] < 0 else min(lo, meta["min_id"])
                meta["max_id"] = max(hi, meta["max_id"])
            ctx.stats.count(f"documents.{split}", len(docs))
            ctx.stats.count(f"doc_tokens.{split}", len(flat))

    def finish_compute(self, ctx: StageContext) -> None:
        for key, f in self._files.items():
            f.close()
            os.replace(f.name, ctx.work_dir / f"{ctx.task_id}.{key}")
        meta = {**self._meta, "token_dtype": self._spill_dtype, "source": self._source}
        (ctx.work_dir / f"{ctx.task_id}.meta.json").write_text(json.dumps(meta))
        self._files = {}

    # -- driver
    def _last_documents(
        self, ctx: DriverContext, spills: SplitSpills, count: int
    ) -> list[tuple[Document, int, int]]:
        """(document with its text decoded from its tokens, its characters when it reached this
        stage, its tokens) of the last ``count`` documents of a split's stream, in stream order."""
        from dataprep.tokenizers.load import decode_texts

        last = spills.last(count)
        texts = decode_texts(ctx.artifacts["tokenizer"]["local_path"], [tokens for *_, tokens in last])
        return [
            (Document(id=doc_id, text=text, source=source), chars, len(tokens))
            for (doc_id, source, chars, tokens), text in zip(last, texts, strict=True)
        ]

    def _reject_tail(self, ctx: DriverContext, spills: SplitSpills, st: PackStats) -> None:
        """Reject the last ``st.eos_dropped`` documents of a split's concat stream, whose EOS fell
        in the last partial row that ``tail: drop`` dropped (``st.tail_dropped`` tokens): a
        document is in the shards if and only if its EOS is."""
        split = spills.split
        size = spills.totals.stream_tokens
        kept = size - st.tail_dropped
        docs = self._last_documents(ctx, spills, st.eos_dropped)
        start = size - sum(n + 1 for *_, n in docs)
        for doc, chars, n in docs:
            stays = max(0, kept - start)
            detail = "its EOS fell in the last partial row of the stream, which pack.tail: drop drops"
            if stays:
                detail += f"; its first {stays} of {n} tokens end the last row kept"
            extra = {"split": split, "tokens": n, "tokens_in_shards": stays}
            ctx.reject(Drop(doc, "tail_dropped", detail=detail, extra=extra), chars=chars)
            start += n + 1

    def _nothing_to_train_on(self, ctx: DriverContext, spills: dict[str, SplitSpills]) -> None:
        """No train row can be made: reject every document and end the run. No document reached
        the train split: ``no_train_documents``; its stream is shorter than a row under ``tail:
        drop``: ``tail_dropped`` (train) and ``no_train_rows`` (validation)."""
        p = self.params
        train = spills["train"].totals
        if train.documents == 0:
            why = (
                f"no document reached the train split: the {spills['validation'].totals.documents} left went "
                f"to validation (pack.validation_fraction={p.validation_fraction})"
            )
            reasons = {"validation": "no_train_documents"}
        else:
            why = (
                f"the train split holds {train.stream_tokens} tokens, less than one "
                f"row of {p.seq_length + 1}, and pack.tail: drop keeps no partial row"
            )
            reasons = {"train": "tail_dropped", "validation": "no_train_rows"}
        for split in SPLITS:
            for doc, chars, n in self._last_documents(ctx, spills[split], spills[split].totals.documents):
                drop = Drop(doc, reasons[split], detail=why, extra={"split": split, "tokens": n})
                ctx.reject(drop, chars=chars)
        raise NothingLeft(f"pack: {why}")

    def drop_hint(self, reason: str, label: str) -> str | None:
        p = self.params
        if reason in ("tail_dropped", "no_train_rows"):
            return (
                f"set {label}.tail: pad, or lower {label}.seq_length (now {p.seq_length}), or add documents"
            )
        if reason == "no_train_documents":
            return f"add documents, or lower {label}.validation_fraction (now {p.validation_fraction})"
        return super().drop_hint(reason, label)

    def _dtype(self, vocab_size: int) -> str:
        if self.params.dtype == "auto":
            return "uint16" if vocab_size <= UINT16_LIMIT else "int32"
        if self.params.dtype == "uint16" and vocab_size > UINT16_LIMIT:
            raise RecipeError(
                f"pack.dtype uint16 cannot hold a vocabulary of {vocab_size}; use int32 or auto"
            )
        return self.params.dtype

    def decide(self, ctx: DriverContext) -> dict[str, Any]:
        p = self.params
        tok = ctx.artifacts["tokenizer"]
        eos = tok["eos_id"]
        pad = tok["pad_id"] if tok["pad_id"] is not None else eos
        dtype = self._dtype(tok["vocab_size"])
        spills = read_spills(ctx.work_dir, ctx.task_ids)
        max_id = max(sp.max_id for sp in spills.values())
        if max_id >= tok["size"]:
            raise RuntimeError(
                f"token ids reach {max_id}, outside the tokenizer's {tok['size']} ids: "
                "the tokenizer file is inconsistent"
            )
        if max(max_id, eos, pad) >= (UINT16_LIMIT if dtype == "uint16" else 1 << 31):
            raise RecipeError(f"pack.dtype {dtype} cannot hold token id {max(max_id, eos, pad)}; use int32")
        train = spills["train"].totals
        if train.documents == 0 or (
            p.packing == "concat" and p.tail == "drop" and train.stream_tokens < p.row_length
        ):
            self._nothing_to_train_on(ctx, spills)
        # (what a writer needs was imported ahead, while the tokenizer trained: see warm_ups;
        # a process that missed it imports it with its first file)
        # 0. the mix (recipes with sources): the train spills rewritten, copies and all
        mix: MixManifest | None = None
        if "sources" in ctx.artifacts:
            mix, spills["train"] = _mix.apply_mix(
                ctx, spills["train"], p.row_length if p.packing == "concat" else 1
            )
        # 1. pack every split into the shuffle spool
        settings = PackSettings(
            p.packer, p.row_length, eos, pad, TOKEN_DTYPES[dtype], p.shuffle, p.shuffle_buffer_mb
        )
        splits = {
            split: SplitInput(sp.totals, pack_split(ctx, sid, sp, settings), sp)
            for sid, (split, sp) in enumerate(spills.items())
            if sp.totals.documents
        }
        # 2. the shards: shuffled, planned, written in every format, accounted for
        output = ShardOutput(
            seq_length=p.seq_length,
            packing=p.packing,
            dtype=dtype,
            vocab_size=tok["vocab_size"],
            eos_id=eos,
            pad_id=pad,
            bos_id=tok["bos_id"],
            writers=list(p.writers),
            seed=ctx.seed,
            shuffle=p.shuffle,
            files=p.files,
            sources=[s["name"] for s in ctx.artifacts["sources"]["sources"]] if mix else None,
        )
        shards = write_shards(ctx, output, splits)
        for split, inp in splits.items():  # documents whose EOS fell in a dropped tail
            if inp.rows.stats.eos_dropped:
                self._reject_tail(ctx, spills[split], inp.rows.stats)
        # 3. the manifest
        tokenizer_entry = {k: v for k, v in tok.items() if k not in ("local_path", "examples_dir")}
        tokenizer_entry["roundtrip"] = roundtrip_report(tok.get("examples_dir"), ctx.task_ids)
        warning = roundtrip_warning(tokenizer_entry["roundtrip"])
        if warning:
            _log(warning)
        out: dict[str, Any] = {"tokenizer": tokenizer_entry, "shards": shards.to_json()}
        if mix is not None:
            train_input = splits.get("train")
            _mix.count_rows(ctx, mix, train_input.rows if train_input else None)
            out["mix"] = mix.to_json()
        return out
