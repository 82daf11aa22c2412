"""Training configuration: a YAML file with the sections practitioners know from MindFormers
(model / train / optimizer / lr_schedule / parallel / checkpoint / eval / monitor), validated up front.

Every key has a default here except the model shape; unknown keys are errors (a typo must not be
silently ignored). ``model.vocab_size`` and ``model.seq_length`` may be ``auto`` (take them from
the data manifest); explicit values are checked against the manifest.

Nothing here imports MindSpore.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

DEFAULTS: dict[str, Any] = {
    "seed": 1234,
    # several prepared outputs blended by weight (pretrain/blend.py): [{path, weight}, ...]; empty:
    # the one output given with --data
    "data": [],
    "model": {
        "type": "llama",
        "vocab_size": "auto",
        "seq_length": "auto",
        "hidden_size": 64,
        "num_layers": 2,
        "num_heads": 4,
        "num_kv_heads": None,
        "intermediate_size": None,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "qkv_bias": False,
        "document_attention": True,
        "recompute": False,
        "init_std": 0.02,
        "init_from": None,  # a MindSpore checkpoint of the model (e.g. made by convert_hf.py)
    },
    "train": {
        "steps": 100,
        "batch_size": 4,  # micro-batch rows per data-parallel rank
        "grad_accumulation_steps": 1,
        "amp_level": "O0",  # O0: all float32 (debugging); O2: float16 compute + dynamic loss scale
        "loss_scale": {"init": 65536.0, "factor": 2.0, "window": 1000, "max_consecutive_overflows": 50},
        "grad_clip": 1.0,  # global-norm clipping; 0 disables
        "mode": "jit",  # jit (graph-compiled steps) or pynative (op by op, for debugging)
        "shuffle": True,
        "data_format": "auto",  # auto | bin | mindrecord
        "split": "train",
        "log_interval": 1,
        "prefetch": 4,  # steps of batches prepared ahead by the loader thread
        # mask the label that follows each document end (the next document's first token); as
        # Megatron-LM's --eod-mask-loss, off by default
        "mask_cross_document_label": False,
        # check each shard file's size and sha256 against the manifest before its rows are first
        # read (in the background); false (or run.py --no-verify-shards) checks sizes only
        "verify_shards": True,
    },
    "optimizer": {
        "type": "adamw",  # adamw | lamb
        "beta1": 0.9,
        "beta2": 0.95,
        "eps": 1e-8,
        "weight_decay": 0.1,
    },
    "lr_schedule": {
        "type": "cosine",  # cosine | wsd | constant
        "learning_rate": 3e-4,
        "min_lr": 3e-5,
        "warmup_steps": 0,
        "warmup_ratio": None,  # fraction of train.steps; overrides warmup_steps when set
        "decay_ratio": 0.1,  # wsd: final fraction of steps spent decaying
        "total_steps": None,  # None: train.steps
    },
    "parallel": {
        "data_parallel": 1,
        "tensor_parallel": 1,
        "pipeline_stages": 1,
        "micro_batch_num": 1,  # pipeline micro-batches per step (PipelineCell; Ascend/GPU only)
        "optimizer_shard": False,  # ZeRO: shard optimizer state across dp (parallel optimizer; Ascend/GPU)
    },
    "checkpoint": {
        "dir": None,  # None: <output>/checkpoints
        "save_interval": 0,  # steps; 0: only at the end
        "keep_last": 3,
    },
    "eval": {
        "split": "validation",
        "interval": 0,  # steps; 0 disables periodic eval
        "max_batches": 8,
    },
    "monitor": {
        # gradient-norm spike: norm > factor x median of the last `window` applied updates' norms
        # (checked once min_history norms are known); policy warn (log, apply), skip (do not apply
        # the update; the batch is consumed), stop (do not apply, exit 1), off
        "grad_norm_spike": {"policy": "warn", "factor": 5.0, "window": 50, "min_history": 10},
        "data_wait_alarm": 0.15,  # warn when waiting for data takes more than this share of step time
        "peak_flops": None,  # peak FLOP/s of one device (float); MFU is reported only when set
        # with blended data or a mixed output: the loss per source too (one extra forward pass of
        # each micro-batch per source present in it)
        "loss_by_source": True,
    },
    "overfit": {
        "rows": 4,  # rows of the tiny slice trained on repeatedly
        "steps": 150,
        "max_loss": 1.0,  # the check passes when the final loss is below this
    },
}

# Keys that may change between a run and its resumption (they do not change the trajectory). The
# layout keys (parallel.*, train.batch_size, train.grad_accumulation_steps) may change too as long as
# the global batch stays (see global_batch); tensor/pipeline split and optimizer sharding are
# checked separately on resume (they change how checkpoints are sliced).
RESUMABLE_KEYS = {
    ("train", "batch_size"),
    ("train", "grad_accumulation_steps"),
    ("parallel", "data_parallel"),
    ("parallel", "tensor_parallel"),
    ("parallel", "pipeline_stages"),
    ("parallel", "micro_batch_num"),
    ("parallel", "optimizer_shard"),
    ("monitor", "data_wait_alarm"),
    ("monitor", "peak_flops"),
    ("monitor", "loss_by_source"),
    ("monitor", "grad_norm_spike"),  # e.g. stop on a spike, inspect, resume with policy skip
    ("train", "log_interval"),
    ("train", "verify_shards"),
    ("train", "prefetch"),
    ("train", "mode"),
    ("checkpoint", "dir"),
    ("checkpoint", "save_interval"),
    ("checkpoint", "keep_last"),
    ("eval", "interval"),
    ("eval", "max_batches"),
    ("model", "init_from"),
    ("model", "recompute"),
    ("overfit", "rows"),
    ("overfit", "steps"),
    ("overfit", "max_loss"),
}


class ConfigError(ValueError):
    """The config is invalid or does not match the data; the message says what to change."""


def _merge(base: dict[str, Any], over: dict[str, Any], path: str = "") -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        where = f"{path}{k}"
        if k not in base:
            raise ConfigError(f"unknown config key {where!r} (known here: {sorted(base)})")
        if isinstance(base[k], dict):
            if not isinstance(v, dict):
                raise ConfigError(f"config key {where!r} must be a mapping")
            out[k] = _merge(base[k], v, where + ".")
        else:
            out[k] = v
    return out


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Defaults ← YAML file ← overrides, validated. Raises ConfigError with the offending key."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"cannot read config {path}: {e}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"config {path} must be a YAML mapping")
    cfg = _merge(DEFAULTS, raw)
    if overrides:
        cfg = _merge(cfg, overrides)
    validate(cfg)
    return cfg


def validate(cfg: dict[str, Any]) -> None:
    t, o, s, p = cfg["train"], cfg["optimizer"], cfg["lr_schedule"], cfg["parallel"]
    problems = []
    data = cfg["data"]
    if not isinstance(data, list):
        problems.append("data must be a list of {path, weight}")
    else:
        for i, d in enumerate(data):
            if not isinstance(d, dict) or set(d) - {"path", "weight"} or "path" not in d:
                problems.append(f"data[{i}] must be a mapping {{path, weight}}")
                continue
            w = d.get("weight", 1.0)
            if isinstance(w, bool) or not isinstance(w, int | float) or w <= 0:
                problems.append(f"data[{i}].weight must be a positive number")
            d["weight"] = float(w)

    def positive_int(section: str, key: str, v: Any) -> None:
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            problems.append(f"{section}.{key} must be a positive integer, got {v!r}")

    for k in ("steps", "batch_size", "grad_accumulation_steps", "log_interval", "prefetch"):
        positive_int("train", k, t[k])
    for k in ("data_parallel", "tensor_parallel", "pipeline_stages", "micro_batch_num"):
        positive_int("parallel", k, p[k])
    for k in ("vocab_size", "seq_length"):
        v = cfg["model"][k]
        if v != "auto":
            positive_int("model", k, v)
    if t["amp_level"] not in ("O0", "O2"):
        problems.append(f"train.amp_level must be O0 or O2, got {t['amp_level']!r}")
    if t["mode"] not in ("jit", "pynative"):
        problems.append(f"train.mode must be jit or pynative, got {t['mode']!r}")
    from dataprep.formats.registry import all_formats

    data_formats = ["auto", *(f.name for f in all_formats())]
    if t["data_format"] not in data_formats:
        problems.append(
            f"train.data_format must be {', '.join(data_formats[:-1])} or {data_formats[-1]}, "
            f"got {t['data_format']!r}"
        )
    if o["type"] not in ("adamw", "lamb"):
        problems.append(f"optimizer.type must be adamw or lamb, got {o['type']!r}")
    if not 0 <= o["beta1"] < 1 or not 0 <= o["beta2"] < 1:
        problems.append("optimizer.beta1 and beta2 must be in [0, 1)")
    if s["type"] not in ("cosine", "wsd", "constant"):
        problems.append(f"lr_schedule.type must be cosine, wsd or constant, got {s['type']!r}")
    if float(s["learning_rate"]) <= 0:
        problems.append("lr_schedule.learning_rate must be positive")
    if not 0 <= float(s["decay_ratio"]) <= 1:
        problems.append("lr_schedule.decay_ratio must be in [0, 1]")
    if float(t["grad_clip"]) < 0:
        problems.append("train.grad_clip must be >= 0 (0 disables clipping)")
    if p["pipeline_stages"] > 1 and t["grad_accumulation_steps"] != 1:
        problems.append(
            "with pipeline_stages > 1 the micro-batches of a step are parallel.micro_batch_num "
            "(MindSpore's PipelineCell); set train.grad_accumulation_steps: 1"
        )
    if p["pipeline_stages"] > 1 and p["micro_batch_num"] < p["pipeline_stages"]:
        problems.append(
            f"parallel.micro_batch_num {p['micro_batch_num']} must be >= pipeline_stages "
            f"{p['pipeline_stages']}"
        )
    spike = cfg["monitor"]["grad_norm_spike"]
    if spike["policy"] not in ("off", "warn", "skip", "stop"):
        problems.append(
            f"monitor.grad_norm_spike.policy must be off, warn, skip or stop, got {spike['policy']!r}"
        )
    if not float(spike["factor"]) > 1:
        problems.append("monitor.grad_norm_spike.factor must be > 1")
    for k in ("window", "min_history"):
        positive_int("monitor.grad_norm_spike", k, spike[k])
    if not 0 < float(cfg["monitor"]["data_wait_alarm"]) <= 1:
        problems.append("monitor.data_wait_alarm must be in (0, 1]")
    peak = cfg["monitor"]["peak_flops"]
    if peak is not None and not (isinstance(peak, int | float) and peak > 0):
        problems.append(f"monitor.peak_flops must be a positive number of FLOP/s or null, got {peak!r}")
    if problems:
        raise ConfigError("invalid config: " + "; ".join(problems))


def micro_batches_per_step(cfg: dict[str, Any]) -> int:
    """Micro-batches per optimizer step and dp rank: grad_accumulation_steps, or micro_batch_num
    under pipeline parallelism."""
    p = cfg["parallel"]
    return p["micro_batch_num"] if p["pipeline_stages"] > 1 else cfg["train"]["grad_accumulation_steps"]


def global_batch(cfg: dict[str, Any]) -> int:
    """Rows per optimizer step over all data-parallel ranks: dp x batch_size x micro-batches."""
    return cfg["parallel"]["data_parallel"] * cfg["train"]["batch_size"] * micro_batches_per_step(cfg)


def resolve_against_manifest(
    cfg: dict[str, Any], shards: dict[str, Any], checkpoint_vocab: int | None = None
) -> None:
    """Fill ``auto`` model sizes from the manifest's shard section; raise on any mismatch.

    ``checkpoint_vocab``: embedding rows of the ``init_from`` checkpoint. ``vocab_size: auto`` then
    takes the larger of the shards' vocabulary and the checkpoint's rows (a checkpoint padded beyond
    its tokenizer keeps its rows; a shards' tokenizer that extends the checkpoint's gets new rows);
    an explicit value may also equal the checkpoint's rows when they cover the shards' ids.
    """
    m = cfg["model"]
    for key in ("seq_length", "vocab_size"):
        data_value = shards.get(key)
        if data_value is None:
            raise ConfigError(f"manifest shards section has no {key!r}; is it a dataprep output?")
        data_value = int(data_value)
        rows = checkpoint_vocab if key == "vocab_size" and checkpoint_vocab else None
        if m[key] == "auto":
            m[key] = max(data_value, rows or 0)
            continue
        if rows is not None and int(m[key]) < rows:
            raise ConfigError(
                f"model.vocab_size = {m[key]} is smaller than the {rows} embedding rows of model.init_from: "
                f"set model.vocab_size: {rows} or auto (the shards' ids < {data_value} fit, the extra rows "
                "stay)"
            )
        if int(m[key]) != data_value and not (rows is not None and int(m[key]) == rows >= data_value):
            hint = (
                "rows hold seq_length + 1 tokens, fixed when the data was packed: repack with "
                "pack.seq_length or"
                if key == "seq_length"
                else "the embedding must match the tokenizer's vocabulary:"
            )
            raise ConfigError(
                f"model.{key} = {m[key]} but the data was prepared with {key} = {data_value} "
                f"({hint} set model.{key}: {data_value} or auto)"
            )


def trajectory_hash(cfg: dict[str, Any], data_identity: Any) -> str:
    """sha256 over everything that determines the training trajectory: not logging, checkpointing
    or the parallel layout, but the global batch."""
    pruned = copy.deepcopy(cfg)
    for section, key in RESUMABLE_KEYS:
        pruned.get(section, {}).pop(key, None)
    pruned["global_batch"] = global_batch(cfg)
    blob = json.dumps({"config": pruned, "data": data_identity}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def diff_keys(a: dict[str, Any], b: dict[str, Any], path: str = "") -> list[str]:
    """Dotted keys whose values differ between two resolved configs."""
    out = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += diff_keys(va, vb, f"{path}{k}.")
        elif va != vb:
            out.append(f"{path}{k}: {va!r} -> {vb!r}")
    return out
