"""The training loop: builds model, optimizer and data for this rank, runs compiled steps, logs,
evaluates, checkpoints and resumes exactly.

One optimizer step trains on one global batch of G = dp x batch_size x micro-batches rows
(micro-batches = grad_accumulation_steps, or micro_batch_num under pipeline parallelism). Each
micro-batch contributes Σ(token NLL) x loss_scale / T to the loss, T = loss tokens of the whole
global batch (all-reduced before the step), so the gradient summed over micro-batches and ranks is
the gradient of the global token mean whatever the layout: dp 2 x batch 2 and dp 1 x batch 4 take
the same step on the same rows (see pretrain/data.py for the order). How gradients are reduced
across ranks and how their norm is taken under each parallel mode: pretrain/parallel.py.

Resumption: checkpoints record the samples consumed (step x G), the optimizer-update count that
positions the LR schedule, the loss scale and the gradient-norm history. ``--resume auto`` takes
the newest step whose checkpoint is complete on every rank (agreed through a collective; the log
names each rank that lacked a newer one). A run may resume under another data-parallel size or
micro-batch split as long as G and everything else that shapes the trajectory are unchanged; the
tensor/pipeline split and optimizer sharding must stay (their checkpoints are sliced).

Monitoring (per step, in metrics.jsonl): loss, lr, gradient norm and spikes (monitor.grad_norm_spike:
warn / skip the update / stop), loss-token and all-position throughput, model FLOP/s and MFU
(pretrain/monitor.py), data-wait share with an alarm (monitor.data_wait_alarm), peak RSS and device
memory. The first step of a process includes graph compilation: its time is reported as
``first_step_s`` and left out of throughput. SIGTERM ends the run after the current step with a
checkpoint (all ranks stop at the same step).
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats.readers_for_training import CheckedRows, ShardCheck, ShardError, SplitFiles, open_split
from dataprep.formats.registry import get_format
from pretrain import checkpoint as ckpt
from pretrain.blend import BlendedRows, DataEntry, entries_from_config
from pretrain.config import (
    ConfigError,
    diff_keys,
    global_batch,
    micro_batches_per_step,
    resolve_against_manifest,
    trajectory_hash,
)
from pretrain.data import FEATURES, Layout, RowSource, StepLoader, rank_rows, row_features, with_labels
from pretrain.hf_checks import TOKENIZER_FILES, CheckError, check_config, check_tokenizer, open_init_source
from pretrain.monitor import SpikeDetector, device_peak_mb, flops_per_token, peak_rss_mb
from pretrain.optim import LossScale, LRSchedule, build_optimizer
from pretrain.parallel import DATA_PARALLEL, SEMI_AUTO, ParallelPlan

MAX_AGREED_STEPS = 64  # newest checkpoint steps per rank compared when ranks agree on a resume step


class TrainingError(RuntimeError):
    """Training cannot go on (non-finite loss, persistent overflow); the message names the step."""


def _log(msg: str) -> None:
    print(msg, flush=True)


def distributed_env() -> bool:
    """True when launched by msrun (or another MindSpore launcher) as a worker."""
    return os.environ.get("MS_ROLE") == "MS_WORKER"


def layout_table(layout: Layout) -> str:
    """Human-readable rank → (pp_stage, dp_rank, tp_rank, dataset shard) table."""
    lines = [f"layout: world {layout.world} = dp {layout.dp} x tp {layout.tp} x pp {layout.pp}"]
    for r in range(layout.world):
        pp_stage, dp_rank, tp_rank = layout.coords(r)
        lines.append(
            f"  rank {r:>4}: pp_stage {pp_stage}, dp_rank {dp_rank}, tp_rank {tp_rank} "
            f"-> dataset shard {dp_rank} of {layout.dp}"
        )
    return "\n".join(lines)


class Trainer:
    def __init__(
        self,
        cfg: dict[str, Any],
        data: str | Path | None,
        output: str | Path,
        log: Any = _log,
        allow_config_mismatch: Iterable[str] = (),
    ):
        self.cfg, self.log = cfg, log
        self.output = Path(output)
        self.data = Path(data) if data else Path(cfg["data"][0]["path"]) if cfg["data"] else Path(".")
        self.allow_config_mismatch = set(allow_config_mismatch)
        self.stop_requested = False  # set by SIGTERM; the run stops after the current step
        self.clock: Callable[[], float] = time.perf_counter  # seconds: step times, data wait (injectable)
        self._init_context()
        self._open_data()
        self._build()

    # ---------------------------------------------------------------- set-up
    def _init_context(self) -> None:
        import mindspore as ms

        from pretrain.parallel import configure_context

        t = self.cfg["train"]
        ms.reset_auto_parallel_context()
        ms.set_context(mode=ms.PYNATIVE_MODE if t["mode"] == "pynative" else ms.GRAPH_MODE)
        self.device = ms.get_context("device_target")
        self.rank, world = 0, 1
        if distributed_env():
            from mindspore.communication import get_group_size, get_rank, init

            init()
            self.rank, world = get_rank(), get_group_size()
        self.plan = plan = ParallelPlan.from_config(self.cfg["parallel"])
        tp, pp, dp = plan.tp, plan.pp, plan.dp
        if plan.mode == SEMI_AUTO:
            if tp * pp > 1:
                self._check_model_split(tp, pp)
            configure_context(plan)
            if self.device == "CPU":
                what = f"tensor_parallel {tp} / pipeline_stages {pp}" + (
                    " / optimizer_shard (ZeRO)" if plan.optimizer_shard else ""
                )
                raise ConfigError(
                    f"{what} need an Ascend or GPU backend: MindSpore compiles semi_auto_parallel and the "
                    "parallel optimizer only there (this machine runs CPU). The auto-parallel context is "
                    "configured; the data layout would be:\n"
                    + layout_table(Layout(dp * tp * pp, tp, pp))
                    + "\nUse tensor_parallel: 1, pipeline_stages: 1 and optimizer_shard: false here (data "
                    "parallel works on CPU)."
                )
        try:
            self.layout = Layout(world, tp, pp)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if self.layout.dp != dp:
            n = dp * tp * pp
            raise ConfigError(
                f"parallel.data_parallel = {dp} x tp {tp} x pp {pp} needs {n} processes, this world has "
                f"{world}: launch with msrun --worker_num={n} --local_worker_num={n} --master_port=8118 "
                "--join=True pretrain/run.py ... (or set parallel.data_parallel to match)"
            )
        self.world = world
        self.pp_stage, self.dp_rank, self.tp_rank = self.layout.coords(self.rank)
        if plan.mode == DATA_PARALLEL:
            configure_context(plan)
        seed = int(self.cfg["seed"])
        ms.set_seed(seed)  # seeds first: the dataset and the model are built after this
        np.random.seed(seed)
        random.seed(seed)

    def _check_model_split(self, tp: int, pp: int) -> None:
        from pretrain.model import ModelConfig, check_parallel_shape

        m = {k: v for k, v in self.cfg["model"].items() if k != "init_from"}
        if "auto" in (m["vocab_size"], m["seq_length"]):  # sizes not known before the manifest: check later
            m = {
                **m,
                "vocab_size": 8 * tp if m["vocab_size"] == "auto" else m["vocab_size"],
                "seq_length": 8 if m["seq_length"] == "auto" else m["seq_length"],
            }
        problems = check_parallel_shape(ModelConfig.from_dict(m), tp, pp)
        if problems:
            raise ConfigError("parallel layout does not fit the model: " + "; ".join(problems))

    def _open_data(self) -> None:
        t = self.cfg["train"]
        entries = entries_from_config(self.cfg["data"])
        try:
            paths = [e.path for e in entries] or [str(self.data)]
            splits = [open_split(p, t["split"], t["data_format"]) for p in paths]
        except (ShardError, FileNotFoundError) as e:
            raise ConfigError(str(e)) from None
        split = splits[0]
        _check_compatible(paths, splits)
        if not t["verify_shards"]:
            self.log(
                "shards: sha256 check against manifest.json skipped (train.verify_shards false or "
                "--no-verify-shards); sizes and token ids are still checked"
            )
        self.entries, self.splits = entries, splits
        self.shards = split.shards
        self.split = split
        self.init_source, self._init_params, rows = None, None, None
        if self.cfg["model"]["init_from"]:
            rows = self._open_init_from(self.cfg["model"]["init_from"])
        resolve_against_manifest(self.cfg, self.shards.to_json(), checkpoint_vocab=rows)
        if self.init_source is not None:
            self._check_init_source()
        self.eos_id = int(self.shards.eos_id)  # type: ignore[arg-type]
        self.pad_id = self.shards.pad_id
        self.data_identity = {
            "split": split.split,
            "format": split.format,
            "files": [{"path": e.path, "rows": e.rows, "sha256": e.sha256} for e in split.entries],
        }
        self.blend: BlendedRows | None = None
        self.labels: list[str] = list(split.shards.sources or [])
        if entries:
            self.data_identity = {
                "split": split.split,
                "format": split.format,
                "blend": [
                    {"weight": e.weight, "files": [{"rows": f.rows, "sha256": f.sha256} for f in sp.entries]}
                    for e, sp in zip(entries, splits, strict=True)
                ],
            }
            self.blend = BlendedRows(entries, splits, int(self.cfg["seed"]), open_rows=self._checked_rows)
            self.labels = self.blend.labels
        self.source = RowSource(
            split,
            self.layout.dp,
            self.dp_rank,
            int(self.cfg["seed"]),
            bool(t["shuffle"]),
            rows=self.blend if self.blend is not None else self._checked_rows(split),
        )
        self.eval_split = None
        self._eval_rows: BlendedRows | None = None
        e = self.cfg["eval"]
        if e["interval"] > 0 and self.plan.pp > 1:
            self.log("eval: off under pipeline parallelism (the eval graph is not pipelined here)")
        elif e["interval"] > 0 and entries:
            have = []
            for entry, path in zip(entries, paths, strict=True):
                try:
                    have.append((entry, open_split(path, e["split"], t["data_format"])))
                except ShardError as err:
                    self.log(f"eval: {entry.name} left out ({err})")
            if have:
                self.eval_split = have[0][1]
                self._eval_rows = BlendedRows(
                    [h[0] for h in have], [h[1] for h in have], 0, open_rows=self._checked_rows
                )
        elif e["interval"] > 0:
            try:
                self.eval_split = open_split(self.data, e["split"], t["data_format"])
            except ShardError as err:
                self.log(f"eval: disabled ({err})")

    def _checked_rows(self, split: SplitFiles) -> CheckedRows:
        """The split's training rows, read only once checked: sizes now, sha256 in the background
        and per file before its first row (unless train.verify_shards is false), token ids per
        batch (:class:`dataprep.formats.readers_for_training.CheckedRows`)."""
        check = ShardCheck(split, hashes=bool(self.cfg["train"]["verify_shards"]))
        check.check_sizes()
        check.start()
        return CheckedRows(get_format(split.format).training_rows(split), split, check)

    def _build(self) -> None:
        import mindspore as ms
        from mindspore import Tensor, amp, ops

        from pretrain.model import LlamaForCausalLM, ModelConfig, no_decay
        from pretrain.parallel import build_eval_cell, build_step_cells, global_norm_fn

        m = {k: v for k, v in self.cfg["model"].items() if k != "init_from"}
        t = self.cfg["train"]
        m["compute_dtype"] = "float16" if t["amp_level"] == "O2" else "float32"
        self.model_cfg = ModelConfig.from_dict(m)
        self.net = LlamaForCausalLM(self.model_cfg, seed=int(self.cfg["seed"]))
        if self.layout.tp * self.layout.pp > 1:  # semi_auto_parallel (Ascend/GPU only; not run on CPU)
            from pretrain.model import apply_parallel_strategy, check_parallel_shape

            problems = check_parallel_shape(self.model_cfg, self.layout.tp, self.layout.pp)
            if problems:
                raise ConfigError("parallel layout does not fit the model: " + "; ".join(problems))
            apply_parallel_strategy(self.net, self.layout.dp, self.layout.tp, self.layout.pp)
        if self.init_source is not None:
            self._init_from()
        self.params = self.net.trainable_params()
        self.opt = build_optimizer(self.params, self.cfg["optimizer"], no_decay)
        self.schedule = LRSchedule.from_config(self.cfg["lr_schedule"], t["steps"])
        ls = t["loss_scale"]
        self.loss_scale = (
            LossScale(float(ls["init"]), float(ls["factor"]), int(ls["window"]), enabled=True)
            if t["amp_level"] == "O2"
            else LossScale()
        )
        self.spike = SpikeDetector.from_config(self.cfg["monitor"]["grad_norm_spike"])
        self.global_batch = global_batch(self.cfg)
        self.micro_per_step = micro_batches_per_step(self.cfg)
        self.hash = trajectory_hash(self.cfg, self.data_identity)
        self.flops_per_token = flops_per_token(self.model_cfg)
        self.step_cells = build_step_cells(self.plan, self.net, self.opt)
        self.eval_cell = build_eval_cell(self.plan, self.net)
        reducer = self.step_cells.reducer
        self._allreduce = ops.AllReduce() if self.world > 1 else None
        global_norm = global_norm_fn()
        opt = self.opt
        grad_fn = ms.value_and_grad(self.step_cells.network, None, opt.parameters)

        def micro(ids: Tensor, labels: Tensor, weights: Tensor, pos: Tensor, seg: Tensor) -> Any:
            return grad_fn(ids, labels, weights, pos, seg)

        def accumulate(acc: tuple, grads: tuple) -> tuple:
            return tuple(a + g for a, g in zip(acc, grads))  # noqa: B905 (graph syntax has no strict=)

        clip = float(t["grad_clip"])

        def update(grads: tuple, inv_scale: Tensor, lr: Tensor, max_norm: Tensor) -> Any:
            """Reduce across ranks (pretrain/parallel.py), unscale, check finiteness, take the global
            norm, clip, and apply only when finite and not above ``max_norm`` (a gradient spike
            under policy skip/stop; +inf otherwise). Returns (finite, norm)."""
            if reducer is not None:
                grads = reducer(grads)
            grads = tuple(g * inv_scale for g in grads)
            finite = amp.all_finite(grads)
            norm = global_norm(grads).reshape(())
            if ops.logical_and(finite, norm <= max_norm):
                coef = ops.minimum(clip / (norm + 1e-6), 1.0) if clip > 0 else ops.ones_like(norm)
                # the learning rate goes in as an input: set_data on opt.learning_rate from Python
                # does not reach an already compiled graph (it keeps the first value)
                ops.assign(opt.learning_rate, lr)
                opt(tuple(g * coef for g in grads))
            return finite, norm

        def single_step(
            ids: Tensor,
            labels: Tensor,
            weights: Tensor,
            pos: Tensor,
            seg: Tensor,
            inv_scale: Tensor,
            lr: Tensor,
            max_norm: Tensor,
        ) -> Any:
            """A step in one graph (no accumulation outside it): (scaled loss, finite, grad norm)."""
            loss, grads = grad_fn(ids, labels, weights, pos, seg)
            finite, norm = update(grads, inv_scale, lr, max_norm)
            return loss, finite, norm

        eval_cell = self.eval_cell

        def evaluate(ids: Tensor, labels: Tensor, mask: Tensor, pos: Tensor, seg: Tensor) -> Any:
            return eval_cell(ids, labels, mask, pos, seg)

        wrap = (lambda f: f) if t["mode"] == "pynative" else ms.jit
        self._micro, self._accumulate, self._update = wrap(micro), wrap(accumulate), wrap(update)
        self._single_step, self._eval = wrap(single_step), wrap(evaluate)
        self._Tensor = Tensor
        self._mutable = ms.mutable if t["mode"] != "pynative" else (lambda x: x)

    # ---------------------------------------------------------------- continued pretraining
    def _open_init_from(self, path: str) -> int | None:
        """Classify model.init_from (Hugging Face directory or MindSpore .ckpt), read a .ckpt now;
        return the checkpoint's embedding rows (None if unknown). Failures: ConfigError, one line."""
        import mindspore as ms

        try:
            self.init_source = src = open_init_source(path)
        except CheckError as e:
            raise ConfigError(str(e)) from None
        if src.kind == "hf":
            return src.vocab_rows
        try:
            params = ms.load_checkpoint(str(src.path))
        except Exception as e:  # MindSpore raises RuntimeError/ValueError with multi-line texts
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ConfigError(
                f"model.init_from {src.path}: cannot read the MindSpore checkpoint ({first})"
            ) from None
        self._init_params = {n: p.asnumpy() for n, p in params.items()}
        embed = self._init_params.get("model.embed_tokens.weight")
        return int(embed.shape[0]) if embed is not None else src.vocab_rows

    def _check_init_source(self) -> None:
        """config.json against the training config, and the tokenizer beside the checkpoint against
        the manifest's (pretrain/hf_checks.py); ConfigError (one line) on a mismatch."""
        from dataprep.formats.manifest import read_manifest

        src = self.init_source
        try:
            if src.hf_config is not None:
                for text in check_config(
                    src.hf_config, self.cfg["model"], self.allow_config_mismatch, src.path
                ):
                    self.log(f"init_from: training with the config's value although {text} (allowed)")
            else:
                self.log(f"init_from: no config.json beside {src.path}: model fields not compared")
            names = (*TOKENIZER_FILES, "tokenizer_config.json", "special_tokens_map.json", "config.json")
            if any((src.checkpoint_dir / n).is_file() for n in names):
                _, manifest = read_manifest(self.data)
                for note in check_tokenizer(src.checkpoint_dir, manifest.tokenizer or {}, self.split.out):
                    self.log(f"init_from: {note}")
            else:
                self.log(f"init_from: no tokenizer files beside {src.path}: vocabulary not compared")
        except CheckError as e:
            raise ConfigError(str(e)) from None

    def _init_from(self) -> None:
        """Load the init_from weights into the model: every model parameter must come from the
        checkpoint with the model's shape, except embedding/lm_head rows added for a larger
        vocabulary (initialised with the mean of the old rows, as convert_hf.py does)."""
        import mindspore as ms

        from pretrain.convert_hf import VOCAB_ROWS, ConversionError, read_safetensors

        src = self.init_source
        if src.kind == "hf":
            try:
                params = read_safetensors(src.path)
            except ConversionError as e:
                raise ConfigError(f"model.init_from {src.path}: {e}") from None
            except Exception as e:  # safetensors raises its own errors on damaged files
                raise ConfigError(
                    f"model.init_from {src.path}: cannot read the safetensors files ({e})"
                ) from None
            params = {n: v for n, v in params.items() if not n.endswith("rotary_emb.inv_freq")}
        else:
            params = dict(self._init_params or {})
        tied_in_checkpoint = "lm_head.weight" not in params
        if self.net.lm_head is not None and tied_in_checkpoint and "model.embed_tokens.weight" in params:
            params["lm_head.weight"] = params["model.embed_tokens.weight"].copy()  # tied -> untied
            self.log("init_from: the checkpoint ties lm_head to the embedding: lm_head starts as a copy")
        model_shapes = {p.name: tuple(p.shape) for p in self.net.get_parameters()}
        missing = [n for n in model_shapes if n not in params]
        if missing:
            raise ConfigError(
                f"model.init_from {src.path}: {len(missing)} model parameters are not in the checkpoint "
                f"(e.g. {missing[:3]}); refusing to train with silently re-initialised layers"
            )
        extended, wrong = [], []
        for name, want in model_shapes.items():
            value = np.asarray(params[name], dtype=np.float32)
            if (
                value.shape != want
                and name in VOCAB_ROWS
                and value.shape[1:] == want[1:]
                and value.shape[0] < want[0]
            ):
                extra = np.repeat(value.mean(axis=0, keepdims=True), want[0] - value.shape[0], axis=0)
                value = np.concatenate([value, extra])
                extended.append(name)
            elif value.shape != want:
                wrong.append(f"{name} {value.shape} vs the model's {want}")
            params[name] = value
        if wrong:
            raise ConfigError(
                f"model.init_from {src.path}: {len(wrong)} tensors have other shapes than the model "
                f"({'; '.join(wrong[:3])}): the training config's model section does not describe this "
                "checkpoint"
            )
        if extended:
            self.log(f"init_from: vocabulary rows added (mean of the old rows) to {', '.join(extended)}")
        ms.load_param_into_net(
            self.net, {n: ms.Parameter(ms.Tensor(params[n]), name=n) for n in model_shapes}
        )
        unused = sorted(set(params) - set(model_shapes))
        self.log(
            f"init_from: loaded {len(model_shapes)} parameters from {src.path}"
            + (f" ({len(unused)} checkpoint tensors unused, e.g. {unused[:2]})" if unused else "")
        )

    # ---------------------------------------------------------------- collectives
    def _all_ranks(self, values: list[float] | np.ndarray) -> np.ndarray:
        """Every rank's ``values`` (same length everywhere): float64 [world, n], row r = rank r's.
        A collective: every rank must call it at the same point."""
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        if self._allreduce is None:
            return values[None, :]
        table = np.zeros((self.world, len(values)), np.float32)
        table[self.rank] = values
        return self._allreduce(self._Tensor(table)).asnumpy().astype(np.float64)

    def _sum_over_ranks(self, values: list[float]) -> np.ndarray:
        """Element-wise sum of ``values`` over all ranks (float64 [n]); a collective."""
        return self._all_ranks(values).sum(axis=0)

    # ---------------------------------------------------------------- steps
    def _inputs(self, f: dict[str, np.ndarray], weight: float) -> list[Any]:
        """Tensors of one micro-batch with the loss mask turned into loss weights."""
        w = (f["loss_mask"] * np.float32(weight)).astype(np.float32)
        arrays = [f["input_ids"], f["labels"], w, f["position_ids"], f["segment_ids"]]
        return [self._Tensor(np.ascontiguousarray(a)) for a in arrays]

    def train_step(self, micro_batches: list[dict[str, np.ndarray]]) -> dict[str, Any]:
        """One optimizer step over this rank's micro-batches of a global batch. Returns the loss
        (global token mean), grad norm, loss tokens of the global batch, whether the update was
        applied (``skipped``, ``skip_reason``: overflow / grad_norm_spike), ``spike`` and ``stop``
        (some rank was asked to stop: every rank sees the same value). Collective under msrun."""
        local_tokens = float(sum(f["loss_mask"].sum() for f in micro_batches))
        # ranks of one replica (tp/pp) hold the same rows: divide them out of the world sum
        tokens = float(self._sum_over_ranks([local_tokens])[0]) / (self.layout.tp * self.layout.pp)
        scale = self.loss_scale.value
        weight = scale / max(tokens, 1.0)
        threshold = self.spike.threshold()
        blocking = threshold is not None and self.spike.blocks_update()
        max_norm = self._Tensor(np.float32(threshold if blocking else np.inf))
        inv_scale = self._Tensor(np.float32(1.0 / scale))
        lr = self.schedule.at(self.updates)
        lr_t = self._Tensor(np.float32(lr))
        if self.plan.pp > 1:  # one tensor of all micro-batches: PipelineCell cuts it in the graph
            joined = {k: np.concatenate([f[k] for f in micro_batches]) for k in FEATURES}
            micro_batches = [joined]
        if len(micro_batches) == 1:
            loss_t, finite_t, norm_t = self._single_step(
                *self._inputs(micro_batches[0], weight), inv_scale, lr_t, max_norm
            )
            local_loss = float(loss_t.asnumpy())
        else:
            acc = None
            local_loss = 0.0
            for f in micro_batches:
                loss_t, grads = self._micro(*self._inputs(f, weight))
                acc = grads if acc is None else self._accumulate(self._mutable(acc), self._mutable(grads))
                local_loss += float(loss_t.asnumpy())
            finite_t, norm_t = self._update(self._mutable(acc), inv_scale, lr_t, max_norm)
        finite, norm = bool(finite_t.asnumpy()), float(norm_t.asnumpy())
        if self.plan.mode == SEMI_AUTO:  # the graph's loss is the global view's already
            stop = bool(self._sum_over_ranks([float(self.stop_requested)])[0] > 0)
            loss_sum = local_loss
        else:
            both = self._sum_over_ranks([local_loss, float(self.stop_requested)])
            loss_sum, stop = float(both[0]), bool(both[1] > 0)
        loss = loss_sum / scale
        spike = finite and threshold is not None and norm > threshold
        applied = finite and not (spike and blocking)
        if applied:
            self.updates += 1
            self.spike.record(norm)
        self.loss_scale.update(finite)
        return {
            "loss": loss,
            "grad_norm": norm if finite else None,
            "lr": lr,
            "loss_scale": scale,
            "skipped": not applied,
            "skip_reason": None if applied else ("overflow" if not finite else "grad_norm_spike"),
            "spike": spike,
            "spike_threshold": threshold,
            "tokens": tokens,
            "stop": stop,
        }

    def evaluate(self) -> dict[str, float] | None:
        if self.eval_split is None:
            return None
        t, e = self.cfg["train"], self.cfg["eval"]
        if not hasattr(self, "_eval_source"):
            self._eval_source = RowSource(
                self.eval_split,
                self.layout.dp,
                self.dp_rank,
                0,
                shuffle=False,
                rows=self._eval_rows if self._eval_rows is not None else self._checked_rows(self.eval_split),
            )
        src = self._eval_source
        eval_batch = self.layout.dp * t["batch_size"]
        n_batches = min(e["max_batches"], src.steps_per_epoch(eval_batch))
        if n_batches == 0:
            return None
        nll = tokens = 0.0
        by_nll, by_tokens = np.zeros(len(self.labels)), np.zeros(len(self.labels))
        for raw in src.step_batches(0, 0, n_batches, eval_batch, t["batch_size"]):
            f = self._features(raw)
            s, n = self._eval(*[self._Tensor(f[k]) for k in FEATURES])
            nll += float(s.asnumpy())
            tokens += float(n.asnumpy())
            if self._per_source():
                a, b = self._nll_by_label(f)
                by_nll, by_tokens = by_nll + a, by_tokens + b
        if self.plan.mode != SEMI_AUTO:
            nll, tokens = (float(v) for v in self._sum_over_ranks([nll, tokens]))
        loss = nll / max(tokens, 1.0)
        out: dict[str, Any] = {
            "eval_loss": loss,
            "eval_ppl": math.exp(min(loss, 50.0)),
            "eval_tokens": tokens,
        }
        if self._per_source():
            out["eval_loss_by_source"] = self._by_label(by_nll, by_tokens)
        return out

    # ---------------------------------------------------------------- loss per source
    def _per_source(self) -> bool:
        """Log the loss per source: blended data or a mixed output, on, and no pipeline split."""
        return bool(self.labels) and bool(self.cfg["monitor"]["loss_by_source"]) and self.plan.pp == 1

    def _nll_by_label(self, f: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(token NLL sum, loss tokens) per source label of one micro-batch on this rank: one
        forward pass (the eval graph) per label present, the loss mask kept to its rows."""
        k = len(self.labels)
        nll, tokens = np.zeros(k), np.zeros(k)
        label = f.get("source_label")
        if label is None:
            return nll, tokens
        arrays = {name: self._Tensor(f[name]) for name in FEATURES if name != "loss_mask"}
        for lab in np.unique(label).tolist():
            mask = (f["loss_mask"] * (label == lab)[:, None]).astype(np.float32)
            s, n = self._eval(
                arrays["input_ids"],
                arrays["labels"],
                self._Tensor(mask),
                arrays["position_ids"],
                arrays["segment_ids"],
            )
            nll[lab] += float(s.asnumpy())
            tokens[lab] += float(n.asnumpy())
        return nll, tokens

    def _by_label(self, nll: np.ndarray, tokens: np.ndarray) -> dict[str, float | None]:
        """Per label: NLL / tokens summed over ranks (a collective), None without tokens."""
        if self.plan.mode != SEMI_AUTO:
            both = self._sum_over_ranks([*nll.tolist(), *tokens.tolist()])
            nll, tokens = both[: len(self.labels)], both[len(self.labels) :]
        return {
            label: (float(a / b) if b > 0 else None)
            for label, a, b in zip(self.labels, nll, tokens, strict=True)
        }

    def loss_by_source(self, micro_batches: list[dict[str, np.ndarray]]) -> dict[str, float | None] | None:
        """The step's loss per source label, with the parameters before the step's update (as the
        step's own loss); None when not logged (see :meth:`_per_source`)."""
        if not self._per_source():
            return None
        nll, tokens = np.zeros(len(self.labels)), np.zeros(len(self.labels))
        for f in micro_batches:
            a, b = self._nll_by_label(f)
            nll, tokens = nll + a, tokens + b
        return self._by_label(nll, tokens)

    def _features(self, raw: dict[str, Any]) -> dict[str, np.ndarray]:
        f = row_features(
            raw["input_ids"],
            raw.get("actual_seq_len"),
            raw.get("loss_mask"),
            self.eos_id,
            self.pad_id,
            bool(self.cfg["train"]["mask_cross_document_label"]),
        )
        return with_labels(f, raw)

    # ---------------------------------------------------------------- checkpoints
    def ckpt_base(self) -> Path:
        return Path(self.cfg["checkpoint"]["dir"] or self.output / "checkpoints")

    def ckpt_root(self) -> Path:
        return ckpt.rank_dir(self.ckpt_base(), self.rank)

    def save(self, step: int) -> Path:
        """Write this rank's checkpoint of ``step``; once every rank has written it, prune old ones."""
        epoch, in_epoch = self.loader_position(step)
        state = {
            "updates": self.updates,
            "loss_scale": self.loss_scale.state(),
            "samples_consumed": step * self.global_batch,
            "global_batch": self.global_batch,
            "tokens_seen": self.tokens_seen,
            "grad_norm_history": self.spike.state(),
            "epoch": epoch,
            "step_in_epoch": in_epoch,
            "trajectory_hash": self.hash,
            "config": self.cfg,
            "rank": self.rank,
            "layout": [self.layout.world, self.layout.tp, self.layout.pp],
            "optimizer_shard": self.plan.optimizer_shard,
        }
        path = ckpt.save(self.ckpt_root(), step, self.opt, state)
        self._all_ranks([step])  # a barrier: older checkpoints go only once every rank has this one
        ckpt.prune(self.ckpt_root(), int(self.cfg["checkpoint"]["keep_last"]))
        self.log(f"checkpoint: step {step} -> {path}")
        return path

    def _resume_root(self, base: Path) -> Path:
        """This rank's checkpoint directory under ``base``; a rank that has none (the data-parallel
        size grew since) reads rank 0's: under pure data parallelism every replica holds the whole
        state."""
        own = ckpt.rank_dir(base, self.rank)
        if own.is_dir() or self.layout.tp * self.layout.pp > 1:
            return own
        return ckpt.rank_dir(base, 0)

    def _agree_on_checkpoint(self, root: Path) -> Path | None:
        """The newest step whose checkpoint is complete (state.json + matching sha256) on every
        rank, or None when no rank has any. Collective; logs which rank lacked which newer step.
        Raises CheckpointError when ranks have checkpoints but no step in common."""
        present = {ckpt.step_of(p): p for p in ckpt.list_checkpoints(root, validate=False)}
        mine = sorted(present)[-MAX_AGREED_STEPS:]
        table = self._all_ranks(mine + [-1] * (MAX_AGREED_STEPS - len(mine))).astype(np.int64)
        per_rank = [sorted(int(s) for s in row if s >= 0) for row in table]
        candidates = sorted(set.intersection(*(set(r) for r in per_rank)), reverse=True)
        lacking: dict[int, list[int]] = {r: [] for r in range(len(per_rank))}
        chosen = None
        for step in candidates:
            try:
                ckpt.read_state(present[step])
                ok = True
            except ckpt.CheckpointError as e:
                self.log(f"skipping checkpoint: {e}")
                ok = False
            oks = self._all_ranks([float(ok)])[:, 0]
            if oks.all():
                chosen = step
                break
            for r in np.flatnonzero(oks == 0):
                lacking[int(r)].append(step)
        newest_anywhere = max((s for r in per_rank for s in r), default=None)
        if newest_anywhere is None:
            return None
        floor = -1 if chosen is None else chosen
        for r, steps in enumerate(per_rank):
            missing = [s for s in {s for row in per_rank for s in row} if s > floor and s not in steps]
            lacking[r] = sorted(set(lacking[r]) | set(missing), reverse=True)
        gaps = [
            f"rank {r} lacks a complete checkpoint of step {', '.join(map(str, s))}"
            for r, s in lacking.items()
            if s
        ]
        if chosen is None:
            have = "; ".join(f"rank {r} has steps {steps or 'none'}" for r, steps in enumerate(per_rank))
            raise ckpt.CheckpointError(
                f"no step has a complete checkpoint on every rank under {root.parent} ({have}): restore the "
                "missing files, resume from an explicit --resume PATH, or start a new --output"
            )
        if gaps:
            self.log(f"resume: {'; '.join(gaps)}; all {self.world} ranks resume from step {chosen}")
        return present[chosen]

    def resume(self, spec: str) -> int:
        """Restore from ``auto`` (the newest step complete on every rank, or a fresh start), a
        checkpoint root / rank directory (same agreement there) or one step directory; returns
        the step. Every rank ends at the same step or the call raises."""
        if spec == "auto":
            path = self._agree_on_checkpoint(self._resume_root(self.ckpt_base()))
            if path is None:
                self.log(f"resume: no valid checkpoint in {self.ckpt_root()}, starting from step 0")
                return 0
        else:
            given = Path(spec)
            if (given / ckpt.STATE_FILE).exists():
                path = given
            else:
                root = self._resume_root(given) if (given / "rank_0").is_dir() else given
                found = self._agree_on_checkpoint(root)
                if found is None:
                    raise ckpt.CheckpointError(f"no valid checkpoint at {spec}")
                path = found
        state = ckpt.read_state(path)
        step = self._check_resumable(state, path)
        steps = self._all_ranks([step])[:, 0]
        if len(set(steps.tolist())) > 1:
            raise ckpt.CheckpointError(
                f"--resume {spec}: ranks would resume from different steps {steps.astype(int).tolist()}; "
                "give a checkpoint root (all ranks agree on a step there) or --resume auto"
            )
        ckpt.load_into(path, [self.opt])
        self.updates = int(state["updates"])
        self.loss_scale.load(state["loss_scale"])
        self.spike.load(state.get("grad_norm_history", []))
        self.tokens_seen = float(state.get("tokens_seen", 0.0))
        self.log(f"resume: step {step} from {path} (samples consumed {state['samples_consumed']})")
        return step

    def _check_resumable(self, state: dict[str, Any], path: Path) -> int:
        """Refuse a checkpoint this run cannot continue; return its step (from the samples consumed)."""
        saved_cfg = state.get("config", {})
        saved_batch = int(state.get("global_batch") or global_batch(saved_cfg))
        if saved_batch != self.global_batch:
            old = saved_cfg.get("parallel", {}).get("data_parallel", "?"), saved_cfg.get("train", {})
            raise ConfigError(
                f"checkpoint {path} was trained with a global batch of {saved_batch} rows (data_parallel "
                f"{old[0]} x batch_size {old[1].get('batch_size', '?')} x micro-batches), this run has "
                f"{self.global_batch}: the layout may change on resume, the global batch may not (keep "
                "data_parallel x batch_size x grad_accumulation_steps equal)"
            )
        world, tp, pp = state.get("layout", [self.world, 1, 1])
        if (tp, pp) != (self.layout.tp, self.layout.pp) or bool(state.get("optimizer_shard")) != bool(
            self.plan.optimizer_shard
        ):
            raise ConfigError(
                f"checkpoint {path} was written with tensor_parallel {tp}, pipeline_stages {pp}, "
                f"optimizer_shard {bool(state.get('optimizer_shard'))}; this run has {self.layout.tp}, "
                f"{self.layout.pp}, {self.plan.optimizer_shard}: those checkpoints are sliced per rank and "
                "this loop does not re-slice them (mindspore.parallel.transform_checkpoints would); keep "
                "them or start anew"
            )
        if state["trajectory_hash"] != self.hash:
            changes = diff_keys(saved_cfg, self.cfg)
            raise ConfigError(
                f"checkpoint {path} belongs to a different run (config or data changed): "
                + ("; ".join(changes[:8]) or "the data files differ")
                + ". Resume with the original config and data, or start a new output directory."
            )
        step, rest = divmod(int(state["samples_consumed"]), self.global_batch)
        if rest or step != int(state["step"]):
            raise ckpt.CheckpointError(
                f"{path}: samples consumed {state['samples_consumed']} do not make whole global batches of "
                f"{self.global_batch} ending at step {state['step']}"
            )
        if world != self.world:
            self.log(f"resume: world {world} -> {self.world} ranks, same global batch {self.global_batch}")
        return step

    def loader_position(self, step: int) -> tuple[int, int]:
        spe = self.source.steps_per_epoch(self.global_batch)
        return divmod(step, spe) if spe else (0, step)

    @property
    def rows_per_step(self) -> int:
        """Rows this data-parallel rank reads per step."""
        return self.cfg["train"]["batch_size"] * self.micro_per_step

    # ---------------------------------------------------------------- output directory
    def _claim_output(self, metrics_path: Path, resume: str | None, overwrite: bool) -> None:
        """Refuse to start over an earlier run's checkpoints or metrics unless resuming or told to
        overwrite (then delete them, saying so). Collective: all ranks refuse together."""
        root = self.ckpt_root()
        found = []
        steps = [p.name for p in ckpt.list_checkpoints(root, validate=False)]
        if steps:
            found.append(f"checkpoints in {root} ({', '.join(steps[-3:])})")
        if metrics_path.exists() and metrics_path.stat().st_size:
            n = sum(1 for ln in metrics_path.read_text(encoding="utf-8").splitlines() if ln.strip())
            found.append(f"{metrics_path} ({n} records)")
        anywhere = self._sum_over_ranks([float(bool(found))])[0] > 0
        if resume or not anywhere:
            return
        if overwrite:
            for what in (root, metrics_path, _dropped_path(metrics_path)):
                if what.is_dir():
                    shutil.rmtree(what)
                    self.log(f"--overwrite: deleted {what}")
                elif what.exists():
                    what.unlink()
                    self.log(f"--overwrite: deleted {what}")
            return
        raise ConfigError(
            f"--output {self.output} already holds a run ({'; '.join(found) or 'on another rank'}): continue "
            "it with --resume auto, or start over with --overwrite (deletes them) or a new --output"
        )

    def _truncate_metrics(self, path: Path, step: int) -> None:
        """Keep the records up to ``step``; those after it (from a run that went further than the
        checkpoint resumed) move to <name>.dropped.jsonl, never silently lost."""
        if not path.exists():
            return
        keep, drop = [], []
        for ln in path.read_text(encoding="utf-8").splitlines():
            if ln.strip():
                (keep if json.loads(ln)["step"] <= step else drop).append(ln)
        if not drop:
            return
        with open(_dropped_path(path), "a", encoding="utf-8") as f:
            f.write("".join(d + "\n" for d in drop))
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(k + "\n" for k in keep), encoding="utf-8")
        os.replace(tmp, path)
        self.log(
            f"metrics: {len(drop)} records after step {step} (the run went past its last checkpoint) "
            f"moved to {_dropped_path(path)}"
        )

    # ---------------------------------------------------------------- loop
    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.stop_requested = True
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once

    def fit(
        self, resume: str | None = None, stop_at: int | None = None, overwrite: bool = False
    ) -> list[dict[str, Any]]:
        """Train to ``train.steps`` (or stop after step ``stop_at``, checkpointing there; the LR
        schedule still spans train.steps); returns this run's step records. Refuses an output
        directory that holds an earlier run unless ``resume`` or ``overwrite``. On SIGTERM: stops
        after the current step with a checkpoint and returns normally."""
        t, c, mon = self.cfg["train"], self.cfg["checkpoint"], self.cfg["monitor"]
        began = time.monotonic()
        end = min(stop_at or t["steps"], t["steps"])
        self.updates, self.tokens_seen, self.stop_requested = 0, 0.0, False
        main = self.rank == 0
        self.output.mkdir(parents=True, exist_ok=True)
        metrics_path = self.output / ("metrics.jsonl" if main else f"metrics.rank{self.rank}.jsonl")
        self._claim_output(metrics_path, resume, overwrite)
        start = self.resume(resume) if resume else 0
        self._truncate_metrics(metrics_path, start)
        if main and start == 0:
            (self.output / "config.resolved.json").write_text(
                json.dumps(self.cfg, indent=1), encoding="utf-8"
            )
        if start >= end:
            self.log(f"nothing to do: already at step {start}")
            return []
        loader = StepLoader(
            self.source,
            t["batch_size"],
            self.micro_per_step,
            self.eos_id,
            self.pad_id,
            start,
            end,
            prefetch=t["prefetch"],
            mask_cross_document_label=bool(t["mask_cross_document_label"]),
            clock=self.clock,
        )
        previous_handler = None
        if threading.current_thread() is threading.main_thread():
            previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
        self.log(
            f"train: rank {self.rank} (dp_rank {self.dp_rank} of {self.layout.dp}), {self.split.format} "
            f"split {self.split.split!r}: {self.source.total_rows} rows, "
            f"{loader.steps_per_epoch} steps per epoch, "
            f"global batch {self.global_batch} rows x {self.model_cfg.seq_length} tokens; "
            f"{sum(p.size for p in self.params):,} parameters, {self.flops_per_token:.3g} FLOPs per token; "
            f"steps {start + 1}..{end} of {t['steps']}"
        )
        records: list[dict[str, Any]] = []
        norms: list[float | None] = []
        overflows = 0
        positions = self.global_batch * self.model_cfg.seq_length
        alarm = float(mon["data_wait_alarm"])
        peak = mon["peak_flops"]
        last_saved = start
        stopped_at = None
        t_prev = self.clock()
        wait_prev = 0.0
        try:
            with open(metrics_path, "a", encoding="utf-8") as mf:
                for step_index, micro in loader:
                    step = step_index + 1
                    by_source = self.loss_by_source(micro)
                    r = self.train_step(micro)
                    now = self.clock()
                    dt = now - t_prev
                    wait = loader.wait_seconds - wait_prev
                    t_prev, wait_prev = now, loader.wait_seconds
                    norms = [*norms[-4:], r["grad_norm"]]
                    self.tokens_seen += r["tokens"]
                    first = step == start + 1  # includes graph compilation: not a throughput sample
                    epoch, _ = loader.position(step_index)
                    share = wait / dt if dt > 0 else 0.0
                    rec: dict[str, Any] = {
                        "step": step,
                        "loss": r["loss"],
                        "lr": r["lr"],
                        "grad_norm": r["grad_norm"],
                        "grad_norm_median": self.spike.median(),
                        "grad_norm_spike": r["spike"],
                        "loss_scale": r["loss_scale"],
                        "skipped": r["skipped"],
                        "skip_reason": r["skip_reason"],
                        "step_time": dt,
                        "data_wait_share": share,
                        "data_wait_alarm": (not first) and share > alarm,
                        "tokens": r["tokens"],
                        "tokens_seen": self.tokens_seen,
                        "tokens_per_s": None if first else r["tokens"] / dt,
                        "total_tokens_per_s": None if first else positions / dt,
                        "model_flops_per_s": None if first else self.flops_per_token * positions / dt,
                        "peak_rss_mb": peak_rss_mb(),
                        "epoch": epoch,
                        "samples": step * self.global_batch,
                        # this rank's samples of the step (blend sample ids, or row ids)
                        "sample_ids": np.concatenate([f["row_ids"] for f in micro]).tolist()
                        if all("row_ids" in f for f in micro)
                        else None,
                    }
                    if by_source is not None:
                        rec["loss_by_source"] = by_source
                    if peak:
                        rec["mfu"] = None if first else rec["model_flops_per_s"] / (float(peak) * self.world)
                    device_mb = device_peak_mb(self.device)
                    if device_mb is not None:
                        rec["device_peak_mb"] = device_mb
                    if first:
                        rec["first_step_s"] = dt
                    nonfinite = not math.isfinite(r["loss"])
                    overflow = r["skip_reason"] == "overflow"
                    if (nonfinite or overflow) and not self.loss_scale.enabled:
                        what = f"loss is {r['loss']}" if nonfinite else "gradients are not finite"
                        raise TrainingError(
                            f"step {step}: {what}; last grad norms {norms}. "
                            "Check the data (ids < vocab_size?), lower lr_schedule.learning_rate, or run "
                            "with train.amp_level O0 to rule out float16 overflow."
                        )
                    if overflow:
                        overflows += 1
                        self.log(
                            f"step {step}: gradient overflow at loss scale {r['loss_scale']:g}, "
                            f"update skipped, scale now {self.loss_scale.value:g}"
                        )
                        if overflows > t["loss_scale"]["max_consecutive_overflows"]:
                            raise TrainingError(
                                f"step {step}: {overflows} consecutive overflow steps (loss scale "
                                f"{self.loss_scale.value:g}); last grad norms {norms}; the run diverged"
                            )
                    else:
                        overflows = 0
                    records.append(rec)
                    mf.write(json.dumps(rec) + "\n")
                    mf.flush()
                    if r["spike"]:
                        self._report_spike(step, r)
                    if first:
                        self.log(
                            f"step {step}: {dt:.2f} s including graph compilation (left out of throughput)"
                        )
                    if step % t["log_interval"] == 0 or step == end:
                        self._log_step(step, r, rec, records[-t["log_interval"] :], alarm)
                    e = self.cfg["eval"]
                    if e["interval"] and (step % e["interval"] == 0 or step == end):
                        ev = self.evaluate()
                        if ev is not None:
                            ev_rec = {"step": step, **ev}
                            mf.write(json.dumps(ev_rec) + "\n")
                            mf.flush()
                            self.log(
                                f"eval  {step:>6} | loss {ev['eval_loss']:.4f} | ppl {ev['eval_ppl']:.2f}"
                            )
                        # eval time is not step time
                        t_prev = self.clock()
                    if (c["save_interval"] and step % c["save_interval"] == 0) or step == end:
                        self.save(step)
                        last_saved = step
                        t_prev = self.clock()
                    if r["stop"]:
                        stopped_at = step
                        break
        finally:
            loader.close()
            if previous_handler is not None:
                signal.signal(signal.SIGTERM, previous_handler)
        if stopped_at is not None:
            if last_saved != stopped_at:
                self.save(stopped_at)
            self.log(
                f"SIGTERM: stopped after step {stopped_at} with a checkpoint (every rank at the same step); "
                "continue with --resume auto"
            )
        self._log_summary(records, alarm, peak)
        if main:
            plot_metrics(metrics_path, self.output / "loss.png")
            final = stopped_at or (records[-1]["step"] if records else start)
            self._write_run_record(metrics_path, final, time.monotonic() - began, stopped_at is not None)
        return records

    def _write_run_record(self, metrics_path: Path, step: int, seconds: float, stopped: bool) -> None:
        """run.json (pretrain/record.py) of this run as it stands after ``step``."""
        from pretrain.record import code_version, manifest_identity, write_run_record

        entries = self.entries or [DataEntry(str(self.data), 1.0, self.data.name)]
        samples = self.blend.samples_per_dataset() if self.blend is not None else [self.source.total_rows]
        data = []
        tokenizer: dict[str, Any] = {}
        for entry, split, n in zip(entries, self.splits, samples, strict=True):
            ident = manifest_identity(split.out)
            tokenizer = tokenizer or ident.pop("tokenizer")
            ident.pop("tokenizer", None)
            data.append(
                {
                    "path": entry.path,
                    "name": entry.name,
                    "weight": entry.weight,
                    "rows": split.rows,
                    "samples_in_blend": n,
                    **ident,
                }
            )
        root = self.ckpt_root() / f"step_{step:08d}"
        write_run_record(
            self.output,
            {
                "status": "stopped" if stopped else "done",
                "config": self.cfg,
                "data": data,
                "tokenizer": tokenizer,
                "code_version": code_version(),
                "metrics_file": metrics_path.name,
                "steps": step,
                "samples": step * self.global_batch,
                "tokens_seen": self.tokens_seen,
                "sources": self.labels,
                "wall_time_s": seconds,
                "final_checkpoint": str(root) if root.exists() else None,
            },
        )

    def _report_spike(self, step: int, r: dict[str, Any]) -> None:
        s = self.spike
        what = (
            f"step {step}: gradient norm {r['grad_norm']:.4g} > {s.factor:g} x the median of the last "
            f"{len(s.history)} applied steps (threshold {r['spike_threshold']:.4g}, "
            "monitor.grad_norm_spike)"
        )
        if s.policy == "stop":
            raise TrainingError(
                what
                + "; policy stop: the update was not applied and the run stops. Inspect the batch of this "
                "step, lower the learning rate, then resume from the last checkpoint"
            )
        if s.policy == "skip":
            self.log(what + "; policy skip: update not applied, the batch is consumed")
        else:
            self.log(what + "; policy warn: update applied")

    def _log_step(
        self, step: int, r: dict[str, Any], rec: dict[str, Any], window: list[dict[str, Any]], alarm: float
    ) -> None:
        gn = "skip" if r["grad_norm"] is None else f"{r['grad_norm']:.3f}"
        recent = [x["loss"] for x in window]
        avg = f" (mean {sum(recent) / len(recent):.4f})" if len(recent) > 1 else ""
        rate = (
            f"{rec['tokens_per_s']:,.0f} tok/s ({rec['total_tokens_per_s']:,.0f} with padding)"
            if rec["tokens_per_s"] is not None
            else "compiling"
        )
        self.log(
            f"step {step:>6} | loss {r['loss']:.4f}{avg} | lr {r['lr']:.3e} | grad_norm {gn} | {rate} | "
            f"data wait {100 * rec['data_wait_share']:.1f}%"
            + (f" | scale {r['loss_scale']:g}" if self.loss_scale.enabled else "")
        )
        timed = [x for x in window if x["tokens_per_s"] is not None]
        busy = sum(x["step_time"] for x in timed)
        share = sum(x["data_wait_share"] * x["step_time"] for x in timed) / busy if busy else 0.0
        if share > alarm:
            self.log(
                f"warning: waiting for data took {100 * share:.0f}% of step time over steps "
                f"{timed[0]['step']}..{timed[-1]['step']} (alarm above {100 * alarm:.0f}%, "
                "monitor.data_wait_alarm): the loader does not keep up; raise train.prefetch, check the "
                "storage, or prefer .bin shards"
            )

    def _log_summary(self, records: list[dict[str, Any]], alarm: float, peak: Any) -> None:
        timed = [x for x in records if x["tokens_per_s"] is not None]
        if not timed:
            return
        busy = sum(x["step_time"] for x in timed)
        tokens = sum(x["tokens"] for x in timed)
        positions = self.global_batch * self.model_cfg.seq_length * len(timed)
        flops = self.flops_per_token * positions / busy
        share = sum(x["data_wait_share"] * x["step_time"] for x in timed) / busy
        mfu = f", MFU {100 * flops / (float(peak) * self.world):.2f}%" if peak else ""
        device = (
            f", device peak {records[-1]['device_peak_mb']:,.0f} MB"
            if "device_peak_mb" in records[-1]
            else ""
        )
        self.log(
            f"throughput over steps {timed[0]['step']}..{timed[-1]['step']}: "
            f"{tokens / busy:,.0f} loss tokens/s, {positions / busy:,.0f} positions/s, "
            f"{flops:.3g} model FLOP/s{mfu}; data wait "
            f"{100 * share:.1f}% of step time{' (ALARM)' if share > alarm else ''}; peak RSS "
            f"{records[-1]['peak_rss_mb']:,.0f} MB{device}"
        )

    def overfit_check(self) -> tuple[bool, float, float]:
        """Train on one fixed tiny slice (overfit.rows rows) for overfit.steps steps; the check passes
        when the final loss is below overfit.max_loss. Returns (passed, first loss, last loss)."""
        o = self.cfg["overfit"]
        dp = self.layout.dp
        idx = rank_rows(self.source.order(0), 0, o["rows"] * dp, dp, self.dp_rank)
        f = self._features(next(self.source.read(idx, o["rows"])))
        self.updates = 0
        self.schedule = LRSchedule(
            "constant", self.schedule.learning_rate, 0.0, min(10, o["steps"] // 10), o["steps"]
        )
        first = last = float("nan")
        for step in range(1, o["steps"] + 1):
            r = self.train_step([f])
            if step == 1:
                first = r["loss"]
            last = r["loss"]
            if step % max(1, o["steps"] // 10) == 0 or step == o["steps"]:
                self.log(f"overfit step {step:>4} | loss {last:.4f}")
            if not math.isfinite(last):
                break
        return bool(last < o["max_loss"]), first, last


def _check_compatible(paths: list[str], splits: list[Any]) -> None:
    """Blended outputs must share the row layout and the token ids (same tokenizer)."""
    from dataprep.formats.manifest import read_manifest

    tokenizers = [(read_manifest(s.out)[1].tokenizer or {}).get("sha256") for s in splits]
    for path, sha in zip(paths[1:], tokenizers[1:], strict=True):
        if sha != tokenizers[0]:
            raise ConfigError(
                f"data: {path} was tokenized with another tokenizer than {paths[0]} (sha256 {sha} vs "
                f"{tokenizers[0]}); prepare both with the same tokenize.tokenizer file"
            )
    first = splits[0].shards
    for path, split in zip(paths[1:], splits[1:], strict=True):
        sh = split.shards
        for key in ("seq_length", "vocab_size", "eos_id", "pad_id", "bos_id"):
            if getattr(sh, key) != getattr(first, key):
                raise ConfigError(
                    f"data: {path} has {key} {getattr(sh, key)} but {paths[0]} has {getattr(first, key)}; "
                    "blended outputs must be prepared with the same tokenizer and pack.seq_length"
                )


def _dropped_path(metrics_path: Path) -> Path:
    return metrics_path.with_name(metrics_path.stem + ".dropped.jsonl")


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in Path(path).read_text(encoding="utf-8").splitlines() if ln.strip()]


def plot_metrics(metrics_path: Path, png: Path) -> None:
    """Loss curve (train loss per step, eval loss points) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = read_metrics(metrics_path) if metrics_path.exists() else []
    train = [(r["step"], r["loss"]) for r in recs if "loss" in r and r["loss"] is not None]
    evals = [(r["step"], r["eval_loss"]) for r in recs if "eval_loss" in r]
    if not train:
        return
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    steps, values = (np.asarray(v, dtype=float) for v in zip(*train, strict=True))
    ax.plot(steps, values, label="train loss", linewidth=0.8, alpha=0.45)
    window = max(1, min(50, len(values) // 10))
    if window > 1:
        smooth = np.convolve(values, np.ones(window) / window, mode="valid")
        ax.plot(steps[window - 1 :], smooth, label=f"train loss, mean of {window} steps", linewidth=1.6)
    if evals:
        ax.plot(*zip(*evals, strict=True), "o-", label="eval loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)


def main_guard(fn: Any) -> int:
    """Run ``fn``; map config/data/training errors to one-line messages and exit codes."""
    try:
        return int(fn() or 0)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (TrainingError, ckpt.CheckpointError, ShardError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
