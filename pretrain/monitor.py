"""What the loop measures besides the loss: gradient-norm spikes, model FLOPs per token (for
throughput and MFU) and memory.

Model FLOPs per token (training: forward + backward = 3 x forward), as in PaLM (Chowdhery et al.
2022, appendix B) and Megatron-LM (Narayanan et al. 2021):

    6 * N + 12 * L * H * Q * T

N = parameters that enter a matrix product (attention and MLP projections, lm_head; with tied
embeddings the embedding matrix counted once as the output projection; not the embedding lookup
and not the norm scales), L layers, H query heads, Q head dimension, T = seq_length. The attention
term counts QKᵀ and AV over the full T x T square, with no discount for the causal or
document mask, so the figure is comparable with published MFU numbers. For a GPT with tied
embeddings this is Megatron's 72·B·s·l·h²·(1 + s/6h + V/12lh) per batch. Recomputation is not
counted (that would be hardware FLOPs).

Nothing here imports MindSpore at module level.
"""

from __future__ import annotations

import resource
import statistics
import sys
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pretrain.config import GradNormSpikeSection


def flops_per_token(cfg: Any) -> float:
    """Model FLOPs per token of one training step for a ModelConfig (see the module docstring)."""
    h, d, layers = cfg.hidden_size, cfg.head_dim, cfg.num_layers
    q, kv, ff = cfg.num_heads * d, cfg.num_kv_heads * d, cfg.intermediate_size
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * ff  # q, k, v, o; gate, up, down
    if cfg.qkv_bias:
        per_layer += q + 2 * kv
    matmul_params = layers * per_layer + cfg.vocab_size * h  # + the output projection
    return 6.0 * matmul_params + 12.0 * layers * cfg.num_heads * d * cfg.seq_length


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, MB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KB on Linux


def device_peak_mb(device: str) -> float | None:
    """Peak device memory held by tensors, MB, where MindSpore reports it (Ascend/GPU); None on CPU
    (``mindspore.runtime.max_memory_allocated`` always returns 0 there)."""
    if device == "CPU":
        return None
    import mindspore as ms

    return ms.runtime.max_memory_allocated() / (1 << 20)


@dataclass
class SpikeDetector:
    """Gradient-norm spike: a norm above ``factor`` x the median of the last ``window`` norms of
    applied updates, once ``min_history`` of them are known. The history is part of the
    checkpoint so that a resumed run decides exactly as an uninterrupted one."""

    policy: str = "warn"  # off | warn | skip | stop
    factor: float = 5.0
    window: int = 50
    min_history: int = 10
    history: deque[float] = field(default_factory=deque)

    @classmethod
    def from_config(cls, c: GradNormSpikeSection) -> SpikeDetector:
        return cls(c.policy, float(c.factor), int(c.window), int(c.min_history), deque())

    def median(self) -> float | None:
        return statistics.median(self.history) if self.history else None

    def threshold(self) -> float | None:
        """The norm above which the next step is a spike (None: not checked yet, or policy off)."""
        if self.policy == "off" or len(self.history) < self.min_history:
            return None
        return self.factor * statistics.median(self.history)

    def blocks_update(self) -> bool:
        """Whether a spike keeps the update from being applied (skip and stop)."""
        return self.policy in ("skip", "stop")

    def record(self, norm: float) -> None:
        """Add the norm of an applied update."""
        self.history.append(float(norm))
        while len(self.history) > self.window:
            self.history.popleft()

    def state(self) -> list[float]:
        return list(self.history)

    def load(self, values: list[float]) -> None:
        self.history = deque(float(v) for v in values[-self.window :])
