"""Training configuration: a YAML file with the sections practitioners know from MindFormers
(model / train / optimizer / lr_schedule / parallel / checkpoint / eval / monitor / overfit),
validated up front into typed sections (:class:`TrainingConfig`).

Every key has a default here except the model shape; unknown keys are errors (a typo must not be
silently ignored). ``model.vocab_size`` and ``model.seq_length`` may be ``auto`` (take them from
the data manifest); explicit values are checked against the manifest. Each field's unit, meaning
and default is the docstring under it. Values keep the type the YAML gave them (``grad_clip: 1``
stays the integer 1), so ``to_dict()`` (config.resolved.json, checkpoints, the trajectory hash) is
exactly the merged YAML.

Nothing here imports MindSpore.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


@dataclass
class DataSource:
    """One prepared output of a blend (pretrain/blend.py)."""

    path: str
    """Output directory of ``dataprep prepare`` (holds manifest.json)."""
    weight: float = 1.0
    """Relative share of the blend's samples (positive; normalised over the sources)."""


@dataclass
class ModelSection:
    """``model``: the LLaMA-family decoder (pretrain/model.py)."""

    type: str = "llama"
    """Architecture family; only ``llama`` is built."""
    vocab_size: int | str = "auto"
    """Embedding rows; ``auto``: the manifest's vocabulary (or init_from's rows when larger)."""
    seq_length: int | str = "auto"
    """Tokens per training row; ``auto``: the manifest's pack.seq_length (rows hold seq_length + 1)."""
    hidden_size: int = 64
    """Width of the residual stream."""
    num_layers: int = 2
    """Decoder layers."""
    num_heads: int = 4
    """Query heads (head dimension = hidden_size / num_heads, even)."""
    num_kv_heads: int | None = None
    """Key/value heads (grouped-query attention); None: num_heads."""
    intermediate_size: int | None = None
    """Width of the SwiGLU MLP; None: LLaMA's rounding of 8/3 x hidden_size."""
    rms_norm_eps: float = 1e-5
    """Epsilon of the RMSNorm layers."""
    rope_theta: float = 10000.0
    """Base of the rotary position frequencies."""
    tie_word_embeddings: bool = False
    """lm_head shares the embedding matrix."""
    qkv_bias: bool = False
    """Bias on the q/k/v projections (Qwen2-style)."""
    document_attention: bool = True
    """Attend only within a document (boundaries from the shards); false: causal over the row."""
    recompute: bool = False
    """Recompute activations in the backward pass (less memory, more compute)."""
    init_std: float = 0.02
    """Standard deviation of the normal initialisation of the weights."""
    init_from: str | None = None
    """A MindSpore checkpoint (e.g. made by convert_hf.py) or a Hugging Face directory to start
    from (continued pretraining); None: random initialisation."""


@dataclass
class LossScaleSection:
    """``train.loss_scale``: dynamic loss scaling under amp_level O2 (pretrain/optim.py)."""

    init: float = 65536.0
    """Initial scale of the loss."""
    factor: float = 2.0
    """The scale is divided by this on overflow and multiplied after ``window`` good steps."""
    window: int = 1000
    """Consecutive finite steps before the scale grows."""
    max_consecutive_overflows: int = 50
    """Overflow steps in a row after which the run stops as diverged."""


@dataclass
class TrainSection:
    """``train``: the loop."""

    steps: int = 100
    """Optimizer steps of the run (the LR schedule spans them)."""
    batch_size: int = 4
    """Micro-batch rows per data-parallel rank."""
    grad_accumulation_steps: int = 1
    """Micro-batches per optimizer step (1 under pipeline parallelism: micro_batch_num then)."""
    amp_level: str = "O0"
    """O0: all float32 (debugging); O2: float16 compute + dynamic loss scale."""
    loss_scale: LossScaleSection = field(default_factory=LossScaleSection)
    """Dynamic loss scale (used under O2 only)."""
    grad_clip: float = 1.0
    """Global-norm clipping threshold; 0 disables."""
    mode: str = "jit"
    """jit (graph-compiled steps) or pynative (op by op, for debugging)."""
    shuffle: bool = True
    """Shuffle the rows each epoch (seeded by ``seed``)."""
    data_format: str = "auto"
    """Shard format read: auto, or a registered format (bin, mindrecord)."""
    split: str = "train"
    """Split of the prepared output trained on."""
    log_interval: int = 1
    """Steps between log lines (every step is in metrics.jsonl)."""
    prefetch: int = 4
    """Steps of batches prepared ahead by the loader thread."""
    mask_cross_document_label: bool = False
    """Mask the label that follows each document end (the next document's first token); as
    Megatron-LM's --eod-mask-loss, off by default."""
    verify_shards: bool = True
    """Check each shard file's size and sha256 against the manifest before its rows are first read
    (in the background); false (or run.py --no-verify-shards) checks sizes only."""


@dataclass
class OptimizerSection:
    """``optimizer`` (pretrain/optim.py)."""

    type: str = "adamw"
    """adamw or lamb."""
    beta1: float = 0.9
    """First-moment decay, in [0, 1)."""
    beta2: float = 0.95
    """Second-moment decay, in [0, 1)."""
    eps: float = 1e-8
    """Denominator epsilon."""
    weight_decay: float = 0.1
    """Decoupled weight decay (not on biases and norm scales)."""


@dataclass
class LRScheduleSection:
    """``lr_schedule`` (pretrain/optim.py), indexed by applied optimizer updates."""

    type: str = "cosine"
    """cosine, wsd (warmup-stable-decay) or constant."""
    learning_rate: float = 3e-4
    """Peak learning rate (positive)."""
    min_lr: float = 3e-5
    """Learning rate at the end of the decay."""
    warmup_steps: int = 0
    """Linear warmup, in steps."""
    warmup_ratio: float | None = None
    """Warmup as a fraction of total_steps; overrides warmup_steps when set."""
    decay_ratio: float = 0.1
    """wsd: final fraction of steps spent decaying, in [0, 1]."""
    total_steps: int | None = None
    """Steps the schedule spans; None: train.steps."""


@dataclass
class ParallelSection:
    """``parallel``: the layout (pretrain/parallel.py); world = data_parallel x tensor_parallel x
    pipeline_stages processes."""

    data_parallel: int = 1
    """Data-parallel replicas."""
    tensor_parallel: int = 1
    """Tensor-parallel ranks per replica (Ascend/GPU only)."""
    pipeline_stages: int = 1
    """Pipeline stages (Ascend/GPU only)."""
    micro_batch_num: int = 1
    """Pipeline micro-batches per step (PipelineCell; Ascend/GPU only); >= pipeline_stages."""
    optimizer_shard: bool = False
    """ZeRO: shard the optimizer state across dp (parallel optimizer; Ascend/GPU only)."""


@dataclass
class CheckpointSection:
    """``checkpoint`` (pretrain/checkpoint.py)."""

    dir: str | None = None
    """Checkpoint root; None: <output>/checkpoints."""
    save_interval: int = 0
    """Steps between checkpoints; 0: only at the end."""
    keep_last: int = 3
    """Newest checkpoints kept per rank; 0 keeps all."""


@dataclass
class EvalSection:
    """``eval``: periodic evaluation on a held-out split."""

    split: str = "validation"
    """Split evaluated."""
    interval: int = 0
    """Steps between evaluations; 0 disables periodic eval."""
    max_batches: int = 8
    """Global batches per evaluation at most."""


@dataclass
class GradNormSpikeSection:
    """``monitor.grad_norm_spike``: a norm > factor x the median of the last ``window`` applied
    updates' norms (checked once min_history norms are known)."""

    policy: str = "warn"
    """warn (log, apply), skip (do not apply the update; the batch is consumed), stop (do not apply,
    exit 1) or off."""
    factor: float = 5.0
    """Multiple of the median norm that is a spike (> 1)."""
    window: int = 50
    """Applied updates whose norms make the median."""
    min_history: int = 10
    """Norms known before spikes are checked."""


@dataclass
class MonitorSection:
    """``monitor``: what the loop measures besides the loss (pretrain/monitor.py, pretrain/metrics.py)."""

    grad_norm_spike: GradNormSpikeSection = field(default_factory=GradNormSpikeSection)
    """Gradient-norm spike detection."""
    data_wait_alarm: float = 0.15
    """Warn when waiting for data takes more than this share of step time, in (0, 1]."""
    peak_flops: float | None = None
    """Peak FLOP/s of one device; MFU is reported only when set."""
    loss_by_source: bool = True
    """With blended data or a mixed output: the loss per source too (one extra forward pass of each
    micro-batch per source present in it)."""


@dataclass
class OverfitSection:
    """``overfit``: the ``--overfit-check`` sanity run."""

    rows: int = 4
    """Rows of the tiny slice trained on repeatedly."""
    steps: int = 150
    """Steps of the check."""
    max_loss: float = 1.0
    """The check passes when the final loss is below this."""


@dataclass
class TrainingConfig:
    """The whole training config; ``load_config`` builds it from YAML."""

    seed: int = 1234
    """Seeds the model initialisation, the shuffle and the blend."""
    data: list[DataSource] = field(default_factory=list)
    """Several prepared outputs blended by weight (pretrain/blend.py); empty: the one output given
    with --data."""
    model: ModelSection = field(default_factory=ModelSection)
    train: TrainSection = field(default_factory=TrainSection)
    optimizer: OptimizerSection = field(default_factory=OptimizerSection)
    lr_schedule: LRScheduleSection = field(default_factory=LRScheduleSection)
    parallel: ParallelSection = field(default_factory=ParallelSection)
    checkpoint: CheckpointSection = field(default_factory=CheckpointSection)
    eval: EvalSection = field(default_factory=EvalSection)
    monitor: MonitorSection = field(default_factory=MonitorSection)
    overfit: OverfitSection = field(default_factory=OverfitSection)

    def to_dict(self) -> dict[str, Any]:
        """The nested-dict form (YAML keys, in declaration order): config.resolved.json, checkpoints,
        run.json and the trajectory hash."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainingConfig:
        """From a complete nested dict (a merged config); keys are not checked here (see load_config)."""
        return _build(cls, d)

    @property
    def micro_batches_per_step(self) -> int:
        """Micro-batches per optimizer step and dp rank: grad_accumulation_steps, or micro_batch_num
        under pipeline parallelism."""
        p = self.parallel
        return p.micro_batch_num if p.pipeline_stages > 1 else self.train.grad_accumulation_steps

    @property
    def global_batch(self) -> int:
        """Rows per optimizer step over all data-parallel ranks: dp x batch_size x micro-batches."""
        return self.parallel.data_parallel * self.train.batch_size * self.micro_batches_per_step


def _build(cls: Any, d: dict[str, Any]) -> Any:
    kwargs = {}
    for f in dataclasses.fields(cls):
        v = d[f.name]
        sub = _SECTIONS.get((cls, f.name))
        if sub is not None:
            v = [_build(sub, x) for x in v] if isinstance(v, list) else _build(sub, v)
        kwargs[f.name] = v
    return cls(**kwargs)


# the fields that hold dataclasses (or lists of them); everything else is a plain value
_SECTIONS: dict[tuple[Any, str], Any] = {
    (TrainingConfig, "data"): DataSource,
    (TrainingConfig, "model"): ModelSection,
    (TrainingConfig, "train"): TrainSection,
    (TrainingConfig, "optimizer"): OptimizerSection,
    (TrainingConfig, "lr_schedule"): LRScheduleSection,
    (TrainingConfig, "parallel"): ParallelSection,
    (TrainingConfig, "checkpoint"): CheckpointSection,
    (TrainingConfig, "eval"): EvalSection,
    (TrainingConfig, "monitor"): MonitorSection,
    (TrainingConfig, "overfit"): OverfitSection,
    (TrainSection, "loss_scale"): LossScaleSection,
    (MonitorSection, "grad_norm_spike"): GradNormSpikeSection,
}

# the defaults as the nested dict a YAML file is merged into (the key set is what is accepted)
DEFAULTS: dict[str, Any] = TrainingConfig().to_dict()

# Keys that may change between a run and its resumption (they do not change the trajectory). The
# layout keys (parallel.*, train.batch_size, train.grad_accumulation_steps) may change too as long as
# the global batch stays (see TrainingConfig.global_batch); tensor/pipeline split and optimizer
# sharding are checked separately on resume (they change how checkpoints are sliced).
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


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> TrainingConfig:
    """Defaults ← YAML file ← overrides, validated. Raises ConfigError with the offending key."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"cannot read config {path}: {e}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"config {path} must be a YAML mapping")
    merged = _merge(DEFAULTS, raw)
    if overrides:
        merged = _merge(merged, overrides)
    problems = _check_data(merged["data"])
    if problems:
        raise ConfigError("invalid config: " + "; ".join(problems))
    cfg = TrainingConfig.from_dict(merged)
    validate(cfg)
    return cfg


def _check_data(data: Any) -> list[str]:
    """Problems of the ``data`` list (as read); normalises each weight to a float in place."""
    if not isinstance(data, list):
        return ["data must be a list of {path, weight}"]
    problems = []
    for i, d in enumerate(data):
        if not isinstance(d, dict) or set(d) - {"path", "weight"} or "path" not in d:
            problems.append(f"data[{i}] must be a mapping {{path, weight}}")
            continue
        w = d.get("weight", 1.0)
        if isinstance(w, bool) or not isinstance(w, int | float) or w <= 0:
            problems.append(f"data[{i}].weight must be a positive number")
        d["weight"] = float(w)
    return problems


def validate(cfg: TrainingConfig) -> None:
    """Raise ConfigError naming every invalid value of ``cfg``."""
    t, o, s, p, mon = cfg.train, cfg.optimizer, cfg.lr_schedule, cfg.parallel, cfg.monitor
    problems: list[str] = []

    def positive_int(section: str, key: str, v: Any) -> None:
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            problems.append(f"{section}.{key} must be a positive integer, got {v!r}")

    for k in ("steps", "batch_size", "grad_accumulation_steps", "log_interval", "prefetch"):
        positive_int("train", k, getattr(t, k))
    for k in ("data_parallel", "tensor_parallel", "pipeline_stages", "micro_batch_num"):
        positive_int("parallel", k, getattr(p, k))
    for k in ("vocab_size", "seq_length"):
        v = getattr(cfg.model, k)
        if v != "auto":
            positive_int("model", k, v)
    if t.amp_level not in ("O0", "O2"):
        problems.append(f"train.amp_level must be O0 or O2, got {t.amp_level!r}")
    if t.mode not in ("jit", "pynative"):
        problems.append(f"train.mode must be jit or pynative, got {t.mode!r}")
    from dataprep.formats.registry import all_formats

    data_formats = ["auto", *(f.name for f in all_formats())]
    if t.data_format not in data_formats:
        problems.append(
            f"train.data_format must be {', '.join(data_formats[:-1])} or {data_formats[-1]}, "
            f"got {t.data_format!r}"
        )
    if o.type not in ("adamw", "lamb"):
        problems.append(f"optimizer.type must be adamw or lamb, got {o.type!r}")
    if not 0 <= o.beta1 < 1 or not 0 <= o.beta2 < 1:
        problems.append("optimizer.beta1 and beta2 must be in [0, 1)")
    if s.type not in ("cosine", "wsd", "constant"):
        problems.append(f"lr_schedule.type must be cosine, wsd or constant, got {s.type!r}")
    if float(s.learning_rate) <= 0:
        problems.append("lr_schedule.learning_rate must be positive")
    if not 0 <= float(s.decay_ratio) <= 1:
        problems.append("lr_schedule.decay_ratio must be in [0, 1]")
    if float(t.grad_clip) < 0:
        problems.append("train.grad_clip must be >= 0 (0 disables clipping)")
    if p.pipeline_stages > 1 and t.grad_accumulation_steps != 1:
        problems.append(
            "with pipeline_stages > 1 the micro-batches of a step are parallel.micro_batch_num "
            "(MindSpore's PipelineCell); set train.grad_accumulation_steps: 1"
        )
    if p.pipeline_stages > 1 and p.micro_batch_num < p.pipeline_stages:
        problems.append(
            f"parallel.micro_batch_num {p.micro_batch_num} must be >= pipeline_stages {p.pipeline_stages}"
        )
    spike = mon.grad_norm_spike
    if spike.policy not in ("off", "warn", "skip", "stop"):
        problems.append(
            f"monitor.grad_norm_spike.policy must be off, warn, skip or stop, got {spike.policy!r}"
        )
    if not float(spike.factor) > 1:
        problems.append("monitor.grad_norm_spike.factor must be > 1")
    for k in ("window", "min_history"):
        positive_int("monitor.grad_norm_spike", k, getattr(spike, k))
    if not 0 < float(mon.data_wait_alarm) <= 1:
        problems.append("monitor.data_wait_alarm must be in (0, 1]")
    peak = mon.peak_flops
    if peak is not None and not (isinstance(peak, int | float) and peak > 0):
        problems.append(f"monitor.peak_flops must be a positive number of FLOP/s or null, got {peak!r}")
    if problems:
        raise ConfigError("invalid config: " + "; ".join(problems))


def resolve_against_manifest(
    cfg: TrainingConfig, shards: dict[str, Any], checkpoint_vocab: int | None = None
) -> None:
    """Fill ``auto`` model sizes from the manifest's shard section; raise on any mismatch.

    ``checkpoint_vocab``: embedding rows of the ``init_from`` checkpoint. ``vocab_size: auto`` then
    takes the larger of the shards' vocabulary and the checkpoint's rows (a checkpoint padded beyond
    its tokenizer keeps its rows; a shards' tokenizer that extends the checkpoint's gets new rows);
    an explicit value may also equal the checkpoint's rows when they cover the shards' ids.
    """
    m = cfg.model
    for key in ("seq_length", "vocab_size"):
        data_value = shards.get(key)
        if data_value is None:
            raise ConfigError(f"manifest shards section has no {key!r}; is it a dataprep output?")
        data_value = int(data_value)
        rows = checkpoint_vocab if key == "vocab_size" and checkpoint_vocab else None
        value = getattr(m, key)
        if value == "auto":
            setattr(m, key, max(data_value, rows or 0))
            continue
        if rows is not None and int(value) < rows:
            raise ConfigError(
                f"model.vocab_size = {value} is smaller than the {rows} embedding rows of model.init_from: "
                f"set model.vocab_size: {rows} or auto (the shards' ids < {data_value} fit, the extra rows "
                "stay)"
            )
        if int(value) != data_value and not (rows is not None and int(value) == rows >= data_value):
            hint = (
                "rows hold seq_length + 1 tokens, fixed when the data was packed: repack with "
                "pack.seq_length or"
                if key == "seq_length"
                else "the embedding must match the tokenizer's vocabulary:"
            )
            raise ConfigError(
                f"model.{key} = {value} but the data was prepared with {key} = {data_value} "
                f"({hint} set model.{key}: {data_value} or auto)"
            )


def trajectory_hash(cfg: TrainingConfig, data_identity: Any) -> str:
    """sha256 over everything that determines the training trajectory: not logging, checkpointing
    or the parallel layout, but the global batch."""
    pruned = cfg.to_dict()
    for section, key in RESUMABLE_KEYS:
        pruned.get(section, {}).pop(key, None)
    pruned["global_batch"] = cfg.global_batch
    blob = json.dumps({"config": pruned, "data": data_identity}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def saved_global_batch(saved: dict[str, Any]) -> int:
    """The global batch of a saved config dict (a checkpoint's ``config``), with today's defaults
    for keys it lacks."""
    return TrainingConfig.from_dict(_merge(DEFAULTS, _known(DEFAULTS, saved))).global_batch


def _known(base: dict[str, Any], d: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if k in base:
            out[k] = _known(base[k], v) if isinstance(base[k], dict) and isinstance(v, dict) else v
    return out


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
