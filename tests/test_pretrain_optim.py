"""Learning-rate schedules, weight-decay groups, the loss-scale policy, and LAMB/WSD end to end."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from pretrain.config import load_config
from pretrain.optim import LossScale, LRSchedule


def test_warmup_then_cosine_to_min_lr() -> None:
    s = LRSchedule("cosine", learning_rate=1.0, min_lr=0.1, warmup_steps=4, total_steps=14)
    assert [s.at(u) for u in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert s.at(4) == pytest.approx(1.0)
    assert s.at(9) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * 0.5)))
    assert s.at(14) == pytest.approx(0.1) and s.at(100) == pytest.approx(0.1)
    values = [s.at(u) for u in range(4, 15)]
    assert all(a >= b for a, b in itertools.pairwise(values))


def test_warmup_stable_decay() -> None:
    s = LRSchedule("wsd", learning_rate=2.0, min_lr=0.0, warmup_steps=2, total_steps=20, decay_ratio=0.25)
    assert [s.at(u) for u in range(2)] == [1.0, 2.0]
    assert all(s.at(u) == 2.0 for u in range(2, 15))  # stable until the last 25% (5 steps)
    assert [round(s.at(u), 6) for u in range(15, 20)] == [1.6, 1.2, 0.8, 0.4, 0.0]


def test_warmup_ratio_overrides_steps() -> None:
    cfg = load_config(None, {"lr_schedule": {"warmup_ratio": 0.1, "warmup_steps": 3}})
    assert LRSchedule.from_config(cfg.lr_schedule, 50).warmup_steps == 5


def test_loss_scale_halves_on_overflow_and_grows_after_a_window() -> None:
    ls = LossScale(value=1024.0, factor=2.0, window=3, enabled=True)
    ls.update(False)
    assert ls.value == 512.0
    for _ in range(3):
        ls.update(True)
    assert ls.value == 1024.0 and ls.good_steps == 0
    ls.update(True)
    ls.update(False)
    assert ls.value == 512.0 and ls.good_steps == 0
    off = LossScale()
    off.update(False)
    assert off.value == 1.0


def test_weight_decay_skips_norms_and_biases() -> None:
    from pretrain.model import LlamaForCausalLM, ModelConfig, no_decay
    from pretrain.optim import build_optimizer

    net = LlamaForCausalLM(
        ModelConfig(vocab_size=32, seq_length=8, hidden_size=16, num_heads=4, qkv_bias=True)
    )
    opt = build_optimizer(net.trainable_params(), load_config(None).optimizer, no_decay)
    groups = {p.name: wd for p, wd in zip(opt.parameters, opt.weight_decay, strict=True)}
    exempt = sorted(n for n, wd in groups.items() if float(np.asarray(wd)) == 0.0)
    assert exempt == sorted(n for n in groups if n.endswith(("norm.weight", ".bias")))
    assert groups["model.embed_tokens.weight"] > 0 and groups["lm_head.weight"] > 0


@pytest.mark.e2e
@pytest.mark.parametrize("opt_type,schedule", [("lamb", "wsd"), ("adamw", "constant")])
def test_optimizer_and_schedule_variants_train(tmp_path: Path, opt_type: str, schedule: str) -> None:
    from pretrain.synthetic_data import write_dataset
    from pretrain.trainer import Trainer

    data = write_dataset(tmp_path / "d", rows=16, seq_length=16, vocab_size=64)
    cfg = load_config(
        None,
        {
            "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 4},
            "train": {"steps": 4, "batch_size": 4, "mode": "pynative"},
            "optimizer": {"type": opt_type},
            "lr_schedule": {"type": schedule, "learning_rate": 1e-2, "warmup_steps": 1},
        },
    )
    tr = Trainer(cfg, data, tmp_path / "o", log=lambda m: None)
    before = {p.name: p.asnumpy().copy() for p in tr.params}
    records = tr.fit()
    assert len(records) == 4 and all(math.isfinite(r["loss"]) and not r["skipped"] for r in records)
    assert all(not np.array_equal(before[p.name], p.asnumpy()) for p in tr.params)


def test_lamb_composite_matches_the_paper_update() -> None:
    import mindspore as ms

    from pretrain.optim import lamb_composite_class

    ms.set_context(mode=ms.PYNATIVE_MODE)
    rng = np.random.default_rng(0)
    w0 = [rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=4).astype(np.float32)]
    params = [ms.Parameter(ms.Tensor(w), name=f"p{i}") for i, w in enumerate(w0)]
    groups = [{"params": [params[0]], "weight_decay": 0.1}, {"params": [params[1]], "weight_decay": 0.0}]
    opt = lamb_composite_class()(groups, learning_rate=0.01, beta1=0.9, beta2=0.95, eps=1e-8)
    ref = [w.astype(np.float64) for w in w0]
    m = [np.zeros_like(w) for w in ref]
    v = [np.zeros_like(w) for w in ref]
    for t in (1, 2, 3):
        grads = [rng.normal(size=w.shape).astype(np.float32) for w in w0]
        opt(tuple(ms.Tensor(g) for g in grads))
        for i, (g, wd) in enumerate(zip(grads, (0.1, 0.0), strict=True)):
            m[i] = 0.9 * m[i] + 0.1 * g
            v[i] = 0.95 * v[i] + 0.05 * g * g
            r = (m[i] / (1 - 0.9**t)) / (np.sqrt(v[i] / (1 - 0.95**t)) + 1e-8) + wd * ref[i]
            ref[i] = ref[i] - 0.01 * np.linalg.norm(ref[i]) / np.linalg.norm(r) * r
    for p, want in zip(params, ref, strict=True):
        np.testing.assert_allclose(p.asnumpy(), want, rtol=1e-5, atol=1e-6)
