"""The engines that encode a loaded tokenizer: :class:`HFTokenizer` for a Hugging Face
tokenizer.json (fastokens, checked against the tokenizers library, the reference) and
:class:`SentencePieceTokenizer` for a SentencePiece ``.model``. Load them with
:func:`dataprep.tokenizers.load.load_tokenizer`."""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.tokenizers.base import ENGINES, TextTokenizer, TokenizerError
from dataprep.tokenizers.check import (
    CHECK_BYTES,
    CHECK_DOCS,
    describe_mismatch,
    first_mismatch,
    ids_difference,
)
from dataprep.tokenizers.hf_files import configured_specials

_BUILDING = threading.Lock()  # held while a fastokens engine is built (one build at a time)


class HFTokenizer(TextTokenizer):
    """A Hugging Face tokenizer.json (any model: byte-level BPE, WordPiece, Unigram...).

    Encoded by ``fastokens`` (a compiled reimplementation that reads tokenizer.json itself) when
    it loads the file, else by ``tokenizers``, the reference. The ids are checked, not assumed:
    either once for a whole run (:meth:`check_engine` on a sample, whose verdict every process
    takes with ``use_engine(mode, verdict=...)``), or, without a verdict, on the first CHECK_DOCS
    texts (at most the check budget of bytes) after loading or :meth:`use_engine`. A difference
    switches to tokenizers (with a warning naming where they part; an error when fastokens was
    demanded). The tokenizers library is loaded only when something needs it."""

    kind = "hf"

    def __init__(self, path: Path):
        super().__init__(path)
        self._ref: Any = None  # the tokenizers library's Tokenizer, loaded on first use
        self._size: int | None = None
        self._fastokens: Any = None  # the fastokens engine once built
        self.fastokens_refused = ""  # why there is no fastokens engine ("" until tried, or if built)
        self.mismatch: dict[str, Any] | None = None  # the difference that switched fastokens off
        self._fast_decode = False  # decode with fastokens (a run's check found its decoding identical)
        self.use_engine("auto")

    @property
    def _tok(self) -> Any:
        """The reference (tokenizers) engine, loaded on first use: a process that takes a run's
        verdict for fastokens and decodes with it never loads it (0.4-0.7 CPU-s for a large
        vocabulary)."""
        if self._ref is None:
            from tokenizers import Tokenizer

            try:
                ref = Tokenizer.from_file(str(self.path))
            except Exception as e:
                raise TokenizerError(f"{self.path} is not a valid Hugging Face tokenizer.json: {e}") from None
            # Special-token strings inside documents are plain text, never control ids.
            ref.encode_special_tokens = True
            self._batch_fast = hasattr(ref, "encode_batch_fast")
            self._ref = ref
        return self._ref

    def use_engine(
        self, mode: str = "auto", check_bytes: int = CHECK_BYTES, verdict: dict[str, Any] | None = None
    ) -> None:
        if mode not in ENGINES:
            super().use_engine(mode)
        self.mode = mode
        self.mismatch = None
        self._check_docs = CHECK_DOCS
        self._check_bytes = check_bytes
        self._fast_decode = False
        if verdict is not None and mode != "tokenizers":
            self._check_docs = self._check_bytes = 0
            self.mismatch = verdict.get("mismatch")
            if verdict.get("refused"):
                self.fastokens_refused = verdict["refused"]
            self._fast_decode = verdict.get("engine") == "fastokens" and bool(verdict.get("decode_same"))
        if mode == "fastokens" and self._fastokens_engine() is None:
            raise TokenizerError(
                f"{self.path}: no fastokens engine for this tokenizer: {self.fastokens_refused}"
            )

    def check_engine(self, texts: list[str]) -> dict[str, Any]:
        """Encode ``texts`` with both engines and compare the ids (and the decoded text of each),
        once for a whole run; returns the verdict every process then passes to
        :meth:`use_engine`: ``engine`` ("fastokens" or "tokenizers"), ``checked`` (texts
        compared), ``mismatch`` (where the ids first part, or None), ``refused`` (why there is no
        fastokens engine, or ""), ``decode_same`` (fastokens decodes them as tokenizers does).
        This tokenizer is left on the verdict. TokenizerError when fastokens was demanded and
        differs. Texts that encode to nothing count like any other."""
        verdict: dict[str, Any] = {
            "engine": "tokenizers",
            "checked": 0,
            "mismatch": None,
            "refused": "",
            "decode_same": False,
        }
        if self.mode == "tokenizers":
            return verdict
        if self._fastokens_engine() is None:
            verdict["refused"] = self.fastokens_refused
            if self.mode == "fastokens":
                raise TokenizerError(
                    f"{self.path}: no fastokens engine for this tokenizer: {self.fastokens_refused}"
                )
            return verdict
        verdict["checked"] = len(texts)
        fast, reference = self._fast(texts), self._reference(texts)
        bad = first_mismatch(fast, reference)
        if bad is not None:
            self.mismatch = verdict["mismatch"] = self._difference(texts[bad], fast[bad], reference[bad])
            if self.mode == "fastokens":
                raise TokenizerError(self.mismatch_message() + "; engine 'fastokens' was demanded")
            return verdict
        verdict["engine"] = "fastokens"
        decoded = self._fastokens.decode_batch([ids.tolist() for ids in reference], skip_special_tokens=False)
        verdict["decode_same"] = decoded == [self._decode_reference(ids) for ids in reference]
        self._check_docs = self._check_bytes = 0
        self._fast_decode = verdict["decode_same"]
        return verdict

    def warm_in_background(self) -> None:
        """Start building the fastokens engine (~1 CPU-s for a 128k vocabulary) in a thread of
        this process at the lowest CPU priority, unless this tokenizer encodes with tokenizers
        only or the engine is built: fastokens releases the GIL while it builds, so the process
        goes on with its jobs and the build takes the CPU they leave idle. The first encode
        waits for it."""
        if self.mode == "tokenizers" or self._fastokens is not None or self.fastokens_refused:
            return
        from dataprep.worker_env import start_at_low_priority

        start_at_low_priority(self._fastokens_engine, "fastokens-build")

    def _fastokens_engine(self) -> Any:
        """The fastokens tokenizer, built on first use (or waited for while
        :meth:`warm_in_background` builds it); None (reason in fastokens_refused) if it cannot
        read this tokenizer.json (an unsupported normalizer, pre-tokenizer or model)."""
        with _BUILDING:
            if self._fastokens is None and not self.fastokens_refused:
                try:
                    import fastokens

                    self._fastokens = fastokens.Tokenizer.from_file(str(self.path))
                except ImportError as e:
                    self.fastokens_refused = f"fastokens is not installed ({e})"
                except Exception as e:  # its loader reports what it does not support
                    self.fastokens_refused = str(e) or type(e).__name__
        return self._fastokens

    @property
    def engine(self) -> str:
        if self.mode == "tokenizers" or self.mismatch is not None or self._fastokens_engine() is None:
            return "tokenizers"
        return "fastokens"

    @property
    def size(self) -> int:
        if self._size is None:
            vocab = self._tok.get_vocab(with_added_tokens=True)
            self._size = max(vocab.values()) + 1 if vocab else 0
        return self._size

    def _reference(self, texts: list[str]) -> list[np.ndarray]:
        tok = self._tok
        encode = tok.encode_batch_fast if self._batch_fast else tok.encode_batch
        return [np.asarray(e.ids, dtype=np.int32) for e in encode(texts, add_special_tokens=False)]

    def _fast(self, texts: list[str]) -> list[np.ndarray]:
        """fastokens' ids: one flat buffer for the batch, cut into int32 views (no per-token
        Python objects); special-token strings encoded as text, no special tokens added."""
        flat, ends = self._fastokens.encode_batch_flat(
            texts, add_special_tokens=False, split_special_tokens=True
        )
        ids = np.frombuffer(flat, dtype=np.uint32).astype(np.int32)
        bounds = np.frombuffer(ends, dtype=np.uint64).astype(np.int64)
        return np.split(ids, bounds[1:-1]) if len(texts) else []

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        if self.engine == "tokenizers":
            self._counts["engine_tokenizers"] += len(texts)
            return self._reference(texts)
        ids = self._fast(texts)
        n = 0
        while n < len(texts) and self._check_docs > 0 and self._check_bytes > 0:
            self._check_docs -= 1
            self._check_bytes -= len(texts[n].encode("utf-8"))
            n += 1
        if n:
            reference = self._reference(texts[:n])
            self._counts["engine_checked"] += n
            bad = first_mismatch(ids[:n], reference)
            if bad is not None:
                self._counts["engine_mismatch"] += 1
                self._switch_off(texts[bad], ids[bad], reference[bad])
                self._counts["engine_tokenizers"] += len(texts)
                return reference + self._reference(texts[n:])
        self._counts["engine_fastokens"] += len(texts)
        return ids

    def _difference(self, text: str, fast: np.ndarray, reference: np.ndarray) -> dict[str, Any]:
        """Where fastokens' ids for ``text`` part from tokenizers' (:func:`ids_difference`)."""
        return ids_difference(text, fast, reference, self._decode_reference)

    def mismatch_message(self) -> str:
        """The recorded mismatch in words (empty when there is none)."""
        return "" if self.mismatch is None else f"{self.path}: {describe_mismatch(self.mismatch)}"

    def _switch_off(self, text: str, fast: np.ndarray, reference: np.ndarray) -> None:
        """Record where fastokens' ids part from tokenizers', warn, use tokenizers from now on
        (TokenizerError when fastokens was demanded)."""
        self.mismatch = self._difference(text, fast, reference)
        message = self.mismatch_message()
        if self.mode == "fastokens":
            raise TokenizerError(message + "; engine 'fastokens' was demanded")
        warnings.warn(message + "; encoding with tokenizers from now on", RuntimeWarning, stacklevel=3)

    def _decode_reference(self, ids: Any) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def decode(self, ids: Any) -> str:
        """The text of ``ids``: by fastokens when the run's check found its decoding identical on
        the sample, else by tokenizers."""
        if self._fast_decode and self.engine == "fastokens":
            return self._fastokens.decode([int(i) for i in ids], skip_special_tokens=False)
        return self._decode_reference(ids)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._tok.id_to_token(int(token_id))

    def _configured(self) -> dict[str, str]:
        return configured_specials(self.path.parent)


class SentencePieceTokenizer(TextTokenizer):
    """A SentencePiece model (.model): BPE or unigram, with or without byte fallback."""

    kind = "sentencepiece"

    def __init__(self, path: Path):
        super().__init__(path)
        import sentencepiece as spm

        try:
            self._sp = spm.SentencePieceProcessor(model_file=str(path))
        except Exception as e:
            raise TokenizerError(f"{path} is not a valid SentencePiece model: {e}") from None

    @property
    def size(self) -> int:
        return int(self._sp.get_piece_size())

    @property
    def engine(self) -> str:
        return "sentencepiece"

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        """sentencepiece's batch encoder (C++ threads: :func:`dataprep.tokenizers.base.default_threads`)."""
        self._counts["engine_sentencepiece"] += len(texts)
        ids = self._sp.encode(texts, out_type=int, num_threads=self._threads())
        return [np.asarray(i, dtype=np.int32) for i in ids]

    def decode(self, ids: Any) -> str:
        return self._sp.decode([int(i) for i in ids])

    def token_to_id(self, token: str) -> int | None:
        tid = self._sp.piece_to_id(token)
        if tid == self._sp.unk_id() and token != self._sp.id_to_piece(tid):
            return None
        return int(tid)

    def id_to_token(self, token_id: int) -> str | None:
        if not 0 <= token_id < self.size:
            return None
        return self._sp.id_to_piece(int(token_id))

    def _native_specials(self) -> dict[str, int]:
        ids = {
            "eos": self._sp.eos_id(),
            "bos": self._sp.bos_id(),
            "pad": self._sp.pad_id(),
            "unk": self._sp.unk_id(),
        }
        return {k: int(v) for k, v in ids.items() if v >= 0}
