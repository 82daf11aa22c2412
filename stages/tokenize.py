"""Tokenization: encode each document's text into token ids (``doc.tokens``, int32), in batches.

The tokenizer is a Hugging Face ``tokenizer.json`` or a SentencePiece ``.model`` given by path
(loaded offline), or ``train``: trained in this run on a deterministic sample of the cleaned text
(the documents with the smallest text hashes, up to ``train_sample_bytes``), as a byte-level BPE
(``kind: bytebpe``) or a SentencePiece BPE / unigram model with byte fallback. The documents with
the next hashes (a quarter of the sample, 256 KiB to 1 MiB) are held out and encoded with the
trained tokenizer: stats counts ``heldout_chars`` / ``heldout_tokens`` / ``heldout_bytes`` and
tokenizer/training.json records ``tokens_per_char`` and ``bytes_per_token``. Trained tokenizers
have fixed special ids: <pad>=0, <s>=1, </s>=2, <unk>=3.

Checks (fail fast, with what to change): the tokenizer has an EOS token; ``model_vocab_size``
(recorded as the manifest's vocab_size) covers every tokenizer id. A given tokenizer is checked
while the first passes run (loaded on the worker of the engine check) and stops the run before
its pass; a file that is no tokenizer at all is refused at setup, on its first bytes. In the
workers: the first ``roundtrip_docs`` documents of each task are decoded again and compared with their text
(differences are counted and sampled into the manifest, e.g. for NFKC-normalizing tokenizers).
Documents that encode to nothing are dropped (``no_tokens``); special-token strings in the text
are encoded as plain text, so an EOS id never comes from a document (a document whose ids
contain it anyway is dropped as ``eos_in_tokens``).

Engine (``engine``): a tokenizer.json is encoded by fastokens (a compiled reader of
tokenizer.json) when it loads the file and reproduces the tokenizers library's ids. That is
checked once per run, on a sample, and every task takes the verdict (the "tokenizer_engine"
artifact): a given tokenizer is checked on the input sample of
:attr:`dataprep.stage.DriverContext.input_sample` (the first documents of up to 32 tasks spread
over the plan, 256 KiB of text in all: about 0.2 CPU-s of tokenizers on Chinese text), on one of
the workers, which keeps both engines for its tasks; a trained byte-level BPE on the first 256 KiB
of its held-out texts, in the training process. A difference sends the whole run to tokenizers
with a warning (an error under ``engine: fastokens``). The decoded texts of the sample are
compared too: when they are the same, the round-trip check decodes with fastokens and the
workers never load the tokenizers library. Counters: ``engine_fastokens`` /
``engine_tokenizers`` / ``engine_sentencepiece`` (texts each engine encoded), ``engine_checked``
(texts of the run's check), ``engine_mismatch`` (1 when it found a difference).

Optional paragraph cuts (``paragraph_cuts_over``): a document with more tokens than that is
encoded line by line instead, and the line boundaries (token offsets) are stored in
``doc.meta["tokenize"]["cuts"]``; the pad and bestfit packings split long documents there.

Hugging Face files in OUT/tokenizer: a trained tokenizer gets tokenizer_config.json and
special_tokens_map.json (:func:`dataprep.tokenizers.hf_files.hf_config_files`: bos / eos / pad /
unk, ``model_max_length`` = the pack stage's seq_length, PreTrainedTokenizerFast), so that
``transformers.AutoTokenizer.from_pretrained(OUT/tokenizer)`` encodes as this stage does; a
supplied tokenizer keeps the ones found beside it, copied as they are, and none is made up for
it (their absence is logged and listed in the manifest's ``tokenizer.hf.missing``).

Loading, the engines, the checks, training and the Hugging Face files are in
:mod:`dataprep.tokenizers`; this module holds the stage.

Publishes the "tokenizer" artifact (see :func:`dataprep.tokenizers.load.describe`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import sys
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from dataprep.document import Document, Drop
from dataprep.stage import (
    DriverContext,
    GlobalStage,
    IsolatedProcess,
    NothingLeft,
    RecipeError,
    StageContext,
    StageResult,
    param,
    register,
)

TOKENIZER_DIR = "tokenizer"
SEQ_LENGTH_ARTIFACT = "seq_length"  # published by pack at setup: the HF config's model_max_length
ROUNDTRIP_EXAMPLES_PER_TASK = 3
TOKEN_EDGES: list[float] = [0, 1] + [2**k for k in range(1, 25)]


@dataclass
class TokenizeParams:
    tokenizer: str = param(
        "train", help="'train', or the path of a tokenizer.json / SentencePiece .model (or their directory)"
    )
    kind: Literal["bytebpe", "bpe", "unigram"] = param(
        "bytebpe", help="when training: byte-level BPE (tokenizers) or SentencePiece bpe / unigram"
    )
    vocab_size: int = param(8192, help="vocabulary size when training")
    train_sample_bytes: int = param(
        2 << 20,
        help="UTF-8 bytes of text sampled for training (byte-level BPE: ~1.5 CPU-s per MiB; 8 MiB "
        "instead of 2 saves under 1% of tokens on held-out Chinese text)",
    )
    eos_token: str = param("", help="EOS token of a given tokenizer (found automatically when empty)")
    pad_token: str = param("", help="padding token (found automatically; EOS is used when there is none)")
    model_vocab_size: int = param(
        0, help="embedding rows of the model, recorded as vocab_size (0: the tokenizer's size); must cover it"
    )
    roundtrip_docs: int = param(8, help="documents per task decoded again and compared with their text")
    paragraph_cuts_over: int = param(
        0, help="documents with more tokens are encoded line by line to give packing cut points (0: off)"
    )
    engine: Literal["auto", "tokenizers", "fastokens"] = param(
        "auto",
        help="encoder of a tokenizer.json: fastokens when it gives the same ids (checked once per run "
        "on a sample of the text), the tokenizers library, or fastokens demanded",
    )

    def validate(self) -> None:
        if self.tokenizer == "train":
            floor = 260 if self.kind == "bytebpe" else 261
            if self.vocab_size < floor:
                raise ValueError(f"vocab_size must be at least {floor} for kind {self.kind}")
        if self.model_vocab_size < 0 or self.roundtrip_docs < 0 or self.paragraph_cuts_over < 0:
            raise ValueError("model_vocab_size, roundtrip_docs and paragraph_cuts_over must be >= 0")


def _describe_job(params: TokenizeParams, local: Path) -> dict[str, Any]:
    """The job of :func:`dataprep.tokenizers.load.describe_file` for the tokenizer at ``local``."""
    return {
        "path": str(local),
        "engine": params.engine,
        "eos_token": params.eos_token,
        "pad_token": params.pad_token,
        "file": f"{TOKENIZER_DIR}/{local.name}",
        "model_vocab_size": params.model_vocab_size,
    }


def _publish(ctx: DriverContext, params: TokenizeParams, local: Path, trained: bool) -> dict[str, Any]:
    """Load the tokenizer in OUT's tokenizer directory, resolve its special tokens and publish it
    (:func:`_publish_info`)."""
    from dataprep.tokenizers.base import TokenizerError
    from dataprep.tokenizers.load import describe_file

    try:
        info = describe_file(_describe_job(params, local))
    except TokenizerError as e:
        raise RecipeError(f"tokenize: {e}") from None
    return _publish_info(ctx, params, local, info, trained)


def _publish_info(
    ctx: DriverContext, params: TokenizeParams, local: Path, info: dict[str, Any], trained: bool
) -> dict[str, Any]:
    """Publish the tokenizer at ``local`` described by ``info``. A trained tokenizer gets the
    Hugging Face files (tokenizer_config.json and special_tokens_map.json, model_max_length: the
    pack stage's seq_length when the recipe packs); a supplied one has the ones copied beside it,
    and their absence is logged. Both are recorded in the entry's ``hf``."""
    import dataclasses

    from dataprep.tokenizers.base import SpecialTokens
    from dataprep.tokenizers.hf_files import (
        HF_CONFIG_FILES,
        HF_TOKENIZER_CLASS,
        found_hf_config,
        write_hf_config,
    )

    if trained:
        max_length = ctx.artifacts.get(SEQ_LENGTH_ARTIFACT)
        specials = SpecialTokens(**{f.name: info[f.name] for f in dataclasses.fields(SpecialTokens)})
        files = write_hf_config(local.parent, specials, max_length)
        info["hf"] = {"files": files, "tokenizer_class": HF_TOKENIZER_CLASS, "model_max_length": max_length}
    else:
        info["hf"] = found_hf_config(local.parent)
        if not info["hf"]["files"]:
            print(
                f"tokenize: note: {params.tokenizer} has no {' or '.join(HF_CONFIG_FILES)} beside it: "
                "transformers' AutoTokenizer will load OUT/tokenizer without eos/bos/pad/unk tokens",
                file=sys.stderr,
                flush=True,
            )
    artifact = {**info, "local_path": str(local), "examples_dir": str(ctx.work_dir)}
    ctx.publish("tokenizer", artifact)
    return info


def _load_for_decoding(path: Path) -> None:
    """Load the tokenizer at ``path`` into this process's cache, with what decoding needs (the
    tokenizers library's; errors are met where the tokenizer is used)."""
    from dataprep.tokenizers.load import load_tokenizer

    with contextlib.suppress(Exception):
        load_tokenizer(path).decode([])


ENGINE_ARTIFACT = "tokenizer_engine"


def _take_verdict(ctx: DriverContext, verdict: dict[str, Any]) -> None:
    """Publish the run's engine verdict for the tasks, count it, warn about a mismatch."""
    import warnings

    ctx.publish(ENGINE_ARTIFACT, verdict)
    ctx.stats.count("engine_checked", verdict["checked"])
    mismatch = verdict.get("mismatch")
    if mismatch:
        from dataprep.tokenizers.check import describe_mismatch

        ctx.stats.count("engine_mismatch")
        warnings.warn(
            f"tokenize: {describe_mismatch(mismatch, 'a text of the sample')}; encoding with tokenizers",
            RuntimeWarning,
            stacklevel=2,
        )


def _holding(arrays: list[np.ndarray], value: int) -> set[int]:
    """Indices of the ``arrays`` that hold ``value`` (one comparison over all of them)."""
    if not arrays:
        return set()
    flat = np.concatenate(arrays)
    hits = np.flatnonzero(flat == value)
    if not len(hits):
        return set()
    ends = np.cumsum([len(a) for a in arrays])
    return set(np.searchsorted(ends, hits, side="right").tolist())


@register
class Tokenize(GlobalStage):
    """Encode documents into token ids with a given (offline) or freshly trained tokenizer."""

    name = "tokenize"
    Params = TokenizeParams
    provides = ("tokenizer",)

    def __init__(self, params: TokenizeParams):
        super().__init__(params)
        self._sample: Any = None
        self._tokenizer: Any = None
        self._tokenizer_path = ""
        self._warm_ups: list[Any] = []  # building the given tokenizer.json's engine, once set up
        self._checked = 0
        self._examples: list[dict[str, Any]] = []
        self._engine_task = True
        self._trainer: IsolatedProcess | None = None  # the training process, started ahead
        # a given tokenizer's path and the future of its description (and engine check)
        self._describing: tuple[Path, Future[dict[str, Any]]] | None = None

    def needs_global_pass(self) -> bool:
        return self.params.tokenizer == "train"

    def setup(self, ctx: DriverContext) -> None:
        if self.params.tokenizer == "train":
            return
        from dataprep.tokenizers.base import TokenizerError
        from dataprep.tokenizers.hf_files import copy_hf_config
        from dataprep.tokenizers.load import resolve_tokenizer_file

        try:
            src = resolve_tokenizer_file(self.params.tokenizer)
        except TokenizerError as e:
            raise RecipeError(f"tokenize.tokenizer: {e}") from None
        dst = ctx.output_dir / TOKENIZER_DIR / ("tokenizer.json" if src.suffix == ".json" else src.name)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        copy_hf_config(src.parent, dst.parent)  # the supplied tokenizer's own Hugging Face files
        self._describing = self._start_describe(ctx, dst)
        if dst.suffix == ".json" and self.params.engine != "tokenizers":
            from dataprep.tokenizers.load import warm_tokenizer

            self._warm_ups = [functools.partial(warm_tokenizer, str(dst))]
        if self.params.engine == "fastokens":  # demanded: fail before any pass, not after some
            self.prepare_apply(ctx)

    def warm_ups(self) -> list[Any]:
        """A given tokenizer.json's fastokens engine (~1 CPU-s to build for a large vocabulary),
        built by each worker at the end of the pass before this stage's (the engine check's
        worker has it already), in the time the end of that pass and its decide leave idle,
        instead of in the tokenize pass."""
        return self._warm_ups

    def _start_describe(self, ctx: DriverContext, path: Path) -> tuple[Path, Future[dict[str, Any]]]:
        """Start loading and describing the tokenizer at ``path`` (and, for a tokenizer.json, the
        run's engine check) while the first passes run: the loads take 0.5-3 CPU-s for a large
        vocabulary. With a pool, on one of its workers, which loads both engines for the check and
        keeps them for its tasks (its result: :func:`dataprep.tokenizers.load.describe_and_check`);
        without one, in a thread of this process. Taken in :meth:`prepare_apply`, before the
        tokenizer's pass (a file that is no tokenizer was refused here, on its first bytes)."""
        from dataprep.tokenizers.check import RUN_CHECK_BYTES
        from dataprep.tokenizers.load import describe_and_check, describe_file

        job = _describe_job(self.params, path)
        check = path.suffix != ".model" and self.params.engine != "tokenizers"  # a tokenizer.json
        texts = ctx.input_sample(RUN_CHECK_BYTES) if check and ctx.input_sample is not None else []
        if texts and ctx.executor is not None:
            return path, ctx.executor.submit(describe_and_check, {**job, "texts": texts})
        fn, arg = (describe_and_check, {**job, "texts": texts}) if texts else (describe_file, job)
        future: Future[dict[str, Any]] = Future()

        def run() -> None:
            try:
                future.set_result(fn(arg))
            except BaseException as e:  # taken by prepare_apply
                future.set_exception(e)

        threading.Thread(target=run, name="tokenizer-describe", daemon=True).start()
        return path, future

    def prepare_apply(self, ctx: DriverContext) -> None:
        from dataprep.tokenizers.base import TokenizerError

        if self._describing is None:
            return
        (path, describing), self._describing = self._describing, None
        try:
            result = describing.result()
        except TokenizerError as e:
            raise RecipeError(f"tokenize: {e}") from None
        if "info" in result:  # described and checked
            _publish_info(ctx, self.params, path, result["info"], trained=False)
            if result["verdict"] is not None:
                _take_verdict(ctx, result["verdict"])
        else:
            _publish_info(ctx, self.params, path, result, trained=False)
        if ctx.executor is not None and ctx.executor.has_workers:
            # the driver decodes a few documents in a later decide (e.g. pack's dropped tail):
            # the tokenizer is loaded here while the workers encode, not there while they wait
            threading.Thread(
                target=_load_for_decoding, args=(path,), name="tokenizer-load", daemon=True
            ).start()

    # -- training sample (pass before): per task, the texts with the smallest hashes
    def begin_task(self, ctx: StageContext) -> None:
        self._sample = None
        self._checked = 0
        self._examples = []
        self._engine_task = True

    def compute(self, batch: list[Document], ctx: StageContext) -> None:
        from dataprep.tokenizers.sample import TextSample, heldout_budget

        if self._sample is None:
            budget = self.params.train_sample_bytes + heldout_budget(self.params.train_sample_bytes)
            per_task = max(4 * budget // max(ctx.num_tasks, 1), 1 << 20)
            self._sample = TextSample(min(budget, per_task))
        for doc in batch:
            self._sample.add(doc.text)

    def finish_compute(self, ctx: StageContext) -> None:
        items = self._sample.items() if self._sample is not None else []
        path = ctx.work_dir / f"{ctx.task_id}.sample.json"  # sorted by hash: read lazily by decide
        path.write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
        self._sample = None

    def prepare_decide(self, ctx: DriverContext) -> None:
        if self.params.tokenizer == "train" and self._trainer is None:
            from dataprep.tokenizers.train import import_training

            self._trainer = IsolatedProcess(import_training)

    def decide(self, ctx: DriverContext) -> dict[str, Any]:
        if ctx.docs_in == 0:
            if self._trainer is not None:
                self._trainer.close()
                self._trainer = None
            raise NothingLeft("tokenize: no document left to train a tokenizer on")
        job = {
            "samples": [str(ctx.work_dir / f"{t}.sample.json") for t in ctx.task_ids],
            "budget": self.params.train_sample_bytes,
            "out": str(ctx.output_dir / TOKENIZER_DIR),
            "kind": self.params.kind,
            "vocab_size": self.params.vocab_size,
            "engine": self.params.engine,
        }
        # training holds the sample several times over (GBs for a large sample): a process of its
        # own gives that memory back before packing starts
        trainer, self._trainer = self._trainer, None
        from dataprep.tokenizers.train import train_from_samples

        info = ctx.run_isolated(train_from_samples, job, trainer)
        if not info["path"]:
            raise RecipeError(
                f"tokenize: the {ctx.docs_in} documents left hold no text to train a tokenizer on; "
                "drop empty documents before (filter_length) or give tokenize.tokenizer a tokenizer file"
            )
        if info.get("refused"):
            raise RecipeError(f"tokenize: {info['refused']}")
        ctx.stats.count("train_sample_docs", info["sample_docs"])
        ctx.stats.count("train_sample_bytes", info["sample_bytes"])
        for key in ("heldout_docs", "heldout_chars", "heldout_bytes", "heldout_tokens"):
            ctx.stats.count(key, info[key])
        _publish(ctx, self.params, Path(info["path"]), trained=True)
        if info.get("verdict") is not None:
            _take_verdict(ctx, info["verdict"])
        return {}

    def drop_hint(self, reason: str, label: str) -> str | None:
        if reason == "no_tokens":
            return "these documents have no text left to encode: see what the stages before emptied them"
        if reason == "eos_in_tokens":
            return f"give {label}.tokenizer a tokenizer that never encodes text to its EOS id"
        return super().drop_hint(reason, label)

    # -- encoding
    def _load(self, ctx: StageContext) -> Any:
        path = ctx.artifacts["tokenizer"]["local_path"]
        if self._tokenizer is None or self._tokenizer_path != path:
            from dataprep.tokenizers.load import load_tokenizer

            self._tokenizer = load_tokenizer(path)
            self._tokenizer_path = path
        return self._tokenizer

    def _paragraph_encode(self, tok: Any, text: str) -> tuple[np.ndarray, list[int]]:
        lines = text.splitlines(keepends=True)
        parts = tok.encode_batch(lines)
        lengths = np.cumsum([len(p) for p in parts])
        total = int(lengths[-1]) if len(lengths) else 0
        cuts = sorted({int(c) for c in lengths[:-1] if 0 < c < total})
        tokens = np.concatenate(parts) if parts else np.zeros(0, np.int32)
        return tokens.astype(np.int32, copy=False), cuts

    def _roundtrip(self, tok: Any, doc: Document, ctx: StageContext) -> None:
        from dataprep.tokenizers.check import roundtrip_difference

        self._checked += 1
        ctx.stats.count("roundtrip_checked")
        diff = roundtrip_difference(doc.text, tok.decode(doc.tokens))
        if diff is None:
            return
        ctx.stats.count("roundtrip_mismatch")
        if len(self._examples) < ROUNDTRIP_EXAMPLES_PER_TASK:
            self._examples.append({"id": doc.id, **diff})
            path = ctx.work_dir / f"{ctx.task_id}.roundtrip.json"
            path.write_text(json.dumps(self._examples, ensure_ascii=False))

    def apply(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        tok = self._load(ctx)
        if self._engine_task:  # the engine of the run's check (the same in every task)
            tok.use_engine(self.params.engine, verdict=ctx.artifacts.get(ENGINE_ARTIFACT))
            tok.take_counts()
            self._engine_task = False
        encoded = tok.encode_batch([d.text for d in batch])
        threshold = self.params.paragraph_cuts_over
        eos = ctx.artifacts["tokenizer"]["eos_id"]
        with_eos = _holding(encoded, eos)
        out: list[StageResult] = []
        lengths = []
        for i, (doc, ids) in enumerate(zip(batch, encoded, strict=True)):
            if threshold and len(ids) > threshold:
                ids, cuts = self._paragraph_encode(tok, doc.text)
                doc.meta.setdefault("tokenize", {})["cuts"] = cuts
                ctx.stats.count("paragraph_cut_docs")
                with_eos.discard(i)
                if (ids == eos).any():
                    with_eos.add(i)
            if len(ids) == 0:
                out.append(Drop(doc, "no_tokens"))
                continue
            if i in with_eos:  # the EOS marks document ends only; a tokenizer that emits it is unusable here
                out.append(Drop(doc, "eos_in_tokens", detail="the tokenizer produced the EOS id from text"))
                continue
            doc.tokens = ids
            lengths.append(len(ids))
            if self._checked < self.params.roundtrip_docs:
                self._roundtrip(tok, doc, ctx)
            out.append(doc)
        ctx.stats.count("tokens", int(sum(lengths)))
        for name, n in tok.take_counts().items():  # engine_<name>, engine_checked, engine_mismatch
            ctx.stats.count(name, n)
        ctx.stats.histogram("tokens_per_doc", TOKEN_EDGES).add(lengths)
        return out
