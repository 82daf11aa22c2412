"""Tokenizers loaded offline: a Hugging Face ``tokenizer.json`` or a SentencePiece ``.model``.

:func:`load_tokenizer` accepts either file, or a directory holding one of them. Nothing is ever
downloaded. Special tokens are found in this order: explicit names given by the caller, a
``tokenizer_config.json`` next to a tokenizer.json (Hugging Face's eos_token / bos_token /
pad_token / unk_token), the SentencePiece model's own ids, then well-known names.

Encoding contract (:meth:`TextTokenizer.encode_batch`): no special tokens are added (no BOS, no
EOS: packing appends the EOS), and special-token strings that occur inside the text (e.g. a
literal ``</s>``) are encoded as ordinary text, so an EOS id in the output can only come from
packing. Ids are returned as int32 arrays.

``size`` is the tokenizer's id range (largest id + 1), which the model's vocab_size must cover.
"""

from __future__ import annotations

import json
import os
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.io import file_sha256

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
HF_FILE = "tokenizer.json"
SPM_FILE = "tokenizer.model"
ENGINES = ("auto", "tokenizers", "fastokens")
CHECK_DOCS = 512  # texts encoded by both engines after loading / use_engine (no run verdict)
CHECK_BYTES = 1 << 20  # ... or fewer, once this many UTF-8 bytes were checked
RUN_CHECK_BYTES = 256 << 10  # UTF-8 bytes of a run's sample checked once (check_engine)


def describe_mismatch(mismatch: dict[str, Any], where: str = "a text") -> str:
    """A mismatch recorded by :meth:`HFTokenizer.check_engine` / the per-task check, in words."""
    m = mismatch
    return (
        f"fastokens and tokenizers give different ids at character {m['position']} of {where} "
        f"({m['text']!r}: {m['fastokens']} vs {m['tokenizers']})"
    )


class TokenizerError(ValueError):
    """The tokenizer cannot be used as asked; the message says what to change."""


def resolve_tokenizer_file(path: str | Path) -> Path:
    """The tokenizer file for ``path``: the file itself, or tokenizer.json / tokenizer.model /
    the only *.model inside a directory."""
    p = Path(path)
    if p.is_file():
        return _looks_like_tokenizer(p)
    if p.is_dir():
        for name in (HF_FILE, SPM_FILE):
            if (p / name).is_file():
                return _looks_like_tokenizer(p / name)
        models = sorted(p.glob("*.model"))
        if len(models) == 1:
            return _looks_like_tokenizer(models[0])
        raise TokenizerError(f"{p} holds no {HF_FILE} or SentencePiece .model file")
    if p.exists():
        raise TokenizerError(f"tokenizer {p} is not a regular file (give a tokenizer.json or a .model file)")
    raise TokenizerError(f"tokenizer {p} does not exist (give a tokenizer.json, a .model file or 'train')")


def _looks_like_tokenizer(p: Path) -> Path:
    """``p`` when its first bytes are those of a tokenizer.json (a JSON object) or of a
    SentencePiece model (a protobuf whose first field is a piece, byte 0x0A); checked before
    the file is loaded or copied anywhere, so a large wrong file is refused at once."""
    with open(p, "rb") as f:
        head = f.read(4096)
    if head.lstrip(b" \t\r\n\xef\xbb\xbf")[:1] == b"{" or (p.suffix == ".model" and head[:1] == b"\n"):
        return p
    raise TokenizerError(f"{p} is not a tokenizer (neither a tokenizer.json nor a SentencePiece .model)")


def _config_token(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) and value else None


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
        the ``verdict`` of a check made once for the whole run (:meth:`HFTokenizer.check_engine`),
        take its engine without checking again; TokenizerError when the mode is unknown or
        impossible for this file."""
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
        bad = next((i for i in range(len(texts)) if not np.array_equal(fast[i], reference[i])), None)
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

    def _fastokens_engine(self) -> Any:
        """The fastokens tokenizer, built on first use; None (reason in fastokens_refused) if it
        cannot read this tokenizer.json (an unsupported normalizer, pre-tokenizer or model)."""
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
            bad = next((i for i in range(n) if not np.array_equal(ids[i], reference[i])), None)
            if bad is not None:
                self._counts["engine_mismatch"] += 1
                self._switch_off(texts[bad], ids[bad], reference[bad])
                self._counts["engine_tokenizers"] += len(texts)
                return reference + self._reference(texts[n:])
        self._counts["engine_fastokens"] += len(texts)
        return ids

    def _difference(self, text: str, fast: np.ndarray, reference: np.ndarray) -> dict[str, Any]:
        """Where fastokens' ids for ``text`` part from tokenizers': character position, an
        excerpt around it and the next ids of each."""
        k = 0
        while k < min(len(fast), len(reference)) and fast[k] == reference[k]:
            k += 1
        same = self._tok.decode([int(i) for i in reference[:k]], skip_special_tokens=False)
        position = 0
        while position < min(len(text), len(same)) and text[position] == same[position]:
            position += 1
        return {
            "position": position,
            "text": text[max(0, position - 20) : position + 20],
            "fastokens": [int(i) for i in fast[k : k + 5]],
            "tokenizers": [int(i) for i in reference[k : k + 5]],
        }

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
        cfg = self.path.parent / "tokenizer_config.json"
        if not cfg.is_file():
            return {}
        try:
            data = json.loads(cfg.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        out = {}
        for role in ("eos", "bos", "pad", "unk"):
            name = _config_token(data.get(f"{role}_token"))
            if name:
                out[role] = name
        return out


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
        """sentencepiece's batch encoder (C++ threads, :func:`default_threads` of them)."""
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


_CACHE: dict[tuple[str, int, int], TextTokenizer] = {}


def load_tokenizer(path: str | Path) -> TextTokenizer:
    """Load a tokenizer.json or SentencePiece .model (or a directory holding one), offline.

    Loaded tokenizers are cached per process (keyed by resolved path, size and mtime): loading a
    large vocabulary takes a noticeable fraction of a second.
    """
    f = resolve_tokenizer_file(path)
    st = f.stat()
    key = (str(f.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _CACHE:
        _CACHE[key] = _load(f)
    return _CACHE[key]


def _load(f: Path) -> TextTokenizer:
    if f.suffix == ".json":
        return HFTokenizer(f)
    if f.suffix == ".model":
        return SentencePieceTokenizer(f)
    with open(f, "rb") as fh:
        head = fh.read(1).lstrip()
    return HFTokenizer(f) if head in (b"{", b"") else SentencePieceTokenizer(f)


def describe(
    tok: TextTokenizer, specials: SpecialTokens, file: str, model_vocab_size: int = 0
) -> dict[str, Any]:
    """The manifest's "tokenizer" entry (and the "tokenizer" artifact).

    vocab_size: the model's embedding rows, >= ``size``; TokenizerError if a smaller value is asked.
    """
    vocab_size = model_vocab_size or tok.size
    if vocab_size < tok.size:
        raise TokenizerError(
            f"model vocab_size {vocab_size} is smaller than the tokenizer's {tok.size} ids: the embedding "
            f"would be indexed out of range; use at least {tok.size}"
        )
    return {
        "file": file,
        "kind": tok.kind,
        "sha256": tok.sha256,
        "size": tok.size,
        "vocab_size": vocab_size,
        "eos_token": specials.eos_token,
        "eos_id": specials.eos_id,
        "bos_token": specials.bos_token,
        "bos_id": specials.bos_id,
        "pad_token": specials.pad_token,
        "pad_id": specials.pad_id,
        "unk_token": specials.unk_token,
        "unk_id": specials.unk_id,
    }


HF_CONFIG_FILES = ("tokenizer_config.json", "special_tokens_map.json")
HF_TOKENIZER_CLASS = "PreTrainedTokenizerFast"


def hf_config_files(specials: SpecialTokens, model_max_length: int | None) -> dict[str, dict[str, Any]]:
    """What a trained tokenizer's directory needs for ``transformers.AutoTokenizer``: the contents
    of tokenizer_config.json and special_tokens_map.json (file name -> JSON object).

    The class is PreTrainedTokenizerFast for both files: transformers (5.x) reads a tokenizer.json
    as it is and builds the same tokenizer from a SentencePiece tokenizer.model, BPE or unigram
    (LlamaTokenizer would turn a unigram model into a BPE one). Nothing is added around the ids
    (no BOS / EOS: packing appends the EOS), special-token strings inside a text are encoded as
    text (``split_special_tokens``), decoding keeps the text's spaces. ``model_max_length``: the
    packed rows' seq_length (None: left out, transformers then sets no limit)."""
    roles = {
        f"{role}_token": name
        for role, name in (
            ("bos", specials.bos_token),
            ("eos", specials.eos_token),
            ("pad", specials.pad_token),
            ("unk", specials.unk_token),
        )
        if name is not None
    }
    config: dict[str, Any] = {
        "tokenizer_class": HF_TOKENIZER_CLASS,
        **roles,
        "add_bos_token": False,
        "add_eos_token": False,
        "split_special_tokens": True,
        "clean_up_tokenization_spaces": False,
    }
    if model_max_length is not None:
        config["model_max_length"] = int(model_max_length)
    return {HF_CONFIG_FILES[0]: config, HF_CONFIG_FILES[1]: roles}


def write_hf_config(directory: Path, specials: SpecialTokens, model_max_length: int | None) -> list[str]:
    """Write :func:`hf_config_files` into ``directory``; returns the names written."""
    files = hf_config_files(specials, model_max_length)
    for name, content in files.items():
        (directory / name).write_text(
            json.dumps(content, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    return list(files)


def roundtrip_difference(original: str, decoded: str, context: int = 20) -> dict[str, Any] | None:
    """None when equal, else where the texts first differ and a short excerpt of each."""
    if original == decoded:
        return None
    i = 0
    n = min(len(original), len(decoded))
    while i < n and original[i] == decoded[i]:
        i += 1
    lo = max(0, i - context)
    return {
        "position": i,
        "original": original[lo : i + context],
        "decoded": decoded[lo : i + context],
        "original_chars": len(original),
        "decoded_chars": len(decoded),
    }
