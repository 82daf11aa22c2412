"""The training loop: builds model, optimizer and data for this rank, runs compiled steps, logs,
evaluates, checkpoints and resumes exactly. ``Trainer`` orchestrates the parts:

* pretrain/context.py: MindSpore's context, this rank in the dp x tp x pp layout, collectives;
* pretrain/inputs.py: the prepared output(s), blended or not, this rank's rows, the eval rows;
* pretrain/init_from.py: continued pretraining from a Hugging Face or MindSpore checkpoint;
* pretrain/step.py: the compiled step (loss scaling, gradient accumulation, clipping, the update);
* pretrain/evaluation.py: the eval loss and the loss per source;
* pretrain/checkpoint.py: atomic checkpoints, the resume step every rank agrees on;
* pretrain/metrics.py: metrics.jsonl, throughput, the data-wait alarm, log lines, run.json.

One optimizer step trains on one global batch of G = dp x batch_size x micro-batches rows
(micro-batches = grad_accumulation_steps, or micro_batch_num under pipeline parallelism); dp 2 x
batch 2 and dp 1 x batch 4 take the same step on the same rows (pretrain/step.py; pretrain/data.py
for the order).

Resumption: checkpoints record the samples consumed (step x G), the optimizer-update count that
positions the LR schedule, the loss scale and the gradient-norm history. ``--resume auto`` takes
the newest step whose checkpoint is complete on every rank. A run may resume under another
data-parallel size or micro-batch split as long as G and everything else that shapes the
trajectory are unchanged; the tensor/pipeline split and optimizer sharding must stay (their
checkpoints are sliced). SIGTERM ends the run after the current step with a checkpoint (all ranks
stop at the same step).
"""

from __future__ import annotations

import json
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats.readers_for_training import ShardError
from pretrain import checkpoint as ckpt
from pretrain.config import ConfigError, TrainingConfig, resolve_against_manifest, trajectory_hash
from pretrain.context import init_rank, layout_table, model_config_dict
from pretrain.data import RowSource, StepLoader, rank_rows
from pretrain.evaluation import Evaluator
from pretrain.init_from import InitFrom
from pretrain.inputs import TrainingData
from pretrain.metrics import (
    StepMetrics,
    TrainingError,
    claim_output,
    plot_metrics,
    read_metrics,
    truncate_metrics,
    write_run,
)
from pretrain.monitor import SpikeDetector, flops_per_token
from pretrain.optim import LossScale, LRSchedule
from pretrain.step import TrainStep

__all__ = ["Trainer", "TrainingError", "layout_table", "main_guard", "read_metrics"]


def _log(msg: str) -> None:
    print(msg, flush=True)


class Trainer:
    """Training on the prepared output ``data`` (or the config's blend) into ``output``: metrics,
    loss.png, config.resolved.json, run.json and checkpoints. ``log`` and ``clock`` (seconds: step
    times, data wait) may be replaced after construction."""

    def __init__(
        self,
        cfg: TrainingConfig,
        data: str | Path | None,
        output: str | Path,
        log: Callable[[str], None] = _log,
        allow_config_mismatch: Iterable[str] = (),
    ):
        self.cfg, self.log = cfg, log
        self.output = Path(output)
        self.data = Path(data) if data else Path(cfg.data[0].path) if cfg.data else Path(".")
        self.stop_requested = False  # set by SIGTERM; the run stops after the current step
        self.clock: Callable[[], float] = time.perf_counter
        self.tokens_seen = 0.0
        say = self._say
        self.ctx = ctx = init_rank(cfg)
        self.layout, self.rank, self.world, self.dp_rank = ctx.layout, ctx.rank, ctx.world, ctx.dp_rank
        self.inputs = inputs = TrainingData(cfg, self.data, ctx.layout.dp, ctx.dp_rank, ctx.plan.pp > 1, say)
        init = InitFrom(cfg.model.init_from, say) if cfg.model.init_from else None
        resolve_against_manifest(cfg, inputs.shards.to_json(), init.vocab_rows if init else None)
        if init is not None:
            init.check(cfg.to_dict()["model"], allow_config_mismatch, self.data, inputs.split.out)
        self._build_model(init)
        self.step = TrainStep(cfg, ctx, self.net)
        self.evaluator = Evaluator(cfg, ctx, inputs, self.step.evaluate)
        self.global_batch = cfg.global_batch
        self.micro_per_step = cfg.micro_batches_per_step
        self.hash = trajectory_hash(cfg, inputs.identity)
        self.flops_per_token = flops_per_token(self.model_cfg)
        base = Path(cfg.checkpoint.dir or self.output / "checkpoints")
        self.checkpoints = ckpt.Checkpointer(base, ctx, say)

    def _say(self, msg: str) -> None:
        self.log(msg)  # through the attribute: tests and callers replace ``log`` after construction

    def _build_model(self, init: InitFrom | None) -> None:
        from pretrain.model import (
            LlamaForCausalLM,
            ModelConfig,
            apply_parallel_strategy,
            check_parallel_shape,
        )

        m = model_config_dict(self.cfg)
        m["compute_dtype"] = "float16" if self.cfg.train.amp_level == "O2" else "float32"
        self.model_cfg = ModelConfig.from_dict(m)
        self.net = LlamaForCausalLM(self.model_cfg, seed=int(self.cfg.seed))
        layout = self.layout
        if layout.tp * layout.pp > 1:  # semi_auto_parallel (Ascend/GPU only; not run on CPU)
            problems = check_parallel_shape(self.model_cfg, layout.tp, layout.pp)
            if problems:
                raise ConfigError("parallel layout does not fit the model: " + "; ".join(problems))
            apply_parallel_strategy(self.net, layout.dp, layout.tp, layout.pp)
        if init is not None:
            init.load_into(self.net)

    # ---------------------------------------------------------------- the step's state
    @property
    def params(self) -> list[Any]:
        return self.step.params

    @property
    def opt(self) -> Any:
        return self.step.opt

    @property
    def updates(self) -> int:
        """Applied optimizer updates (the LR schedule's position)."""
        return self.step.updates

    @updates.setter
    def updates(self, value: int) -> None:
        self.step.updates = value

    @property
    def spike(self) -> SpikeDetector:
        return self.step.spike

    @property
    def loss_scale(self) -> LossScale:
        return self.step.loss_scale

    @property
    def source(self) -> RowSource:
        """This rank's training rows."""
        return self.inputs.source

    @property
    def eos_id(self) -> int:
        return self.inputs.eos_id

    @property
    def pad_id(self) -> int | None:
        return self.inputs.pad_id

    @property
    def rows_per_step(self) -> int:
        """Rows this data-parallel rank reads per step."""
        return self.cfg.train.batch_size * self.micro_per_step

    def train_step(self, micro_batches: list[dict[str, np.ndarray]]) -> dict[str, Any]:
        """One optimizer step (pretrain/step.py: TrainStep.__call__); a collective under msrun."""
        return self.step(micro_batches, self.stop_requested)

    def evaluate(self) -> dict[str, Any] | None:
        return self.evaluator.evaluate()

    # ---------------------------------------------------------------- checkpoints
    def save(self, step: int) -> Path:
        """Write this rank's checkpoint of ``step``; once every rank has written it, prune old ones."""
        spe = self.source.steps_per_epoch(self.global_batch)
        epoch, in_epoch = divmod(step, spe) if spe else (0, step)
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
            "config": self.cfg.to_dict(),
            "rank": self.rank,
            "layout": [self.layout.world, self.layout.tp, self.layout.pp],
            "optimizer_shard": self.ctx.plan.optimizer_shard,
        }
        return self.checkpoints.save(step, self.opt, state, int(self.cfg.checkpoint.keep_last))

    def resume(self, spec: str) -> int:
        """Restore from ``auto`` (the newest step complete on every rank, or a fresh start), a
        checkpoint root / rank directory or one step directory; returns the step. Every rank ends
        at the same step or the call raises."""
        path = self.checkpoints.find(spec)
        if path is None:
            self.log(f"resume: no valid checkpoint in {self.checkpoints.root}, starting from step 0")
            return 0
        step, state = self.checkpoints.check_resumable(
            spec, path, self.global_batch, self.hash, self.cfg.to_dict()
        )
        ckpt.load_into(path, [self.opt])
        self.updates = int(state["updates"])
        self.loss_scale.load(state["loss_scale"])
        self.spike.load(state.get("grad_norm_history", []))
        self.tokens_seen = float(state.get("tokens_seen", 0.0))
        self.log(f"resume: step {step} from {path} (samples consumed {state['samples_consumed']})")
        return step

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
        t, c, mon, e = self.cfg.train, self.cfg.checkpoint, self.cfg.monitor, self.cfg.eval
        began = time.monotonic()
        end = min(stop_at or t.steps, t.steps)
        self.updates, self.tokens_seen, self.stop_requested = 0, 0.0, False
        main = self.rank == 0
        self.output.mkdir(parents=True, exist_ok=True)
        metrics_path = self.output / ("metrics.jsonl" if main else f"metrics.rank{self.rank}.jsonl")
        sum_over_ranks = self.ctx.collectives.sum_over_ranks
        claim_output(
            self.output, self.checkpoints.root, metrics_path, resume, overwrite, sum_over_ranks, self._say
        )
        start = self.resume(resume) if resume else 0
        truncate_metrics(metrics_path, start, self._say)
        if main and start == 0:
            resolved = json.dumps(self.cfg.to_dict(), indent=1)
            (self.output / "config.resolved.json").write_text(resolved, encoding="utf-8")
        if start >= end:
            self.log(f"nothing to do: already at step {start}")
            return []
        loader = StepLoader(
            self.source,
            t.batch_size,
            self.micro_per_step,
            self.eos_id,
            self.pad_id,
            start,
            end,
            prefetch=t.prefetch,
            mask_cross_document_label=bool(t.mask_cross_document_label),
            clock=self.clock,
        )
        previous_handler = None
        if threading.current_thread() is threading.main_thread():
            previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
        split = self.inputs.split
        self.log(
            f"train: rank {self.rank} (dp_rank {self.dp_rank} of {self.layout.dp}), {split.format} "
            f"split {split.split!r}: {self.source.total_rows} rows, "
            f"{loader.steps_per_epoch} steps per epoch, "
            f"global batch {self.global_batch} rows x {self.model_cfg.seq_length} tokens; "
            f"{sum(p.size for p in self.params):,} parameters, {self.flops_per_token:.3g} FLOPs per token; "
            f"steps {start + 1}..{end} of {t.steps}"
        )
        last_saved, stopped_at = start, None
        t_prev, wait_prev = self.clock(), 0.0
        try:
            with open(metrics_path, "a", encoding="utf-8") as mf:
                metrics = StepMetrics(
                    mf,
                    self.spike,
                    self.loss_scale,
                    self._say,
                    positions=self.global_batch * self.model_cfg.seq_length,
                    flops_per_token=self.flops_per_token,
                    world=self.world,
                    device=self.ctx.device,
                    data_wait_alarm=mon.data_wait_alarm,
                    peak_flops=mon.peak_flops,
                    log_interval=t.log_interval,
                    max_consecutive_overflows=t.loss_scale.max_consecutive_overflows,
                )
                for step_index, micro in loader:
                    step = step_index + 1
                    by_source = self.evaluator.loss_by_source(micro)
                    r = self.train_step(micro)
                    now = self.clock()
                    dt, wait = now - t_prev, loader.wait_seconds - wait_prev
                    t_prev, wait_prev = now, loader.wait_seconds
                    self.tokens_seen += r["tokens"]
                    metrics.step(
                        step,
                        r,
                        first=step == start + 1,  # includes graph compilation: not a throughput sample
                        last=step == end,
                        step_time=dt,
                        wait=wait,
                        tokens_seen=self.tokens_seen,
                        epoch=loader.position(step_index)[0],
                        samples=step * self.global_batch,
                        micro=micro,
                        by_source=by_source,
                    )
                    if e.interval and (step % e.interval == 0 or step == end):
                        ev = self.evaluate()
                        if ev is not None:
                            metrics.eval(step, ev)
                        t_prev = self.clock()  # eval time is not step time
                    if (c.save_interval and step % c.save_interval == 0) or step == end:
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
        metrics.summary()
        if main:
            plot_metrics(metrics_path, self.output / "loss.png")
            final = stopped_at or (metrics.records[-1]["step"] if metrics.records else start)
            write_run(
                self.output,
                self.inputs,
                self.cfg.to_dict(),
                metrics_path,
                step=final,
                samples=final * self.global_batch,
                tokens_seen=self.tokens_seen,
                seconds=time.monotonic() - began,
                stopped=stopped_at is not None,
                final_checkpoint=self.checkpoints.root / f"step_{final:08d}",
            )
        return metrics.records

    def overfit_check(self) -> tuple[bool, float, float]:
        """Train on one fixed tiny slice (overfit.rows rows) for overfit.steps steps; the check passes
        when the final loss is below overfit.max_loss. Returns (passed, first loss, last loss)."""
        o = self.cfg.overfit
        dp = self.layout.dp
        idx = rank_rows(self.source.order(0), 0, o.rows * dp, dp, self.dp_rank)
        f = self.inputs.features(next(self.source.read(idx, o.rows)))
        self.updates = 0
        lr = self.step.schedule.learning_rate
        self.step.schedule = LRSchedule("constant", lr, 0.0, min(10, o.steps // 10), o.steps)
        first = last = float("nan")
        for step in range(1, o.steps + 1):
            r = self.train_step([f])
            if step == 1:
                first = r["loss"]
            last = r["loss"]
            if step % max(1, o.steps // 10) == 0 or step == o.steps:
                self.log(f"overfit step {step:>4} | loss {last:.4f}")
            if not math.isfinite(last):
                break
        return bool(last < o.max_loss), first, last


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
