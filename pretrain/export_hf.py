"""Export a trained MindSpore checkpoint as a Hugging Face LLaMA checkpoint: model.safetensors
(float32) + config.json (``LlamaForCausalLM``) + the tokenizer files, for transformers and the
tools around it — the reverse of ``pretrain/convert_hf.py``.

    python pretrain/export_hf.py --checkpoint output/tiny --out hf/tiny
        [--step N] [--config CONFIG] [--tokenizer DIR]

``--checkpoint``: a training output directory (its newest complete checkpoint of rank 0, or
``--step N``), a checkpoint directory (``checkpoints/rank_0/step_NNNNNNNN``) or its train.ckpt.
The model section comes from the training output's config.resolved.json (``--config``: a training
config or config.resolved.json instead; its sizes must be explicit) and the tokenizer from the
prepared output the run trained on (its run.json names it; ``--tokenizer``: a directory holding a
tokenizer.json or tokenizer.model instead). The tokenizer's files are copied as they are
(tokenizer_config.json and special_tokens_map.json included when it has them); config.json takes
bos / eos / pad ids from it.

Names are the model's own (pretrain/model.py uses Hugging Face's), so the tensors are copied
bit for bit and ``convert_hf.py`` turns the export back into identical tensors; optimizer state
(moments, step) is left out. ``max_position_embeddings`` is the training seq_length. Refused,
with what and why: a model LlamaForCausalLM cannot express (q/k/v biases without an o_proj bias,
a type other than llama), a checkpoint of one tensor- or pipeline-parallel rank (it holds a
slice of the model), missing or wrongly shaped tensors, a tokenizer with more ids than the
embedding has rows. Training attended within documents (``document_attention``); Hugging Face
attends over the whole input, which is the same on one document. Peak memory: about twice the
float32 size of the model.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pretrain.model import WEIGHT_KEYS, ModelConfig, expected_parameters

HF_CONFIG_FILES = ("tokenizer_config.json", "special_tokens_map.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")
MODEL_KEYS = ("type", "vocab_size", "seq_length", *WEIGHT_KEYS, "document_attention", "init_std")


class ExportError(RuntimeError):
    """The checkpoint cannot be exported as asked; the message says what and why."""


@dataclass
class Source:
    """What one export reads: the checkpoint file, the training config, the tokenizer directory."""

    ckpt: Path
    config: dict[str, Any]
    tokenizer_dir: Path | None
    rank: int | None  # from a rank_<r> directory, if the checkpoint sits in one


def _newest_step(rank_dir: Path, step: int | None) -> Path:
    from pretrain.checkpoint import CheckpointError, list_checkpoints, read_state

    if step is not None:
        path = rank_dir / f"step_{step:08d}"
        try:
            read_state(path)
        except CheckpointError as e:
            raise ExportError(str(e)) from None
        return path
    found = list_checkpoints(rank_dir)
    if not found:
        raise ExportError(f"{rank_dir}: no complete checkpoint (step_NNNNNNNN with a valid state.json)")
    return found[-1]


def locate(checkpoint: str | Path, step: int | None = None) -> tuple[Path, Path | None, int | None]:
    """(train.ckpt, the training output directory if found, the rank) for ``checkpoint``: a
    training output directory, a step directory or a .ckpt file."""
    p = Path(checkpoint)
    if p.is_dir() and (p / "checkpoints").is_dir():
        ranks = sorted(d.name for d in (p / "checkpoints").iterdir() if d.name.startswith("rank_"))
        if not ranks:
            raise ExportError(f"{p}/checkpoints holds no rank_<r> directory")
        p = _newest_step(p / "checkpoints" / "rank_0", step)
    if p.is_dir():
        if not (p / "train.ckpt").is_file():
            raise ExportError(f"{p} holds no train.ckpt (give a training output, step directory or .ckpt)")
        from pretrain.checkpoint import CheckpointError, read_state

        try:
            read_state(p)  # train.ckpt against the sha256 its state.json records
        except CheckpointError as e:
            raise ExportError(str(e)) from None
        p = p / "train.ckpt"
    if not p.is_file():
        raise ExportError(f"{checkpoint} does not exist")
    rank = None
    output = None
    parents = p.resolve().parents
    if len(parents) > 3 and parents[1].name.startswith("rank_") and parents[2].name == "checkpoints":
        rank = int(parents[1].name[5:]) if parents[1].name[5:].isdigit() else None
        output = parents[3]
    return p, output, rank


def _read_config(path: Path) -> dict[str, Any]:
    """A training config: config.resolved.json as written by training, or a YAML training config."""
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    from pretrain.config import ConfigError, load_config

    try:
        return load_config(str(path)).to_dict()
    except ConfigError as e:
        raise ExportError(str(e)) from None


def find_source(
    checkpoint: str | Path,
    step: int | None = None,
    config: str | Path | None = None,
    tokenizer: str | Path | None = None,
) -> Source:
    """Resolve the checkpoint file, the training config and the tokenizer directory."""
    ckpt, output, rank = locate(checkpoint, step)
    if config is not None:
        cfg = _read_config(Path(config))
    elif output is not None and (output / "config.resolved.json").is_file():
        cfg = _read_config(output / "config.resolved.json")
    else:
        raise ExportError(
            f"{ckpt}: no config.resolved.json of its training output found; give --config (the training "
            "config with explicit vocab_size and seq_length, or config.resolved.json)"
        )
    tok_dir = Path(tokenizer) if tokenizer is not None else None
    if tok_dir is None and output is not None and (output / "run.json").is_file():
        record = json.loads((output / "run.json").read_text(encoding="utf-8"))
        data = record.get("data") or []
        if data and data[0].get("path"):
            candidate = Path(data[0]["path"]) / "tokenizer"
            tok_dir = candidate if candidate.is_dir() else None
    return Source(ckpt, cfg, tok_dir, rank)


def model_config(cfg: dict[str, Any]) -> ModelConfig:
    """The model the checkpoint holds; ExportError for what LlamaForCausalLM cannot express."""
    m = dict(cfg.get("model") or {})
    if m.get("type", "llama") != "llama":
        raise ExportError(f"model.type {m['type']!r} is not a LLaMA model: only 'llama' is exported")
    if m.get("qkv_bias"):
        raise ExportError(
            "model.qkv_bias: the model has biases on q/k/v but not on o_proj; LlamaForCausalLM's "
            "attention_bias puts one on all four (this is a Qwen2 layout), so it cannot be exported as LLaMA"
        )
    for key in ("vocab_size", "seq_length"):
        if not isinstance(m.get(key), int):
            raise ExportError(
                f"model.{key} is {m.get(key)!r}: give the config training resolved (config.resolved.json) "
                "or explicit sizes"
            )
    try:
        return ModelConfig.from_dict({k: m[k] for k in MODEL_KEYS if k in m})
    except ValueError as e:
        raise ExportError(str(e)) from None


def check_layout(cfg: dict[str, Any], rank: int | None) -> None:
    """Refuse the checkpoint of one rank of a tensor- or pipeline-parallel run: it holds a slice."""
    par = cfg.get("parallel") or {}
    tp, pp = int(par.get("tensor_parallel", 1)), int(par.get("pipeline_stages", 1))
    if tp * pp > 1:
        which = f"rank {rank}" if rank is not None else "one rank"
        raise ExportError(
            f"the checkpoint is that of {which} of a run with tensor_parallel={tp}, pipeline_stages={pp}: it "
            "holds only that rank's slice of the model; merge the ranks' checkpoints into one first "
            "(mindspore.transform_checkpoints), then export the merged file with --config"
        )


def read_checkpoint(path: Path, cfg: ModelConfig) -> dict[str, np.ndarray]:
    """The model's parameters from a MindSpore checkpoint (optimizer state left out), float32, in
    the model's order; ExportError naming what is missing or shaped otherwise."""
    import mindspore as ms

    try:
        params = ms.load_checkpoint(str(path))
    except Exception as e:  # MindSpore raises RuntimeError/ValueError with multi-line texts
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ExportError(f"{path}: cannot read the MindSpore checkpoint ({first})") from None
    expected = expected_parameters(cfg)
    missing = [n for n in expected if n not in params]
    wrong = [
        f"{n} {tuple(params[n].shape)} vs {want}"
        for n, want in expected.items()
        if n in params and tuple(params[n].shape) != want
    ]
    problems = []
    if missing:
        problems.append(f"{len(missing)} model tensors are missing (e.g. {', '.join(missing[:3])})")
    if wrong:
        problems.append(
            f"{len(wrong)} tensors have other shapes than the config's model ({'; '.join(wrong[:3])})"
        )
    model_like = [
        n for n in params if n.startswith(("model.", "lm_head.")) and n not in expected
    ]  # parameters, not optimizer state (adam_m.*, adam_v.*, global_step, ...)
    if model_like:
        problems.append(f"{len(model_like)} tensors the config's model does not have (e.g. {model_like[:3]})")
    if problems:
        raise ExportError(
            f"{path} does not hold the model its config describes: " + "; ".join(problems) + " (a slice "
            "of a parallel run, or another config?)"
        )
    out = {}
    for name in expected:
        value = params[name].asnumpy()
        if value.dtype != np.float32:
            raise ExportError(f"{path}: {name} is {value.dtype}, training keeps parameters in float32")
        out[name] = np.ascontiguousarray(value)
    return out


def _tokenizer_specials(tok_dir: Path) -> tuple[int, dict[str, int | None]]:
    """(the tokenizer's id range, its bos / eos / pad ids) as dataprep resolves them."""
    from dataprep.tokenizers.base import TokenizerError
    from dataprep.tokenizers.load import load_tokenizer

    try:
        tok = load_tokenizer(tok_dir)
        specials = tok.special_tokens()
    except TokenizerError as e:
        raise ExportError(f"--tokenizer: {e}") from None
    return tok.size, {"bos": specials.bos_id, "eos": specials.eos_id, "pad": specials.pad_id}


def hf_config(cfg: ModelConfig, ids: dict[str, int | None]) -> dict[str, Any]:
    """config.json of a LlamaForCausalLM with the model's shapes and numerics."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.seq_length,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "initializer_range": cfg.init_std,
        "bos_token_id": ids.get("bos"),
        "eos_token_id": ids.get("eos"),
        "pad_token_id": ids.get("pad"),
        "torch_dtype": "float32",
        "use_cache": True,
    }


def export(source: Source, out: str | Path, log: Any = print) -> dict[str, Any]:
    """Write ``out`` (model.safetensors, config.json, the tokenizer's files); returns config.json's
    content. ExportError (one line) for anything refused; nothing is written then."""
    from safetensors.numpy import save_file

    check_layout(source.config, source.rank)
    cfg = model_config(source.config)
    if source.tokenizer_dir is None:
        raise ExportError(
            f"{source.ckpt}: no tokenizer found (the run's run.json names no prepared output holding "
            "tokenizer/); give --tokenizer DIR"
        )
    size, ids = _tokenizer_specials(source.tokenizer_dir)
    if size > cfg.vocab_size:
        raise ExportError(
            f"the tokenizer in {source.tokenizer_dir} has {size} ids, the model's embedding {cfg.vocab_size} "
            "rows: it is not the tokenizer this model was trained with"
        )
    tensors = read_checkpoint(source.ckpt, cfg)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = hf_config(cfg, ids)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    copied = []
    for name in (*TOKENIZER_FILES, *HF_CONFIG_FILES):
        if (source.tokenizer_dir / name).is_file():
            shutil.copyfile(source.tokenizer_dir / name, out / name)
            copied.append(name)
    log(
        f"export {source.ckpt} -> {out}: {len(tensors)} tensors, "
        f"{sum(t.size for t in tensors.values()):,} parameters (float32), config.json (LlamaForCausalLM), "
        f"tokenizer files {', '.join(copied)}"
    )
    if not any(n in copied for n in HF_CONFIG_FILES):
        log(
            f"note: {source.tokenizer_dir} has no tokenizer_config.json: transformers' AutoTokenizer will "
            "find no eos/bos/pad/unk tokens there (config.json holds their ids)"
        )
    if cfg.document_attention:
        log(
            "note: the model was trained attending within each document of a packed row; transformers "
            "attends over the whole input (the same on one document)"
        )
    return config


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--checkpoint", required=True, help="training output directory, step directory or train.ckpt"
    )
    ap.add_argument(
        "--out", required=True, help="directory to write (model.safetensors, config.json, tokenizer)"
    )
    ap.add_argument("--step", type=int, help="with a training output directory: this step, not the newest")
    ap.add_argument("--config", help="training config or config.resolved.json (default: the run's own)")
    ap.add_argument("--tokenizer", help="tokenizer directory (default: the prepared output's tokenizer/)")
    args = ap.parse_args(argv)
    try:
        export(find_source(args.checkpoint, args.step, args.config, args.tokenizer), args.out)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
