"""A decoder-only transformer of the LLaMA family in MindSpore: RMSNorm, rotary positions (the
Hugging Face "rotate half" convention), SwiGLU feed-forward, grouped-query attention, optional
document-boundary attention and per-layer recompute.

Parameter names and shapes follow Hugging Face ``LlamaForCausalLM`` exactly
(``model.embed_tokens.weight`` [vocab, hidden], ``model.layers.{i}.self_attn.q_proj.weight``
[heads*head_dim, hidden], ..., ``model.norm.weight``, ``lm_head.weight`` [vocab, hidden]), so
converting a safetensors checkpoint is a name-for-name copy (see ``pretrain/convert_hf.py``).

Precision follows the MindFormers knobs: parameters live in float32; matrix products run in
``compute_dtype`` (float32 or float16); RMSNorm, softmax and the loss run in float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn, ops

DTYPES = {"float32": ms.float32, "float16": ms.float16}


@dataclass
class ModelConfig:
    """Model section of the training config (names as practitioners know them from MindFormers/HF)."""

    vocab_size: int
    seq_length: int
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int | None = None  # None: same as num_heads (no grouping)
    intermediate_size: int | None = None  # None: the LLaMA rule 8/3 * hidden, rounded up to 32
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    qkv_bias: bool = False  # Qwen2-style biases on q/k/v projections
    # attend only within the document and restart positions at each document (boundaries from the
    # shards); False: plain causal attention over the whole packed row with positions 0..S-1
    document_attention: bool = True
    recompute: bool = False
    compute_dtype: str = "float32"
    init_std: float = 0.02
    type: str = "llama"

    def __post_init__(self) -> None:
        if self.num_kv_heads is None:
            self.num_kv_heads = self.num_heads
        if self.intermediate_size is None:
            self.intermediate_size = 32 * math.ceil(8 * self.hidden_size / 3 / 32)
        problems = []
        if self.type != "llama":
            problems.append(f"model.type {self.type!r} is not supported (only 'llama')")
        if self.hidden_size % self.num_heads:
            problems.append(f"hidden_size {self.hidden_size} is not a multiple of num_heads {self.num_heads}")
        if self.num_heads % self.num_kv_heads:
            problems.append(
                f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}"
            )
        if (self.hidden_size // self.num_heads) % 2:
            problems.append("head dimension (hidden_size / num_heads) must be even for rotary positions")
        if self.compute_dtype not in DTYPES:
            problems.append(f"compute_dtype must be one of {sorted(DTYPES)}, got {self.compute_dtype!r}")
        if problems:
            raise ValueError("model config: " + "; ".join(problems))

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"model config: unknown keys {unknown} (known: {sorted(known)})")
        return cls(**d)


# The fields that fix a checkpoint's weights and how they compute (besides its vocabulary): what a
# checkpoint converted from Hugging Face or exported to it carries.
WEIGHT_KEYS = (
    "hidden_size",
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "intermediate_size",
    "rms_norm_eps",
    "rope_theta",
    "tie_word_embeddings",
    "qkv_bias",
)


def rope_tables(head_dim: int, max_positions: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin tables float32 [max_positions, head_dim] in the HF layout (frequencies repeated twice)."""
    inv_freq = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    angles = np.outer(np.arange(max_positions, dtype=np.float64), inv_freq)
    emb = np.concatenate([angles, angles], axis=-1)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


class Linear(nn.Cell):
    """y = x @ weight.T (+ bias); weight float32 [out, in], product in ``compute_dtype``."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        rng: np.random.Generator,
        std: float,
        compute_dtype: Any,
        bias: bool = False,
    ):
        super().__init__()
        w = rng.normal(0.0, std, size=(out_features, in_features)).astype(np.float32)
        self.weight = Parameter(Tensor(w), name="weight")
        self.bias = Parameter(Tensor(np.zeros(out_features, np.float32)), name="bias") if bias else None
        self.compute_dtype = compute_dtype
        self.matmul = ops.MatMul(transpose_b=True)

    def shard(self, strategy: tuple) -> None:
        """Tensor-parallel strategy for the product (used only in semi_auto_parallel mode)."""
        self.matmul.shard(strategy)

    def construct(self, x: Tensor) -> Tensor:
        shape = x.shape
        y = self.matmul(
            x.reshape(-1, shape[-1]).astype(self.compute_dtype), self.weight.astype(self.compute_dtype)
        )
        if self.bias is not None:
            y = y + self.bias.astype(self.compute_dtype)
        return y.reshape(*shape[:-1], -1)


class Embedding(nn.Cell):
    """Token embedding table float32 [vocab, hidden]; lookup returns float32 [..., hidden]."""

    def __init__(self, vocab_size: int, hidden_size: int, rng: np.random.Generator, std: float):
        super().__init__()
        w = rng.normal(0.0, std, size=(vocab_size, hidden_size)).astype(np.float32)
        self.weight = Parameter(Tensor(w), name="weight")

    def construct(self, ids: Tensor) -> Tensor:
        return ops.gather(self.weight, ids, 0)


class RMSNorm(nn.Cell):
    """x / rms(x) * weight, computed in float32, returned in the input dtype."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = Parameter(Tensor(np.ones(dim, np.float32)), name="weight")
        self.eps = eps

    def construct(self, x: Tensor) -> Tensor:
        xf = x.astype(ms.float32)
        var = ops.mean(xf * xf, -1, keep_dims=True)
        return (xf * ops.rsqrt(var + self.eps) * self.weight).astype(x.dtype)


def rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return ops.cat((-x[..., half:], x[..., :half]), -1)


class Attention(nn.Cell):
    def __init__(self, cfg: ModelConfig, rng: np.random.Generator):
        super().__init__()
        cdt = DTYPES[cfg.compute_dtype]
        h, d, kv = cfg.num_heads, cfg.head_dim, cfg.num_kv_heads
        std = cfg.init_std
        self.q_proj = Linear(cfg.hidden_size, h * d, rng, std, cdt, cfg.qkv_bias)
        self.k_proj = Linear(cfg.hidden_size, kv * d, rng, std, cdt, cfg.qkv_bias)
        self.v_proj = Linear(cfg.hidden_size, kv * d, rng, std, cdt, cfg.qkv_bias)
        self.o_proj = Linear(h * d, cfg.hidden_size, rng, std / math.sqrt(2 * cfg.num_layers), cdt)
        self.num_heads, self.num_kv_heads, self.head_dim = h, kv, d
        self.scale = 1.0 / math.sqrt(d)
        self.compute_dtype = cdt
        self.qk = ops.BatchMatMul(transpose_b=True)
        self.pv = ops.BatchMatMul()

    def _repeat_kv(self, x: Tensor) -> Tensor:
        rep = self.num_heads // self.num_kv_heads
        if rep == 1:
            return x
        b, kv, s, d = x.shape
        return ops.broadcast_to(x.reshape(b, kv, 1, s, d), (b, kv, rep, s, d)).reshape(b, kv * rep, s, d)

    def construct(self, x: Tensor, cos: Tensor, sin: Tensor, mask_bias: Tensor) -> Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).reshape(b, s, self.num_heads, self.head_dim).transpose(0, 2, 1, 3)
        k = self.k_proj(x).reshape(b, s, self.num_kv_heads, self.head_dim).transpose(0, 2, 1, 3)
        v = self.v_proj(x).reshape(b, s, self.num_kv_heads, self.head_dim).transpose(0, 2, 1, 3)
        q = (q * cos + rotate_half(q) * sin).astype(self.compute_dtype)
        k = (k * cos + rotate_half(k) * sin).astype(self.compute_dtype)
        k, v = self._repeat_kv(k), self._repeat_kv(v)
        scores = self.qk(q, k).astype(ms.float32) * self.scale + mask_bias
        probs = ops.softmax(scores, -1).astype(self.compute_dtype)
        out = self.pv(probs, v).transpose(0, 2, 1, 3).reshape(b, s, self.num_heads * self.head_dim)
        return self.o_proj(out)


class MLP(nn.Cell):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig, rng: np.random.Generator):
        super().__init__()
        cdt = DTYPES[cfg.compute_dtype]
        std = cfg.init_std
        self.gate_proj = Linear(cfg.hidden_size, cfg.intermediate_size, rng, std, cdt)
        self.up_proj = Linear(cfg.hidden_size, cfg.intermediate_size, rng, std, cdt)
        self.down_proj = Linear(
            cfg.intermediate_size, cfg.hidden_size, rng, std / math.sqrt(2 * cfg.num_layers), cdt
        )

    def construct(self, x: Tensor) -> Tensor:
        return self.down_proj(ops.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Cell):
    def __init__(self, cfg: ModelConfig, rng: np.random.Generator):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, rng)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg, rng)

    def construct(self, x: Tensor, cos: Tensor, sin: Tensor, mask_bias: Tensor) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask_bias).astype(x.dtype)
        return x + self.mlp(self.post_attention_layernorm(x)).astype(x.dtype)


class LlamaModel(nn.Cell):
    def __init__(self, cfg: ModelConfig, rng: np.random.Generator):
        super().__init__()
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size, rng, cfg.init_std)
        self.layers = nn.CellList([DecoderLayer(cfg, rng) for _ in range(cfg.num_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        cos, sin = rope_tables(cfg.head_dim, cfg.seq_length, cfg.rope_theta)
        self.cos_table, self.sin_table = Tensor(cos), Tensor(sin)
        self.document_attention = cfg.document_attention
        self.causal = Tensor(np.tril(np.ones((cfg.seq_length, cfg.seq_length), np.bool_)))
        self.positions = Tensor(np.arange(cfg.seq_length, dtype=np.int32))
        if cfg.recompute:
            for layer in self.layers:
                layer.recompute()

    def construct(self, input_ids: Tensor, position_ids: Tensor, segment_ids: Tensor) -> Tensor:
        """input_ids, position_ids, segment_ids int32 [B, S] -> hidden states float32 [B, S, hidden]
        (position_ids and segment_ids are ignored without document_attention)."""
        s = input_ids.shape[1]
        x = self.embed_tokens(input_ids)
        if not self.document_attention:  # plain causal LM over the packed row: continuous positions
            position_ids = ops.broadcast_to(self.positions[:s].expand_dims(0), input_ids.shape)
        cos = ops.gather(self.cos_table, position_ids, 0).expand_dims(1)  # [B, 1, S, D]
        sin = ops.gather(self.sin_table, position_ids, 0).expand_dims(1)
        allowed = self.causal[:s, :s].expand_dims(0)
        if self.document_attention:
            allowed = ops.logical_and(allowed, segment_ids.expand_dims(2) == segment_ids.expand_dims(1))
        mask_bias = ops.select(
            allowed, ops.zeros_like(allowed, dtype=ms.float32), ops.full_like(allowed, -1e9, dtype=ms.float32)
        ).expand_dims(1)
        for layer in self.layers:
            x = layer(x, cos, sin, mask_bias)
        return self.norm(x)


class LlamaForCausalLM(nn.Cell):
    """logits = lm_head(model(...)); ``loss`` returns (Σ masked token NLL, token count)."""

    def __init__(self, cfg: ModelConfig, seed: int = 0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.config = cfg
        self.model = LlamaModel(cfg, rng)
        if cfg.tie_word_embeddings:
            self.lm_head = None
        else:
            self.lm_head = Linear(
                cfg.hidden_size, cfg.vocab_size, rng, cfg.init_std, DTYPES[cfg.compute_dtype]
            )

    def logits(self, input_ids: Tensor, position_ids: Tensor, segment_ids: Tensor) -> Tensor:
        """float32 [B, S, vocab]."""
        h = self.model(input_ids, position_ids, segment_ids)
        if self.lm_head is None:
            w = self.model.embed_tokens.weight.astype(DTYPES[self.config.compute_dtype])
            b, s, d = h.shape
            out = ops.matmul(h.reshape(b * s, d).astype(w.dtype), w.T).reshape(b, s, -1)
        else:
            out = self.lm_head(h)
        return out.astype(ms.float32)

    def construct(
        self, input_ids: Tensor, labels: Tensor, loss_mask: Tensor, position_ids: Tensor, segment_ids: Tensor
    ) -> tuple[Tensor, Tensor]:
        """(sum of per-token NLL where loss_mask is 1, number of such tokens), both float32 scalars."""
        logits = self.logits(input_ids, position_ids, segment_ids)
        v = logits.shape[-1]
        # log_softmax + gather: ~5x faster on CPU than ops.cross_entropy(reduction="none")
        logp = ops.log_softmax(logits.reshape(-1, v), -1)
        nll = -ops.gather_elements(logp, 1, labels.reshape(-1, 1)).reshape(-1)
        mask = loss_mask.reshape(-1).astype(ms.float32)
        return (nll * mask).sum(), mask.sum()


def no_decay(param_name: str, ndim: int) -> bool:
    """Parameters exempt from weight decay: biases and norm scales (every parameter of rank < 2)."""
    return ndim < 2 or param_name.endswith(".bias") or "norm" in param_name


def expected_parameters(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Names and shapes of every parameter of ``LlamaForCausalLM(cfg)`` (no MindSpore objects
    built), in the Hugging Face naming."""
    h, d = cfg.hidden_size, cfg.head_dim
    q, kv, ff = cfg.num_heads * d, cfg.num_kv_heads * d, cfg.intermediate_size
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (cfg.vocab_size, h)}
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = (h,)
        out[p + "self_attn.q_proj.weight"] = (q, h)
        out[p + "self_attn.k_proj.weight"] = (kv, h)
        out[p + "self_attn.v_proj.weight"] = (kv, h)
        if cfg.qkv_bias:
            out[p + "self_attn.q_proj.bias"] = (q,)
            out[p + "self_attn.k_proj.bias"] = (kv,)
            out[p + "self_attn.v_proj.bias"] = (kv,)
        out[p + "self_attn.o_proj.weight"] = (h, q)
        out[p + "post_attention_layernorm.weight"] = (h,)
        out[p + "mlp.gate_proj.weight"] = (ff, h)
        out[p + "mlp.up_proj.weight"] = (ff, h)
        out[p + "mlp.down_proj.weight"] = (h, ff)
    out["model.norm.weight"] = (h,)
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = (cfg.vocab_size, h)
    return out


def check_parallel_shape(cfg: ModelConfig, tp: int, pp: int) -> list[str]:
    """Reasons the model cannot be split ``tp`` ways (heads) and into ``pp`` stages (layers)."""
    problems = []
    if cfg.num_heads % tp or cfg.num_kv_heads % tp:
        problems.append(
            f"num_heads {cfg.num_heads} and num_kv_heads {cfg.num_kv_heads} must be divisible by "
            f"tensor_parallel {tp}"
        )
    if cfg.intermediate_size % tp:
        problems.append(
            f"intermediate_size {cfg.intermediate_size} must be divisible by tensor_parallel {tp}"
        )
    if cfg.vocab_size % tp:
        problems.append(f"vocab_size {cfg.vocab_size} must be divisible by tensor_parallel {tp}")
    if cfg.num_layers < pp:
        problems.append(f"num_layers {cfg.num_layers} is fewer than pipeline_stages {pp}")
    return problems


def apply_parallel_strategy(net: LlamaForCausalLM, dp: int, tp: int, pp: int) -> None:
    """Megatron-style tensor-parallel strategies and an even split of layers into pipeline stages.

    Only takes effect under MindSpore's semi_auto_parallel mode (Ascend/GPU): q/k/v/gate/up are
    column-parallel (output features split tp ways), o/down row-parallel (input features split, the
    framework inserts the all-reduce), attention products split by head. Layer i goes to stage
    i * pp // num_layers; the embedding to stage 0, final norm and lm_head to the last stage.
    """
    column, row = ((dp, 1), (tp, 1)), ((dp, tp), (1, tp))
    layers = list(net.model.layers)
    for i, layer in enumerate(layers):
        attn, mlp = layer.self_attn, layer.mlp
        for lin in (attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj):
            lin.shard(column)
        for lin in (attn.o_proj, mlp.down_proj):
            lin.shard(row)
        attn.qk.shard(((dp, tp, 1, 1), (dp, tp, 1, 1)))
        attn.pv.shard(((dp, tp, 1, 1), (dp, tp, 1, 1)))
        layer.pipeline_stage = i * pp // len(layers)
    net.model.embed_tokens.pipeline_stage = 0
    net.model.norm.pipeline_stage = pp - 1
    if net.lm_head is not None:
        net.lm_head.shard(column)
        net.lm_head.pipeline_stage = pp - 1
