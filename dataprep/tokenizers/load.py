"""Loading a tokenizer offline: a Hugging Face ``tokenizer.json`` or a SentencePiece ``.model``.

:func:`load_tokenizer` accepts either file, or a directory holding one of them, and returns a
:class:`~dataprep.tokenizers.base.TextTokenizer` (cached per process). Nothing is ever
downloaded. :func:`describe` gives the manifest's "tokenizer" entry; :func:`decode_texts` the
texts of token ids.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.tokenizers.base import SpecialTokens, TextTokenizer, TokenizerError
from dataprep.tokenizers.engines import HFTokenizer, SentencePieceTokenizer

HF_FILE = "tokenizer.json"
SPM_FILE = "tokenizer.model"


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


def check_engines(job: dict[str, Any]) -> dict[str, Any]:
    """The run's engine check (runs in any process; see
    :meth:`dataprep.tokenizers.engines.HFTokenizer.check_engine`): job ``path`` (the tokenizer
    file the tasks load, so this process keeps what it built for them in its cache), ``engine``
    (the mode), ``texts``. Returns the verdict."""
    tok = load_tokenizer(job["path"])
    tok.use_engine(job["engine"])
    return tok.check_engine(job["texts"])


def warm_tokenizer(path: str, _: Any = None) -> None:
    """Load the tokenizer.json at ``path`` into this process's cache (:func:`load_tokenizer`)
    and start building its fastokens engine in the background at the lowest priority
    (:meth:`HFTokenizer.warm_in_background`): a warm-up, run by each worker ahead of the
    tokenize pass. Changes no output: the run's engine verdict still applies at the first
    task."""
    tok = load_tokenizer(path)
    if isinstance(tok, HFTokenizer):
        tok.warm_in_background()


def decode_texts(path: str | Path, ids: Iterable[np.ndarray]) -> list[str]:
    """The text of each array of token ``ids`` (e.g. a packed document's tokens without its EOS),
    decoded by the tokenizer at ``path`` (loaded once per process: :func:`load_tokenizer`)."""
    tok = load_tokenizer(path)
    return [tok.decode(i) for i in ids]


def describe_file(job: dict[str, Any]) -> dict[str, Any]:
    """The manifest's "tokenizer" entry of a tokenizer file (runs in any process): job ``path``,
    ``engine`` (the tokenize stage's mode, refused early for a tokenizer that cannot have it),
    ``eos_token`` / ``pad_token`` (as the stage's parameters give them), ``file`` (its name in
    OUT), ``model_vocab_size``. TokenizerError as :func:`describe` and :meth:`special_tokens`."""
    tok = load_tokenizer(job["path"])
    if tok.kind != "hf":
        tok.use_engine(job["engine"])  # fails fast on an engine this tokenizer cannot have
    specials = tok.special_tokens(job["eos_token"], job["pad_token"])
    return describe(tok, specials, job["file"], job["model_vocab_size"])


def describe_and_check(job: dict[str, Any]) -> dict[str, Any]:
    """:func:`describe_file` and, for a tokenizer.json, :func:`check_engines` in one process (the
    tokenizers library is loaded once, for both): {"info": entry, "verdict": verdict or None}."""
    info = describe_file(job)
    return {"info": info, "verdict": check_engines(job) if info["kind"] == "hf" else None}
