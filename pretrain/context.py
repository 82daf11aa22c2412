"""This process's place in a training run: MindSpore's execution and parallel context, its rank and
coordinates in the dp x tp x pp layout, and the small collectives the loop needs (every rank's
values; sums over ranks).

Rank layout as MindSpore/MindFormers: rank = pp_stage*(dp*tp) + dp_rank*tp + tp_rank
(:class:`pretrain.data.Layout`).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any

import numpy as np

from pretrain.config import ConfigError, TrainingConfig
from pretrain.data import Layout
from pretrain.parallel import DATA_PARALLEL, SEMI_AUTO, ParallelPlan


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


class Collectives:
    """Collectives over all ranks on small float vectors (an all-reduce of a world x n table);
    every rank must call each at the same point. One process: no communication."""

    def __init__(self, world: int, rank: int):
        self.world, self.rank = world, rank
        if world > 1:
            from mindspore import ops

            self._allreduce = ops.AllReduce()
        else:
            self._allreduce = None

    def all_ranks(self, values: list[float] | np.ndarray) -> np.ndarray:
        """Every rank's ``values`` (same length everywhere): float64 [world, n], row r = rank r's."""
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        if self._allreduce is None:
            return values[None, :]
        from mindspore import Tensor

        table = np.zeros((self.world, len(values)), np.float32)
        table[self.rank] = values
        return self._allreduce(Tensor(table)).asnumpy().astype(np.float64)

    def sum_over_ranks(self, values: list[float]) -> np.ndarray:
        """Element-wise sum of ``values`` over all ranks (float64 [n])."""
        return self.all_ranks(values).sum(axis=0)


@dataclass
class RankContext:
    """Where this process runs: device, rank, world, the parallel plan and layout, coordinates."""

    device: str
    rank: int
    world: int
    plan: ParallelPlan
    layout: Layout
    pp_stage: int
    dp_rank: int
    tp_rank: int
    collectives: Collectives


def init_rank(cfg: TrainingConfig) -> RankContext:
    """Set MindSpore's mode and parallel context for ``cfg``, join the cluster under msrun, check
    the layout against the world, and seed every generator (before data and model are built).
    ConfigError when the layout does not fit the world, the model or this backend."""
    import mindspore as ms

    from pretrain.parallel import configure_context

    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.PYNATIVE_MODE if cfg.train.mode == "pynative" else ms.GRAPH_MODE)
    device = ms.get_context("device_target")
    rank, world = 0, 1
    if distributed_env():
        from mindspore.communication import get_group_size, get_rank, init

        init()
        rank, world = get_rank(), get_group_size()
    plan = ParallelPlan.from_config(cfg.parallel)
    tp, pp, dp = plan.tp, plan.pp, plan.dp
    if plan.mode == SEMI_AUTO:
        if tp * pp > 1:
            _check_model_split(cfg, tp, pp)
        configure_context(plan)
        if device == "CPU":
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
        layout = Layout(world, tp, pp)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if layout.dp != dp:
        n = dp * tp * pp
        raise ConfigError(
            f"parallel.data_parallel = {dp} x tp {tp} x pp {pp} needs {n} processes, this world has "
            f"{world}: launch with msrun --worker_num={n} --local_worker_num={n} --master_port=8118 "
            "--join=True pretrain/run.py ... (or set parallel.data_parallel to match)"
        )
    pp_stage, dp_rank, tp_rank = layout.coords(rank)
    if plan.mode == DATA_PARALLEL:
        configure_context(plan)
    seed = int(cfg.seed)
    ms.set_seed(seed)  # seeds first: the dataset and the model are built after this
    np.random.seed(seed)
    random.seed(seed)
    return RankContext(
        device, rank, world, plan, layout, pp_stage, dp_rank, tp_rank, Collectives(world, rank)
    )


def model_config_dict(cfg: TrainingConfig) -> dict[str, Any]:
    """The model section as pretrain.model.ModelConfig's keyword arguments (init_from left out)."""
    m = cfg.to_dict()["model"]
    m.pop("init_from")
    return m


def _check_model_split(cfg: TrainingConfig, tp: int, pp: int) -> None:
    from pretrain.model import ModelConfig, check_parallel_shape

    m = model_config_dict(cfg)
    if "auto" in (m["vocab_size"], m["seq_length"]):  # sizes not known before the manifest: check later
        m = {
            **m,
            "vocab_size": 8 * tp if m["vocab_size"] == "auto" else m["vocab_size"],
            "seq_length": 8 if m["seq_length"] == "auto" else m["seq_length"],
        }
    problems = check_parallel_shape(ModelConfig.from_dict(m), tp, pp)
    if problems:
        raise ConfigError("parallel layout does not fit the model: " + "; ".join(problems))
