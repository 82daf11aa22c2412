"""Optimizers (AdamW, LAMB) with weight-decay groups, learning-rate schedules and the dynamic loss
scale policy.

The schedule is a pure function of the number of optimizer updates applied so far (skipped
overflow steps do not advance it), so its whole state is one integer kept in the checkpoint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pretrain.config import LRScheduleSection, OptimizerSection


@dataclass(frozen=True)
class LRSchedule:
    """Warmup (linear from 0) then ``cosine`` to min_lr, ``wsd`` (warmup-stable-decay: constant,
    then linear decay to min_lr over the last ``decay_ratio`` of steps) or ``constant``."""

    type: str
    learning_rate: float
    min_lr: float
    warmup_steps: int
    total_steps: int
    decay_ratio: float = 0.1

    @classmethod
    def from_config(cls, s: LRScheduleSection, train_steps: int) -> LRSchedule:
        total = int(s.total_steps or train_steps)
        warmup = round(s.warmup_ratio * total) if s.warmup_ratio is not None else int(s.warmup_steps)
        return cls(s.type, float(s.learning_rate), float(s.min_lr), warmup, total, float(s.decay_ratio))

    def at(self, update: int) -> float:
        """Learning rate for the optimizer update number ``update`` (0-based)."""
        lr, lo = self.learning_rate, self.min_lr
        if update < self.warmup_steps:
            return lr * (update + 1) / self.warmup_steps
        if self.type == "constant":
            return lr
        if self.type == "cosine":
            span = max(1, self.total_steps - self.warmup_steps)
            progress = min(1.0, (update - self.warmup_steps) / span)
            return lo + 0.5 * (lr - lo) * (1.0 + math.cos(math.pi * progress))
        decay_steps = max(1, round(self.decay_ratio * self.total_steps))
        decay_start = self.total_steps - decay_steps
        if update < decay_start:
            return lr
        progress = min(1.0, (update - decay_start + 1) / decay_steps)
        return lr + (lo - lr) * progress


def build_optimizer(params: list[Any], opt_cfg: OptimizerSection, no_decay: Any) -> Any:
    """MindSpore optimizer over ``params`` with two groups: decayed matrices and exempt parameters
    (``no_decay(name, ndim)`` true: biases, norm scales). The learning rate is a Parameter that the
    trainer sets before each update."""
    from mindspore import nn

    decay = [p for p in params if not no_decay(p.name, len(p.shape))]
    exempt = [p for p in params if no_decay(p.name, len(p.shape))]
    groups = [
        {"params": decay, "weight_decay": float(opt_cfg.weight_decay)},
        {"params": exempt, "weight_decay": 0.0},
    ]
    groups = [g for g in groups if g["params"]]
    kwargs = {
        "beta1": float(opt_cfg.beta1),
        "beta2": float(opt_cfg.beta2),
        "eps": float(opt_cfg.eps),
    }
    if opt_cfg.type == "lamb":
        import mindspore as ms

        if ms.get_context("device_target") == "CPU":  # nn.Lamb's fused kernel does not exist on CPU
            return lamb_composite_class()(groups, learning_rate=0.0, **kwargs)
        return nn.Lamb(groups, learning_rate=0.0, **kwargs)
    return nn.AdamWeightDecay(groups, learning_rate=0.0, **kwargs)


def lamb_composite_class() -> type:
    """LAMB (You et al., 2019: arXiv 1904.00962) from elementary ops, for backends where MindSpore's
    fused Lamb kernel is missing (CPU). Same state names as nn.Lamb (lamb_m.*, lamb_v.*, global_step).

    Per parameter w with gradient g at step t: m, v = Adam moments; r = m_hat / (sqrt(v_hat) + eps)
    + weight_decay * w; w -= lr * (||w|| / ||r||) * r, the trust ratio taken as 1 when a norm is 0.
    """
    import mindspore as ms
    from mindspore import nn, ops

    class LambComposite(nn.Optimizer):
        def __init__(
            self,
            params: Any,
            learning_rate: float,
            beta1: float,
            beta2: float,
            eps: float,
            weight_decay: float = 0.0,
        ):
            super().__init__(learning_rate, params, weight_decay)
            self.beta1, self.beta2, self.eps = beta1, beta2, eps
            self.moments1 = self._parameters.clone(prefix="lamb_m", init="zeros")
            self.moments2 = self._parameters.clone(prefix="lamb_v", init="zeros")

        def construct(self, gradients: tuple) -> Any:
            lr = self.get_lr()
            decays = self.get_weight_decay()
            self.assignadd(self.global_step, self.global_step_increase_tensor)
            t = self.global_step.astype(ms.float32)
            bias1 = 1.0 - ops.pow(self.beta1, t)
            bias2 = 1.0 - ops.pow(self.beta2, t)
            for i in range(len(self._parameters)):
                w, m, v, g = self._parameters[i], self.moments1[i], self.moments2[i], gradients[i]
                wd = decays[i] if self.is_group else decays
                m_new = self.beta1 * m + (1.0 - self.beta1) * g
                v_new = self.beta2 * v + (1.0 - self.beta2) * g * g
                r = (m_new / bias1) / (ops.sqrt(v_new / bias2) + self.eps) + wd * w
                w_norm, r_norm = ops.norm(w), ops.norm(r)
                ok = ops.logical_and(w_norm > 0, r_norm > 0)
                trust = ops.select(ok, w_norm / r_norm, ops.ones_like(w_norm))
                ops.assign(m, m_new)
                ops.assign(v, v_new)
                ops.assign(w, w - lr * trust * r)
            return True

    return LambComposite


@dataclass
class LossScale:
    """Dynamic loss scale: halve (``factor``) on overflow and skip the update; multiply by ``factor``
    after ``window`` consecutive finite steps. Fixed at 1.0 when disabled (float32 training)."""

    value: float = 1.0
    factor: float = 2.0
    window: int = 1000
    good_steps: int = 0
    enabled: bool = False

    def update(self, finite: bool) -> None:
        if not self.enabled:
            return
        if finite:
            self.good_steps += 1
            if self.good_steps >= self.window:
                self.value *= self.factor
                self.good_steps = 0
        else:
            self.value = max(1.0, self.value / self.factor)
            self.good_steps = 0

    def state(self) -> dict[str, Any]:
        return {"value": self.value, "good_steps": self.good_steps}

    def load(self, state: dict[str, Any]) -> None:
        self.value, self.good_steps = float(state["value"]), int(state["good_steps"])
