"""Convert a Hugging Face LLaMA-family checkpoint (config.json + *.safetensors) into a MindSpore
checkpoint for ``model.init_from`` — continue pretraining from published weights.

    python pretrain/convert_hf.py --hf HF_DIR --out model.ckpt [--config pretrain/configs/x.yaml]
        [--vocab-size N] [--allow-partial] [--write-config model.yaml] [--allow-config-mismatch F,..]

(Training can also take HF_DIR itself as ``model.init_from``: it converts in memory and checks the
tokenizer beside it against the shards' manifest.)

Tensors are read with the safetensors library (never pickle); BF16 tensors are widened to float32.
Names map one to one (the model uses Hugging Face names, see pretrain/model.py). The report counts
matched / missing / unexpected / shape-mismatched parameters, and the conversion refuses anything
short of a full match unless ``--allow-partial`` is given: a silently re-initialised layer costs
days of training. Vocabulary extension (target vocab_size larger than the checkpoint's, e.g. a
tokenizer with added tokens) initialises the new embedding and lm_head rows with the mean of the
old rows. With ``--config``, config.json is compared with the training config's model section:
shapes, and numerics (rope_theta, rms_norm_eps, ...) unless ``--allow-config-mismatch`` names them
(pretrain/hf_checks.py); a mismatch exits 2. Peak memory is about the float32 size of the model.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pretrain.model import WEIGHT_KEYS, ModelConfig, expected_parameters

# Non-parameter buffers some exports carry; they are recomputed, never loaded.
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
VOCAB_ROWS = ("model.embed_tokens.weight", "lm_head.weight")
SUPPORTED_TYPES = ("llama", "mistral", "qwen2", "internlm2", "yi")


class ConversionError(RuntimeError):
    """The checkpoint does not fit the model; the message lists what differs."""


class ConfigMismatch(ConversionError):
    """config.json does not match the training config (exit code 2, like other config errors)."""


def model_config_from_hf(
    hf: dict[str, Any], vocab_size: int | None = None, seq_length: int = 2048, any_act: bool = False
) -> ModelConfig:
    """ModelConfig equivalent to a Hugging Face config.json (``vocab_size`` overrides for extension)."""
    mtype = hf.get("model_type", "llama")
    if mtype not in SUPPORTED_TYPES:
        raise ConversionError(f"model_type {mtype!r} is not a supported LLaMA-family type {SUPPORTED_TYPES}")
    if hf.get("rope_scaling"):
        raise ConversionError(f"rope_scaling {hf['rope_scaling']} is not supported by pretrain/model.py")
    if hf.get("hidden_act", "silu") != "silu" and not any_act:
        raise ConversionError(f"hidden_act {hf['hidden_act']!r} is not SwiGLU (silu)")
    heads = int(hf["num_attention_heads"])
    return ModelConfig(
        vocab_size=int(vocab_size or hf["vocab_size"]),
        seq_length=seq_length,
        hidden_size=int(hf["hidden_size"]),
        num_layers=int(hf["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(hf.get("num_key_value_heads") or heads),
        intermediate_size=int(hf["intermediate_size"]),
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        rope_theta=float(hf.get("rope_theta", 10000.0)),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
        qkv_bias=bool(hf.get("attention_bias", mtype == "qwen2")),
    )


def read_safetensors(hf_dir: Path) -> dict[str, np.ndarray]:
    """All tensors of a checkpoint directory (single file or sharded with an index), float32."""
    from safetensors import deserialize, safe_open

    index = hf_dir / "model.safetensors.index.json"
    if index.is_file():
        files = sorted({hf_dir / f for f in json.loads(index.read_text())["weight_map"].values()})
    else:
        files = sorted(hf_dir.glob("*.safetensors"))
    if not files:
        raise ConversionError(f"no .safetensors files in {hf_dir} (pickled .bin checkpoints are not read)")
    out: dict[str, np.ndarray] = {}
    for path in files:
        with safe_open(str(path), framework="np") as f:
            names = list(f.keys())
            bf16 = [n for n in names if f.get_slice(n).get_dtype() == "BF16"]
            for n in names:
                if n not in bf16:
                    out[n] = np.asarray(f.get_tensor(n), dtype=np.float32)
        if bf16:  # numpy has no bfloat16: take the raw bytes and widen (bf16 = top half of a float32)
            for n, t in deserialize(path.read_bytes()):
                if t["dtype"] == "BF16":
                    raw = np.frombuffer(bytes(t["data"]), dtype="<u2").astype(np.uint32) << 16
                    out[n] = raw.view(np.float32).reshape(t["shape"])
    return out


@dataclass
class MatchReport:
    matched: list[str] = field(default_factory=list)
    extended: list[str] = field(default_factory=list)  # vocabulary rows added (mean-initialised)
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)  # "name: checkpoint shape -> model shape"
    ignored: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched)

    def summary(self) -> str:
        lines = [
            f"matched {len(self.matched)} (of which vocabulary-extended {len(self.extended)}), "
            f"missing {len(self.missing)}, unexpected {len(self.unexpected)}, "
            f"shape-mismatched {len(self.mismatched)}, ignored buffers {len(self.ignored)}"
        ]
        for title, items in (
            ("missing", self.missing),
            ("unexpected", self.unexpected),
            ("shape-mismatched", self.mismatched),
        ):
            for item in items[:10]:
                lines.append(f"  {title}: {item}")
            if len(items) > 10:
                lines.append(f"  ... {len(items) - 10} more {title}")
        return "\n".join(lines)


def map_weights(
    tensors: dict[str, np.ndarray], cfg: ModelConfig
) -> tuple[dict[str, np.ndarray], MatchReport]:
    """Model parameters from checkpoint tensors, with the match report (nothing is refused here)."""
    expected = expected_parameters(cfg)
    report = MatchReport()
    params: dict[str, np.ndarray] = {}
    wrong_shape: set[str] = set()
    for name, value in tensors.items():
        if name.endswith(IGNORED_SUFFIXES):
            report.ignored.append(name)
            continue
        if name not in expected:
            report.unexpected.append(name)
            continue
        want = expected[name]
        if tuple(value.shape) == want:
            params[name] = value
            report.matched.append(name)
        elif (
            name in VOCAB_ROWS and value.ndim == 2 and value.shape[1] == want[1] and value.shape[0] < want[0]
        ):
            extra = np.repeat(value.mean(axis=0, keepdims=True), want[0] - value.shape[0], axis=0)
            params[name] = np.concatenate([value, extra]).astype(np.float32)
            report.matched.append(name)
            report.extended.append(name)
        else:
            report.mismatched.append(f"{name}: {tuple(value.shape)} -> {want}")
            wrong_shape.add(name)
    report.missing = [n for n in expected if n not in params and n not in wrong_shape]
    return params, report


def save_mindspore(params: dict[str, np.ndarray], out: Path) -> None:
    import mindspore as ms

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".tmp-{out.stem}.ckpt")  # save_checkpoint appends .ckpt to other names
    ms.save_checkpoint(
        [{"name": n, "data": ms.Tensor(v.astype(np.float32))} for n, v in params.items()], str(tmp)
    )
    tmp.replace(out)


def check_against_training_config(
    hf: dict[str, Any],
    model_section: dict[str, Any],
    allow: set[str] | None = None,
    where: Any = "config.json",
) -> list[str]:
    """Refuse (ConfigMismatch, one line) a config.json that does not describe the training config's
    model: shapes, and numerics such as rope_theta / rms_norm_eps unless ``allow`` names them (see
    pretrain/hf_checks.py). Returns the allowed differences."""
    from pretrain.hf_checks import CheckError, check_config

    try:
        allowed = check_config(hf, model_section, set(allow or ()), where)
    except CheckError as e:
        raise ConfigMismatch(str(e)) from None
    vocab = model_section.get("vocab_size")
    if isinstance(vocab, int) and vocab < int(hf["vocab_size"]):
        raise ConfigMismatch(
            f"model.vocab_size {vocab} is smaller than the checkpoint's {hf['vocab_size']} rows: shrinking a "
            "vocabulary drops trained rows"
        )
    return allowed


def convert(
    hf_dir: str | Path,
    out: str | Path,
    vocab_size: int | None = None,
    allow_partial: bool = False,
    training_model: dict[str, Any] | None = None,
    log: Any = print,
    allow_config_mismatch: set[str] | None = None,
) -> MatchReport:
    """Convert and write ``out``; raises ConversionError unless the match is complete (or allowed),
    ConfigMismatch when config.json does not match ``training_model`` (a training config's model
    section; ``vocab_size: auto`` there keeps the checkpoint's rows: training adds rows itself when
    the shards' vocabulary is larger)."""
    hf_dir = Path(hf_dir)
    try:
        hf = json.loads((hf_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConversionError(f"cannot read {hf_dir}/config.json: {e}") from None
    if vocab_size is None and training_model and isinstance(training_model.get("vocab_size"), int):
        vocab_size = training_model["vocab_size"]
    if vocab_size is not None and vocab_size < int(hf["vocab_size"]):
        raise ConversionError(
            f"target vocab_size {vocab_size} is smaller than the checkpoint's {hf['vocab_size']}: "
            "shrinking a vocabulary drops trained rows; use a tokenizer that extends the original"
        )
    if training_model:
        for text in check_against_training_config(hf, training_model, allow_config_mismatch, hf_dir):
            log(f"allowed difference: {text}")
    cfg = model_config_from_hf(hf, vocab_size, any_act="hidden_act" in (allow_config_mismatch or ()))
    tensors = read_safetensors(hf_dir)
    params, report = map_weights(tensors, cfg)
    log(f"convert {hf_dir} -> {out}: " + report.summary())
    if report.extended:
        log(
            f"vocabulary extended {hf['vocab_size']} -> {cfg.vocab_size}: new rows = mean of the old rows "
            f"({', '.join(report.extended)})"
        )
    if not report.complete and not allow_partial:
        raise ConversionError(
            "refusing a partial conversion (layers would be silently re-initialised); fix the model "
            "config, or pass --allow-partial to keep only the matched tensors"
        )
    save_mindspore(params, Path(out))
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hf", required=True, help="directory with config.json and *.safetensors")
    ap.add_argument("--out", required=True, help="MindSpore checkpoint to write (for model.init_from)")
    ap.add_argument("--config", help="training config to check the checkpoint against (model section)")
    ap.add_argument("--vocab-size", type=int, help="extend the vocabulary to this size (new rows = mean)")
    ap.add_argument(
        "--allow-partial", action="store_true", help="write even if tensors are missing/mismatched"
    )
    ap.add_argument("--write-config", help="write the matching model section as YAML to this path")
    ap.add_argument(
        "--allow-config-mismatch",
        default="",
        metavar="FIELD[,FIELD]",
        help="with --config: accept these numeric fields differing from config.json (rope_theta, ...)",
    )
    args = ap.parse_args(argv)
    training_model = None
    if args.config:
        from pretrain.config import ConfigError, load_config

        try:
            training_model = load_config(args.config).to_dict()["model"]
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    allow = {f.strip() for f in args.allow_config_mismatch.split(",") if f.strip()}
    try:
        report = convert(
            args.hf,
            args.out,
            args.vocab_size,
            args.allow_partial,
            training_model,
            allow_config_mismatch=allow,
        )
    except ConfigMismatch as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ConversionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.write_config:
        import yaml

        hf = json.loads((Path(args.hf) / "config.json").read_text(encoding="utf-8"))
        cfg = model_config_from_hf(hf, args.vocab_size)
        section = {k: getattr(cfg, k) for k in (*WEIGHT_KEYS, "vocab_size")}
        section["init_from"] = str(args.out)
        Path(args.write_config).write_text(
            yaml.safe_dump({"model": section}, sort_keys=False), encoding="utf-8"
        )
    print("ok" if report.complete else "written with a PARTIAL match (--allow-partial)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
