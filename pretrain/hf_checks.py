"""Checks before continuing from Hugging Face weights: does config.json describe the model the
training config builds, and is the tokenizer next to the checkpoint the one the shards were made
with?

Config fields compared (config.json name -> training config ``model`` key):

* shape, never overridable (the weights would not fit): hidden_size, num_hidden_layers -> num_layers,
  num_attention_heads -> num_heads, num_key_value_heads -> num_kv_heads, intermediate_size,
  head_dim (when given) -> hidden_size / num_heads;
* numerics, refused unless named in ``allow`` (``--allow-config-mismatch``): rope_theta,
  rms_norm_eps, hidden_act (the model is SwiGLU: silu), tie_word_embeddings, attention_bias ->
  qkv_bias, max_position_embeddings (must be >= seq_length: longer rows use positions the
  checkpoint never saw);
* unsupported, always refused: model_type outside the LLaMA family, rope_scaling, mlp_bias.

Tokenizer: the checkpoint directory's tokenizer.json (or tokenizer.model) against the file the
manifest names, id by id (vocabulary digests in the message); a shards' tokenizer that extends the
checkpoint's (same tokens at every id the checkpoint has, more after) is accepted: new embedding
rows start at the mean of the old ones. Special tokens: eos/bos/pad/unk ids from
tokenizer_config.json, special_tokens_map.json or config.json against the manifest's ids; a role
both sides name must have the same id.

Nothing here imports MindSpore.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUPPORTED_TYPES = ("llama", "mistral", "qwen2", "internlm2", "yi")
OVERRIDABLE = (
    "rope_theta",
    "rms_norm_eps",
    "hidden_act",
    "tie_word_embeddings",
    "qkv_bias",
    "max_position_embeddings",
)
SPECIAL_ROLES = ("eos", "bos", "pad", "unk")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")


@dataclass
class InitSource:
    """What ``model.init_from`` points at: a Hugging Face directory (``hf_config`` set) or a
    MindSpore .ckpt file (``hf_config`` from a config.json beside it, if any)."""

    path: Path
    kind: str  # "hf" | "ckpt"
    hf_config: dict[str, Any] | None
    checkpoint_dir: Path  # where config.json / tokenizer files are looked for

    @property
    def vocab_rows(self) -> int | None:
        """Embedding rows of the checkpoint as config.json states them (None if unknown)."""
        return (
            int(self.hf_config["vocab_size"]) if self.hf_config and "vocab_size" in self.hf_config else None
        )


class CheckError(ValueError):
    """init_from cannot be used as configured; one line naming what differs."""


def open_init_source(path: str | Path) -> InitSource:
    """Classify ``model.init_from``; CheckError when it is neither kind or config.json is unreadable."""
    p = Path(path)
    if p.is_dir():
        if not (p / "config.json").is_file() or not any(p.glob("*.safetensors")):
            raise CheckError(
                f"model.init_from {p}: a directory must hold a Hugging Face checkpoint (config.json and "
                "*.safetensors)"
            )
        return InitSource(p, "hf", read_hf_config(p / "config.json"), p)
    if p.is_file():
        beside = p.parent / "config.json"
        return InitSource(p, "ckpt", read_hf_config(beside) if beside.is_file() else None, p.parent)
    raise CheckError(f"model.init_from {p} does not exist (a Hugging Face directory or a MindSpore .ckpt)")


def read_hf_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CheckError(f"cannot read {path}: {e}") from None
    if not isinstance(data, dict):
        raise CheckError(f"{path} is not a JSON object")
    return data


def _num_differs(a: float, b: float) -> bool:
    return not math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)


def compare_config(hf: dict[str, Any], model: dict[str, Any]) -> tuple[list[str], list[tuple[str, str]]]:
    """(always-refused differences, [(overridable field, difference)]) between a config.json and a
    training config's resolved ``model`` section."""
    hard: list[str] = []
    soft: list[tuple[str, str]] = []
    mtype = hf.get("model_type", "llama")
    if mtype not in SUPPORTED_TYPES:
        hard.append(f"model_type {mtype!r} is not a LLaMA-family type {SUPPORTED_TYPES}")
    if hf.get("rope_scaling"):
        hard.append(f"rope_scaling {hf['rope_scaling']} is not supported by pretrain/model.py")
    if hf.get("mlp_bias"):
        hard.append("mlp_bias true is not supported by pretrain/model.py")
    heads = int(hf.get("num_attention_heads", 0))
    ours_heads = model.get("num_heads")
    shape = [
        ("hidden_size", hf.get("hidden_size"), model.get("hidden_size")),
        ("num_hidden_layers", hf.get("num_hidden_layers"), model.get("num_layers")),
        ("num_attention_heads", heads, ours_heads),
        (
            "num_key_value_heads",
            hf.get("num_key_value_heads") or heads,
            model.get("num_kv_heads") or ours_heads,
        ),
        ("intermediate_size", hf.get("intermediate_size"), model.get("intermediate_size")),
    ]
    if hf.get("head_dim") is not None and ours_heads and model.get("hidden_size"):
        shape.append(("head_dim", hf["head_dim"], model["hidden_size"] // ours_heads))
    for name, theirs, ours in shape:  # a key the training config leaves unset (None) is not compared
        if theirs is not None and ours is not None and int(theirs) != int(ours):
            hard.append(f"{name}: config.json {theirs}, training config {ours}")
    for name, key, default in (("rope_theta", "rope_theta", 10000.0), ("rms_norm_eps", "rms_norm_eps", 1e-6)):
        if model.get(name) is None:
            continue
        theirs, ours = float(hf.get(key, default)), float(model[name])
        if _num_differs(theirs, ours):
            soft.append((name, f"{name}: config.json {theirs!r}, training config {ours!r}"))
    act = hf.get("hidden_act", "silu")
    if act != "silu":
        soft.append(("hidden_act", f"hidden_act: config.json {act!r}, the model computes 'silu' (SwiGLU)"))
    for name, key, default in (
        ("tie_word_embeddings", "tie_word_embeddings", False),
        ("qkv_bias", "attention_bias", mtype == "qwen2"),
    ):
        if model.get(name) is None:
            continue
        theirs_b, ours_b = bool(hf.get(key, default)), bool(model[name])
        if theirs_b != ours_b:
            soft.append((name, f"{key}: config.json {theirs_b}, training config {name} {ours_b}"))
    max_pos = hf.get("max_position_embeddings")
    seq = model.get("seq_length")
    if max_pos is not None and isinstance(seq, int) and seq > int(max_pos):
        soft.append(
            (
                "max_position_embeddings",
                f"max_position_embeddings: config.json {max_pos} < training seq_length {model['seq_length']}",
            )
        )
    return hard, soft


def check_config(hf: dict[str, Any], model: dict[str, Any], allow: set[str], where: Path) -> list[str]:
    """Raise CheckError (one line) for differences not allowed; return the allowed ones (to log)."""
    unknown = sorted(allow - set(OVERRIDABLE))
    if unknown:
        raise CheckError(
            f"--allow-config-mismatch {','.join(unknown)}: only {', '.join(OVERRIDABLE)} can be allowed"
        )
    hard, soft = compare_config(hf, model)
    refused = hard + [text for name, text in soft if name not in allow]
    if refused:
        overridable = sorted({name for name, _ in soft if name not in allow})
        hint = (
            f"; set the training config to the checkpoint's values, or pass --allow-config-mismatch "
            f"{','.join(overridable)} to train with the config's"
            if overridable
            else ""
        )
        raise CheckError(
            f"model.init_from {where}: config.json does not match the model: {'; '.join(refused)}{hint}"
        )
    return [text for name, text in soft if name in allow]


# ---------------------------------------------------------------- tokenizer
def _vocabulary(path: Path) -> list[str | None]:
    """Token string of every id of a tokenizer file (None where an id has none)."""
    from dataprep.tokenizers.base import TokenizerError
    from dataprep.tokenizers.load import load_tokenizer

    try:
        tok = load_tokenizer(path)
    except TokenizerError as e:
        raise CheckError(str(e)) from None
    return [tok.id_to_token(i) for i in range(tok.size)]


def vocab_digest(vocab: list[str | None]) -> str:
    """sha256 over "id<TAB>token" lines: equal exactly when the id -> token maps are equal."""
    h = hashlib.sha256()
    for i, t in enumerate(vocab):
        h.update(f"{i}\t{t}\n".encode())
    return h.hexdigest()


def _token_name(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def hf_special_ids(checkpoint_dir: Path, vocab: list[str | None] | None) -> dict[str, tuple[str | None, int]]:
    """{role: (token, id)} of the special tokens a Hugging Face checkpoint directory declares."""
    index = {t: i for i, t in enumerate(vocab)} if vocab else {}
    out: dict[str, tuple[str | None, int]] = {}
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        f = checkpoint_dir / name
        if not f.is_file():
            continue
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        decoder = {
            _token_name(v): int(k)
            for k, v in (data.get("added_tokens_decoder") or {}).items()
            if _token_name(v)
        }
        for role in SPECIAL_ROLES:
            token = _token_name(data.get(f"{role}_token"))
            if role in out or token is None:
                continue
            tid = index.get(token, decoder.get(token))
            if tid is not None:
                out[role] = (token, tid)
    cfg = checkpoint_dir / "config.json"
    if cfg.is_file():
        data = read_hf_config(cfg)
        for role in SPECIAL_ROLES:
            tid = data.get(f"{role}_token_id")
            if isinstance(tid, list):  # several EOS ids (chat models): the first is the document end
                tid = tid[0] if tid else None
            if role not in out and isinstance(tid, int):
                out[role] = (vocab[tid] if vocab and 0 <= tid < len(vocab) else None, tid)
    return out


def check_tokenizer(checkpoint_dir: Path, manifest_tokenizer: dict[str, Any], data_dir: Path) -> list[str]:
    """Raise CheckError (one line) when the checkpoint's tokenizer is not the shards' (vocabulary
    or special-token ids); return notes to log (what was compared, an accepted extension)."""
    notes: list[str] = []
    theirs_file = next((checkpoint_dir / n for n in TOKENIZER_FILES if (checkpoint_dir / n).is_file()), None)
    ours_file = data_dir / manifest_tokenizer["file"] if manifest_tokenizer.get("file") else None
    theirs = _vocabulary(theirs_file) if theirs_file else None
    problems = []
    if theirs is not None and ours_file is not None and ours_file.is_file():
        ours = _vocabulary(ours_file)
        common = min(len(theirs), len(ours))
        differ = [i for i in range(common) if theirs[i] != ours[i]]
        if differ:
            examples = ", ".join(f"id {i}: {theirs[i]!r} vs {ours[i]!r}" for i in differ[:3])
            problems.append(
                f"the vocabularies differ at {len(differ)} of {common} ids ({examples}; vocab sha256 "
                f"{vocab_digest(theirs)[:12]} vs {vocab_digest(ours)[:12]})"
            )
        elif len(ours) > len(theirs):
            notes.append(
                f"tokenizer: the shards' tokenizer extends the checkpoint's ({len(theirs)} -> {len(ours)} "
                "ids, the first ones identical)"
            )
        else:
            notes.append(
                f"tokenizer: the checkpoint's {theirs_file.name} has the shards' vocabulary ({len(ours)} ids)"
            )
    specials = hf_special_ids(checkpoint_dir, theirs)
    for role in SPECIAL_ROLES:
        ours_id = manifest_tokenizer.get(f"{role}_id")
        if role in specials and ours_id is not None and specials[role][1] != int(ours_id):
            token, tid = specials[role]
            named = manifest_tokenizer.get(f"{role}_token")
            problems.append(
                f"{role}: the checkpoint's tokenizer has {token!r} = {tid}, the shards were packed with "
                f"{role}_id {ours_id}" + (f" ({named!r})" if named else "")
            )
    if problems:
        raise CheckError(
            f"model.init_from {checkpoint_dir}: its tokenizer is not the one the shards were made with: "
            + "; ".join(problems)
            + " (tokenize with the checkpoint's tokenizer, or train from scratch)"
        )
    if specials:
        notes.append(
            "tokenizer: special ids agree with the manifest ("
            + ", ".join(f"{r} {specials[r][1]}" for r in SPECIAL_ROLES if r in specials)
            + ")"
        )
    return notes
