"""From the configured layout (dp x tp x pp, optimizer sharding) to MindSpore's parallel context and
the cells of one training step, following what ``mindspore.nn.TrainOneStepCell``,
``mindspore.amp.build_train_network`` and MindFormers' wrappers do.

Modes:

* ``stand_alone`` (one process): no reducer.
* ``data_parallel`` (dp > 1, tp = pp = 1, no optimizer sharding): context
  ``parallel_mode="data_parallel"``; the gradients go through
  ``nn.DistributedGradReducer(params, mean=<context gradients_mean>, degree=<context device_num>)``
  over the world, which is exactly the reducer TrainOneStepCell builds in DATA_PARALLEL mode. Each
  micro-batch's loss is its Σ token NLL divided by the loss tokens of the whole global batch, so the
  reducer must sum: ``gradients_mean`` is False (as in MindFormers' parallel configs).
* ``semi_auto_parallel`` (tp > 1, pp > 1 or optimizer sharding): the step is written in the global
  view and MindSpore inserts the gradient all-reduce itself (mirror operators along the devices
  that hold copies of a parameter, sliced parameters only among their replicas), so there is no
  explicit reducer, as TrainOneStepCell uses ``nn.Identity`` in this mode; adding a world-wide
  DistributedGradReducer would reduce TP-sliced gradients a second time across ranks that hold
  different slices. The network is wrapped in ``_VirtualDatasetCell`` (as build_train_network
  does) so each rank's input batch is its data-parallel shard (``dataset_strategy``). With
  pp > 1 the loss cell is wrapped in ``nn.PipelineCell(loss, micro_batch_num)`` (the step's rows
  are cut into micro-batches inside the graph) and the accumulated gradients are taken with
  ``nn.PipelineGradReducer`` — MindSpore's functional pipeline recipe. Optimizer sharding (ZeRO)
  is the context's parallel optimizer (``enable_parallel_optimizer``), with MindFormers' default
  ``parallel_optimizer_config``.

MindSpore compiles semi_auto_parallel only for Ascend/GPU; on CPU the trainer stops with that
message after configuring the context.

Nothing here imports MindSpore at module level.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pretrain.config import ParallelSection

STAND_ALONE, DATA_PARALLEL, SEMI_AUTO = "stand_alone", "data_parallel", "semi_auto_parallel"
# MindFormers' default parallel optimizer settings (threshold in KB: smaller parameters stay whole)
PARALLEL_OPTIMIZER_CONFIG = {"gradient_accumulation_shard": False, "parallel_optimizer_threshold": 64}
N_INPUTS = 5  # input_ids, labels, loss weights, position_ids, segment_ids


@dataclass(frozen=True)
class ParallelPlan:
    """The parallel layout of a run and what it implies for MindSpore."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    micro_batch_num: int = 1
    optimizer_shard: bool = False

    @classmethod
    def from_config(cls, parallel: ParallelSection) -> ParallelPlan:
        return cls(
            int(parallel.data_parallel),
            int(parallel.tensor_parallel),
            int(parallel.pipeline_stages),
            int(parallel.micro_batch_num),
            bool(parallel.optimizer_shard),
        )

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def mode(self) -> str:
        if self.tp > 1 or self.pp > 1 or self.optimizer_shard:
            return SEMI_AUTO
        return DATA_PARALLEL if self.dp > 1 else STAND_ALONE

    def context(self) -> dict[str, Any]:
        """Keyword arguments for ``mindspore.set_auto_parallel_context`` ({} for stand-alone)."""
        if self.mode == STAND_ALONE:
            return {}
        if self.mode == DATA_PARALLEL:
            return {"parallel_mode": DATA_PARALLEL, "gradients_mean": False, "device_num": self.world}
        ctx: dict[str, Any] = {
            "parallel_mode": SEMI_AUTO,
            "device_num": self.world,
            "pipeline_stages": self.pp,
            "gradients_mean": False,
            # each rank feeds its dp shard; ranks of one replica (same dp_rank) feed identical rows
            "dataset_strategy": tuple((self.dp, 1) for _ in range(N_INPUTS)),
            "enable_parallel_optimizer": self.optimizer_shard,
        }
        if self.optimizer_shard:
            ctx["parallel_optimizer_config"] = dict(PARALLEL_OPTIMIZER_CONFIG)
        return ctx


def configure_context(plan: ParallelPlan) -> None:
    """Reset MindSpore's auto-parallel context and set it for ``plan``."""
    import mindspore as ms

    ms.reset_auto_parallel_context()
    ctx = plan.context()
    if ctx:
        ms.set_auto_parallel_context(**ctx)


def training_loss_class() -> type:
    """The loss cell of a training step (built lazily: it subclasses mindspore.nn.Cell)."""
    from mindspore import nn

    class TrainingLoss(nn.Cell):
        """Σ token NLL x weight of one micro-batch, weight = loss mask x loss scale / loss tokens of
        the global batch: a single scalar (what PipelineCell adds up over micro-batches). Keeps
        the model's parameter names (no prefix)."""

        def __init__(self, net: Any):
            super().__init__(auto_prefix=False)
            self.net = net

        def construct(
            self, input_ids: Any, labels: Any, weights: Any, position_ids: Any, segment_ids: Any
        ) -> Any:
            weighted, _ = self.net(input_ids, labels, weights, position_ids, segment_ids)
            return weighted

    return TrainingLoss


@dataclass
class StepCells:
    """What one training step is made of: ``network`` maps the step's inputs to the scaled loss;
    ``reducer`` (None = the framework's own reduction, or none needed) maps raw gradients to the
    gradients the optimizer applies."""

    network: Any
    reducer: Any


def build_step_cells(plan: ParallelPlan, net: Any, optimizer: Any) -> StepCells:
    """Wrap ``net`` (a LlamaForCausalLM) and choose the gradient reducer for ``plan``; the
    auto-parallel context must already be configured (the reducer reads mean and degree from it,
    as TrainOneStepCell does). Builds cells only: nothing is compiled here."""
    import mindspore as ms
    from mindspore import nn
    from mindspore.nn.wrap.cell_wrapper import _VirtualDatasetCell

    network = training_loss_class()(net)
    if plan.pp > 1:
        network = nn.PipelineCell(network, plan.micro_batch_num)
    if plan.mode == SEMI_AUTO:
        network = _VirtualDatasetCell(network)
    reducer = None
    if plan.mode == DATA_PARALLEL:
        reducer = nn.DistributedGradReducer(
            optimizer.parameters,
            mean=ms.get_auto_parallel_context("gradients_mean"),
            degree=ms.get_auto_parallel_context("device_num"),
        )
    elif plan.pp > 1:
        reducer = nn.PipelineGradReducer(optimizer.parameters, opt_shard=plan.optimizer_shard)
    return StepCells(network, reducer)


def global_norm_fn() -> Any:
    """``global_norm(grads) -> float32 [1]``: the L2 norm of all gradients together.

    Each gradient's square sum goes through an ExpandDims carrying the ``grad_scale`` attribute, as
    in ``mindspore.ops.clip_by_global_norm``: under semi_auto_parallel MindSpore then all-reduces
    the local square sums of sliced gradients ("the gradient norm values on all devices will be
    automatically aggregated by allreduce inserted after the local square sum of the gradients"),
    so the norm (and the clipping and spike check that use it) covers the whole model, not this
    rank's shards. In data_parallel mode the gradients are already reduced and whole on every rank,
    so the local sum is the global one.
    """
    import mindspore as ms
    from mindspore import ops

    marked_expand_dims = ops.ExpandDims().add_prim_attr("grad_scale", True)
    reduce_sum = ops.ReduceSum(False)

    def global_norm(grads: tuple) -> Any:
        squares = [marked_expand_dims(reduce_sum(ops.square(g.astype(ms.float32)), ()), 0) for g in grads]
        return ops.sqrt(ops.addn(squares))

    return global_norm


def build_eval_cell(plan: ParallelPlan, net: Any) -> Any:
    """The network evaluation calls: ``net`` itself, wrapped in _VirtualDatasetCell under
    semi_auto_parallel (each rank feeds its data-parallel shard)."""
    if plan.mode != SEMI_AUTO:
        return net
    from mindspore.nn.wrap.cell_wrapper import _VirtualDatasetCell

    return _VirtualDatasetCell(net)
