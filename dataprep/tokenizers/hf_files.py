"""The Hugging Face files that sit beside a tokenizer: tokenizer_config.json and
special_tokens_map.json. Read for the special tokens a tokenizer.json's directory names
(:func:`configured_specials`), written for a trained tokenizer so that
``transformers.AutoTokenizer`` encodes as the tokenize stage does (:func:`write_hf_config`),
copied as they are beside a supplied one (:func:`copy_hf_config`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from dataprep.tokenizers.base import SpecialTokens

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


def _config_token(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) and value else None


def configured_specials(directory: Path) -> dict[str, str]:
    """Role ("eos", "bos", "pad", "unk") -> token string named by ``directory``'s
    tokenizer_config.json ({} when there is none or it cannot be read)."""
    cfg = directory / HF_CONFIG_FILES[0]
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


def copy_hf_config(src_dir: Path, dst_dir: Path) -> list[str]:
    """Copy the Hugging Face files found in ``src_dir`` into ``dst_dir``, as they are (none is
    made up); returns the names copied."""
    present = [n for n in HF_CONFIG_FILES if (src_dir / n).is_file()]
    for name in present:
        shutil.copyfile(src_dir / name, dst_dir / name)
    return present


def found_hf_config(directory: Path) -> dict[str, list[str]]:
    """The manifest's ``tokenizer.hf`` entry of a supplied tokenizer: the Hugging Face files
    ``files`` in ``directory`` and the ``missing`` ones."""
    present = [n for n in HF_CONFIG_FILES if (directory / n).is_file()]
    return {"files": present, "missing": [n for n in HF_CONFIG_FILES if n not in present]}
