"""One optimizer step as compiled functions, and the state a step advances.

A step trains on this rank's micro-batches of one global batch. Each micro-batch contributes
Σ(token NLL) x loss_scale / T to the loss, T = loss tokens of the whole global batch (all-reduced
before the step), so the gradient summed over micro-batches and ranks is the gradient of the global
token mean whatever the layout. One micro-batch per step: one graph (forward, backward, update);
several: a graph per micro-batch (loss and gradients), one that adds gradients up and one that
updates. The update reduces gradients across ranks (pretrain/parallel.py), unscales them, checks
they are finite, takes the global norm, clips it (train.grad_clip) and applies them only when
finite and not a gradient spike that blocks updates (monitor.grad_norm_spike skip/stop). The
learning rate goes into the graph as an input each step (pretrain/optim.py: LRSchedule indexed by
applied updates); the loss scale (float16 under amp_level O2) halves on overflow and grows after a
window of finite steps.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pretrain.config import TrainingConfig
from pretrain.context import RankContext
from pretrain.data import FEATURES
from pretrain.monitor import SpikeDetector
from pretrain.optim import LossScale, LRSchedule, build_optimizer
from pretrain.parallel import SEMI_AUTO


class TrainStep:
    """The compiled step functions of ``net`` on this rank and the state they advance: ``updates``
    (applied optimizer updates: the LR schedule's position), ``loss_scale``, ``spike`` (the gradient
    norm history), ``schedule``. ``evaluate(ids, labels, mask, pos, seg) -> (NLL sum, tokens)`` is
    the compiled forward pass of evaluation and of the loss per source."""

    def __init__(self, cfg: TrainingConfig, ctx: RankContext, net: Any):
        import mindspore as ms
        from mindspore import Tensor, amp, ops

        from pretrain.model import no_decay
        from pretrain.parallel import build_eval_cell, build_step_cells, global_norm_fn

        t = cfg.train
        self.ctx = ctx
        self.params = net.trainable_params()
        self.opt = opt = build_optimizer(self.params, cfg.optimizer, no_decay)
        self.schedule = LRSchedule.from_config(cfg.lr_schedule, t.steps)
        ls = t.loss_scale
        self.loss_scale = (
            LossScale(float(ls.init), float(ls.factor), int(ls.window), enabled=True)
            if t.amp_level == "O2"
            else LossScale()
        )
        self.spike = SpikeDetector.from_config(cfg.monitor.grad_norm_spike)
        self.updates = 0
        cells = build_step_cells(ctx.plan, net, opt)
        eval_cell = build_eval_cell(ctx.plan, net)
        reducer = cells.reducer
        global_norm = global_norm_fn()
        grad_fn = ms.value_and_grad(cells.network, None, opt.parameters)

        def micro(ids: Tensor, labels: Tensor, weights: Tensor, pos: Tensor, seg: Tensor) -> Any:
            return grad_fn(ids, labels, weights, pos, seg)

        def accumulate(acc: tuple, grads: tuple) -> tuple:
            return tuple(a + g for a, g in zip(acc, grads))  # noqa: B905 (graph syntax has no strict=)

        clip = float(t.grad_clip)

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

        def evaluate(ids: Tensor, labels: Tensor, mask: Tensor, pos: Tensor, seg: Tensor) -> Any:
            return eval_cell(ids, labels, mask, pos, seg)

        wrap = (lambda f: f) if t.mode == "pynative" else ms.jit
        self._micro, self._accumulate, self._update = wrap(micro), wrap(accumulate), wrap(update)
        self._single_step, self.evaluate = wrap(single_step), wrap(evaluate)
        self._mutable = ms.mutable if t.mode != "pynative" else (lambda x: x)

    def _inputs(self, f: dict[str, np.ndarray], weight: float) -> list[Any]:
        """Tensors of one micro-batch with the loss mask turned into loss weights."""
        from mindspore import Tensor

        w = (f["loss_mask"] * np.float32(weight)).astype(np.float32)
        arrays = [f["input_ids"], f["labels"], w, f["position_ids"], f["segment_ids"]]
        return [Tensor(np.ascontiguousarray(a)) for a in arrays]

    def __call__(self, micro_batches: list[dict[str, np.ndarray]], stop_requested: bool) -> dict[str, Any]:
        """One optimizer step over this rank's micro-batches of a global batch. Returns the loss
        (global token mean), grad norm, loss tokens of the global batch, whether the update was
        applied (``skipped``, ``skip_reason``: overflow / grad_norm_spike), ``spike`` and ``stop``
        (some rank was asked to stop: every rank sees the same value). Collective under msrun."""
        from mindspore import Tensor

        ctx, sum_over_ranks = self.ctx, self.ctx.collectives.sum_over_ranks
        local_tokens = float(sum(f["loss_mask"].sum() for f in micro_batches))
        # ranks of one replica (tp/pp) hold the same rows: divide them out of the world sum
        tokens = float(sum_over_ranks([local_tokens])[0]) / (ctx.layout.tp * ctx.layout.pp)
        scale = self.loss_scale.value
        weight = scale / max(tokens, 1.0)
        threshold = self.spike.threshold()
        blocking = threshold is not None and self.spike.blocks_update()
        max_norm = Tensor(np.float32(threshold if blocking else np.inf))
        inv_scale = Tensor(np.float32(1.0 / scale))
        lr = self.schedule.at(self.updates)
        lr_t = Tensor(np.float32(lr))
        if ctx.plan.pp > 1:  # one tensor of all micro-batches: PipelineCell cuts it in the graph
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
        if ctx.plan.mode == SEMI_AUTO:  # the graph's loss is the global view's already
            stop = bool(sum_over_ranks([float(stop_requested)])[0] > 0)
            loss_sum = local_loss
        else:
            both = sum_over_ranks([local_loss, float(stop_requested)])
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
