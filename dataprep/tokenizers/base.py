"""What every loaded tokenizer is: :class:`TextTokenizer` (batch encoding to int32 arrays,
decoding, the special tokens, a checksum, counters of the engine that encoded), whatever the
file and the engine (:mod:`dataprep.tokenizers.engines`).

Encoding contract (:meth:`TextTokenizer.encode_batch`): no special tokens are added (no BOS, no
EOS: packing appends the EOS), and special-token strings that occur inside the text (e.g. a
literal ``</s>``) are encoded as ordinary text, so an EOS id in the output can only come from
packing. Ids are returned as int32 arrays.

Special tokens are found in this order: explicit names given by the caller, a
``tokenizer_config.json`` next to a tokenizer.json (Hugging Face's eos_token / bos_token /
pad_token / unk_token), the SentencePiece model's own ids, then well-known names.

``size`` is the tokenizer's id range (largest id + 1), which the model's vocab_size must cover.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.io import file_sha256
from dataprep.tokenizers.check import CHECK_BYTES

EOS_CANDIDATES = (
    "</s>",
    "<|endoftext|>",
    "<eos>",
    "<|end_of_text|>",
    "<｜end▁of▁sentence｜>",
    "<|im_end|>",
    "[SEP]",
)
BOS_CANDIDATES = ("<s>", "<|begin_of_text|>", "<｜begin▁of▁sentence｜>", "<bos>", "[CLS]")
PAD_CANDIDATES = ("<pad>", "<|pad|>", "<｜▁pad▁｜>", "[PAD]", "<|finetune_right_pad_id|>")
UNK_CANDIDATES = ("<unk>", "[UNK]", "<|unk|>")
ENGINES = ("auto", "tokenizers", "fastokens")


class TokenizerError(ValueError):
    """The tokenizer cannot be used as asked; the message says what to change."""


@dataclass
class SpecialTokens:
    """Token strings and ids of the special tokens (None when the tokenizer has none)."""

    eos_token: str
    eos_id: int
    bos_token: str | None = None
    bos_id: int | None = None
    pad_token: str | None = None
    pad_id: int | None = None
    unk_token: str | None = None
    unk_id: int | None = None


def default_threads() -> int:
    """Encoding threads: 1 when TOKENIZERS_PARALLELISM is false, else RAYON_NUM_THREADS, else
    the CPUs this process may use."""
    if os.environ.get("TOKENIZERS_PARALLELISM", "").strip().lower() in ("0", "false", "f", "off", "no", "n"):
        return 1
    n = os.environ.get("RAYON_NUM_THREADS", "").strip()
    if n.isdigit() and int(n) > 0:
        return int(n)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class TextTokenizer:
    """A loaded tokenizer: batch encoding to int32 arrays, decoding, special ids, checksum.

    kind: "hf" (tokenizers library) or "sentencepiece". path: the tokenizer file. engine: what
    encodes now ("tokenizers", "fastokens" or "sentencepiece"). threads: encoding threads (None:
    :func:`default_threads`).
    """

    kind = ""

    def __init__(self, path: Path):
        self.path = path
        self.sha256 = file_sha256(path)
        self.threads: int | None = None
        self._counts: Counter[str] = Counter()

    @property
    def engine(self) -> str:
        raise NotImplementedError

    def use_engine(
        self, mode: str = "auto", check_bytes: int = CHECK_BYTES, verdict: dict[str, Any] | None = None
    ) -> None:
        """Choose the engine ("auto", "tokenizers": the reference one, "fastokens") and restart the
        identity check (the next CHECK_DOCS texts, at most ``check_bytes`` UTF-8 bytes), or, given
        the ``verdict`` of a check made once for the whole run
        (:meth:`dataprep.tokenizers.engines.HFTokenizer.check_engine`), take its engine without
        checking again; TokenizerError when the mode is unknown or impossible for this file."""
        if mode not in ENGINES:
            raise TokenizerError(f"unknown tokenizer engine {mode!r}; choose one of {', '.join(ENGINES)}")
        if mode == "fastokens":
            raise TokenizerError(f"{self.path}: the fastokens engine needs a Hugging Face tokenizer.json")

    def take_counts(self) -> dict[str, int]:
        """Counters since the last call: ``engine_<name>`` texts encoded by each engine,
        ``engine_checked`` texts encoded by both and compared, ``engine_mismatch`` differences."""
        out = dict(self._counts)
        self._counts.clear()
        return out

    def _threads(self) -> int:
        return self.threads or default_threads()

    @property
    def size(self) -> int:
        """Largest token id + 1."""
        raise NotImplementedError

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        raise NotImplementedError

    def decode(self, ids: Any) -> str:
        raise NotImplementedError

    def token_to_id(self, token: str) -> int | None:
        raise NotImplementedError

    def id_to_token(self, token_id: int) -> str | None:
        raise NotImplementedError

    def _configured(self) -> dict[str, str]:
        return {}

    def _native_specials(self) -> dict[str, int]:
        return {}

    def special_tokens(self, eos_token: str = "", pad_token: str = "", bos_token: str = "") -> SpecialTokens:
        """Resolve special tokens; TokenizerError when there is no EOS (or a named token is unknown)."""
        configured = self._configured()
        native = self._native_specials()
        found: dict[str, tuple[str | None, int | None]] = {}
        for role, explicit, candidates in (
            ("eos", eos_token, EOS_CANDIDATES),
            ("bos", bos_token, BOS_CANDIDATES),
            ("pad", pad_token, PAD_CANDIDATES),
            ("unk", "", UNK_CANDIDATES),
        ):
            if explicit:
                tid = self.token_to_id(explicit)
                if tid is None:
                    raise TokenizerError(
                        f"{self.path}: the {role} token {explicit!r} is not in the vocabulary"
                    )
                found[role] = (explicit, tid)
                continue
            names = [configured[role]] if role in configured else []
            names += list(candidates)
            hit = next(((n, self.token_to_id(n)) for n in names if self.token_to_id(n) is not None), None)
            if hit is None and role in native:
                hit = (self.id_to_token(native[role]), native[role])
            found[role] = hit if hit is not None else (None, None)
        eos_name, eos_id = found["eos"]
        if eos_id is None or eos_name is None:
            raise TokenizerError(
                f"tokenizer {self.path} has no EOS token (looked for {', '.join(EOS_CANDIDATES)}); "
                "name it with tokenize.eos_token"
            )
        return SpecialTokens(
            eos_token=eos_name,
            eos_id=eos_id,
            bos_token=found["bos"][0],
            bos_id=found["bos"][1],
            pad_token=found["pad"][0],
            pad_id=found["pad"][1],
            unk_token=found["unk"][0],
            unk_id=found["unk"][1],
        )
