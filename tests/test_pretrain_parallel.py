"""Parallel wiring that can be checked without compiling (MindSpore compiles semi_auto_parallel only
on Ascend/GPU): the context each layout sets, which cells wrap the model, which gradient reducer
and which mean, the gradient norm, and the CPU refusal with the context still configured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from pretrain.parallel import DATA_PARALLEL, SEMI_AUTO, STAND_ALONE, ParallelPlan


@pytest.fixture
def ms_context() -> Any:
    import mindspore as ms

    ms.set_context(mode=ms.PYNATIVE_MODE)
    yield ms
    ms.reset_auto_parallel_context()


def tiny_net_and_optimizer() -> tuple[Any, Any]:
    from pretrain.config import load_config
    from pretrain.model import LlamaForCausalLM, ModelConfig, no_decay
    from pretrain.optim import build_optimizer

    net = LlamaForCausalLM(
        ModelConfig(vocab_size=32, seq_length=8, hidden_size=16, num_heads=4, num_layers=2)
    )
    return net, build_optimizer(net.trainable_params(), load_config(None).optimizer, no_decay)


# (layout, mode, outer cells from the outside in, reducer class or None, reducer mean, reducer degree)
WIRING = [
    (ParallelPlan(), STAND_ALONE, ["TrainingLoss"], None),
    (ParallelPlan(dp=2), DATA_PARALLEL, ["TrainingLoss"], "DistributedGradReducer"),
    (ParallelPlan(dp=2, tp=2), SEMI_AUTO, ["_VirtualDatasetCell", "TrainingLoss"], None),
    (
        ParallelPlan(dp=1, tp=2, pp=2, micro_batch_num=4),
        SEMI_AUTO,
        ["_VirtualDatasetCell", "PipelineCell", "TrainingLoss"],
        "PipelineGradReducer",
    ),
    (ParallelPlan(dp=4, optimizer_shard=True), SEMI_AUTO, ["_VirtualDatasetCell", "TrainingLoss"], None),
]


def outer_cells(network: Any) -> list[str]:
    names = []
    while True:
        names.append(type(network).__name__)
        inner = getattr(network, "_backbone", None) or getattr(network, "network", None)
        if inner is None or type(network).__name__ == "TrainingLoss":
            return names
        network = inner


@pytest.mark.parametrize(("plan", "mode", "cells", "reducer"), WIRING)
def test_cells_reducer_and_mean_per_layout(
    ms_context: Any, plan: ParallelPlan, mode: str, cells: list[str], reducer: str | None
) -> None:
    from pretrain.parallel import build_step_cells, configure_context

    ms = ms_context
    assert plan.mode == mode
    configure_context(plan)
    assert ms.get_auto_parallel_context("parallel_mode") == mode
    if mode != STAND_ALONE:
        # the loss is normalised by the global batch's tokens: gradients are summed, never averaged
        assert ms.get_auto_parallel_context("gradients_mean") is False
        assert ms.get_auto_parallel_context("device_num") == plan.world
    if mode == SEMI_AUTO:
        assert ms.get_auto_parallel_context("pipeline_stages") == plan.pp
        assert [tuple(s) for s in ms.get_auto_parallel_context("dataset_strategy")] == [(plan.dp, 1)] * 5
        assert ms.get_auto_parallel_context("enable_parallel_optimizer") is plan.optimizer_shard
    net, opt = tiny_net_and_optimizer()
    step = build_step_cells(plan, net, opt)
    assert outer_cells(step.network) == cells
    assert (None if step.reducer is None else type(step.reducer).__name__) == reducer
    if reducer == "DistributedGradReducer":
        # TrainOneStepCell's reducer in DATA_PARALLEL: mean and degree from the context
        assert step.reducer.mean is False
        assert float(step.reducer.degree.asnumpy()) == pytest.approx(1 / plan.world)
    if plan.pp > 1:
        pipeline = step.network._backbone
        assert pipeline.micro_size == plan.micro_batch_num
        assert step.reducer.opt_shard is plan.optimizer_shard
    # wrapping keeps the model's parameter names (checkpoints and init_from stay valid)
    assert [p.name for p in step.network.trainable_params()] == [p.name for p in net.trainable_params()]


def test_optimizer_shard_context_and_reducer_under_pipeline(ms_context: Any) -> None:
    from pretrain.parallel import PARALLEL_OPTIMIZER_CONFIG, build_step_cells, configure_context

    plan = ParallelPlan(dp=2, pp=2, micro_batch_num=2, optimizer_shard=True)
    ctx = plan.context()
    assert ctx["enable_parallel_optimizer"] is True
    assert ctx["parallel_optimizer_config"] == PARALLEL_OPTIMIZER_CONFIG
    configure_context(plan)
    assert ms_context.get_auto_parallel_context("enable_parallel_optimizer") is True
    net, opt = tiny_net_and_optimizer()
    assert build_step_cells(plan, net, opt).reducer.opt_shard is True


def test_global_norm_is_marked_for_the_parallel_pass_and_exact(ms_context: Any) -> None:
    import mindspore as ms

    from pretrain.parallel import global_norm_fn

    norm = global_norm_fn()
    marked = norm.__closure__[0].cell_contents  # the ExpandDims that carries the attribute
    assert marked.attrs.get("grad_scale") is True
    grads = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([3.0, -4.0], np.float32)]
    got = norm(tuple(ms.Tensor(g) for g in grads)).asnumpy()
    assert got.shape == (1,)
    assert got[0] == pytest.approx(np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in grads)))


def test_cpu_refuses_zero_and_tensor_parallel_with_the_context_configured(
    tmp_path: Path, capsys: pytest.CaptureFixture, ms_context: Any
) -> None:
    from pretrain.run import main
    from pretrain.synthetic_data import write_dataset

    data = write_dataset(tmp_path / "d", rows=8, seq_length=8, vocab_size=32)
    cfg = tmp_path / "zero.yaml"
    cfg.write_text(yaml.safe_dump({"parallel": {"data_parallel": 2, "optimizer_shard": True}}))
    code = main(["--config", str(cfg), "--data", str(data), "--output", str(tmp_path / "o")])
    text = capsys.readouterr().err
    assert code == 2 and "optimizer_shard (ZeRO) need an Ascend or GPU backend" in text
    assert ms_context.get_auto_parallel_context("parallel_mode") == SEMI_AUTO
    assert ms_context.get_auto_parallel_context("enable_parallel_optimizer") is True
    assert ms_context.get_auto_parallel_context("device_num") == 2
