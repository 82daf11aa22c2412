"""Forward-only measurements: the eval loss on the held-out split, and the loss per source (each
source of blended data or of a mixed output: its rows' loss tokens alone, one forward pass per
source present in a micro-batch). Every function here is a collective under msrun.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from pretrain.config import TrainingConfig
from pretrain.context import RankContext
from pretrain.data import FEATURES
from pretrain.inputs import TrainingData
from pretrain.parallel import SEMI_AUTO


class Evaluator:
    """``forward(ids, labels, mask, pos, seg) -> (NLL sum, loss tokens)``: the compiled eval pass."""

    def __init__(
        self, cfg: TrainingConfig, ctx: RankContext, data: TrainingData, forward: Callable[..., Any]
    ):
        self.cfg, self.ctx, self.data, self.forward = cfg, ctx, data, forward
        self.labels = data.labels

    @property
    def per_source(self) -> bool:
        """Log the loss per source: blended data or a mixed output, on, and no pipeline split."""
        return bool(self.labels) and bool(self.cfg.monitor.loss_by_source) and self.ctx.plan.pp == 1

    def evaluate(self) -> dict[str, Any] | None:
        """eval_loss (token mean over all ranks), eval_ppl, eval_tokens and, per source,
        eval_loss_by_source; None without an eval split or a whole eval batch."""
        from mindspore import Tensor

        src = self.data.eval_source()
        if src is None:
            return None
        batch_size = self.cfg.train.batch_size
        eval_batch = self.ctx.layout.dp * batch_size
        n_batches = min(self.cfg.eval.max_batches, src.steps_per_epoch(eval_batch))
        if n_batches == 0:
            return None
        nll = tokens = 0.0
        by_nll, by_tokens = np.zeros(len(self.labels)), np.zeros(len(self.labels))
        for raw in src.step_batches(0, 0, n_batches, eval_batch, batch_size):
            f = self.data.features(raw)
            s, n = self.forward(*[Tensor(f[k]) for k in FEATURES])
            nll += float(s.asnumpy())
            tokens += float(n.asnumpy())
            if self.per_source:
                a, b = self._nll_by_label(f)
                by_nll, by_tokens = by_nll + a, by_tokens + b
        if self.ctx.plan.mode != SEMI_AUTO:
            nll, tokens = (float(v) for v in self.ctx.collectives.sum_over_ranks([nll, tokens]))
        loss = nll / max(tokens, 1.0)
        out: dict[str, Any] = {
            "eval_loss": loss,
            "eval_ppl": math.exp(min(loss, 50.0)),
            "eval_tokens": tokens,
        }
        if self.per_source:
            out["eval_loss_by_source"] = self._by_label(by_nll, by_tokens)
        return out

    def loss_by_source(self, micro_batches: list[dict[str, np.ndarray]]) -> dict[str, float | None] | None:
        """The step's loss per source label, with the parameters before the step's update (as the
        step's own loss); None when not logged (see :attr:`per_source`)."""
        if not self.per_source:
            return None
        nll, tokens = np.zeros(len(self.labels)), np.zeros(len(self.labels))
        for f in micro_batches:
            a, b = self._nll_by_label(f)
            nll, tokens = nll + a, tokens + b
        return self._by_label(nll, tokens)

    def _nll_by_label(self, f: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(token NLL sum, loss tokens) per source label of one micro-batch on this rank: one
        forward pass (the eval graph) per label present, the loss mask kept to its rows."""
        from mindspore import Tensor

        k = len(self.labels)
        nll, tokens = np.zeros(k), np.zeros(k)
        label = f.get("source_label")
        if label is None:
            return nll, tokens
        arrays = {name: Tensor(f[name]) for name in FEATURES if name != "loss_mask"}
        for lab in np.unique(label).tolist():
            mask = (f["loss_mask"] * (label == lab)[:, None]).astype(np.float32)
            s, n = self.forward(
                arrays["input_ids"],
                arrays["labels"],
                Tensor(mask),
                arrays["position_ids"],
                arrays["segment_ids"],
            )
            nll[lab] += float(s.asnumpy())
            tokens[lab] += float(n.asnumpy())
        return nll, tokens

    def _by_label(self, nll: np.ndarray, tokens: np.ndarray) -> dict[str, float | None]:
        """Per label: NLL / tokens summed over ranks (a collective), None without tokens."""
        if self.ctx.plan.mode != SEMI_AUTO:
            both = self.ctx.collectives.sum_over_ranks([*nll.tolist(), *tokens.tolist()])
            nll, tokens = both[: len(self.labels)], both[len(self.labels) :]
        return {
            label: (float(a / b) if b > 0 else None)
            for label, a, b in zip(self.labels, nll, tokens, strict=True)
        }
