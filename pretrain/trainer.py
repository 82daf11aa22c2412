"""The training loop: builds model, optimizer and data for this rank, runs compiled steps, logs,
evaluates, checkpoints and resumes exactly.

One optimizer step = ``grad_accumulation_steps`` micro-batches per data-parallel rank. Each
micro-batch contributes Σ(token NLL) / T to the loss, T = loss tokens of the whole step on this
rank, so K micro-batches give the same gradient as one batch of K x batch_size rows. Data-parallel
gradients are averaged across ranks (nn.DistributedGradReducer); the logged loss is the global
token mean.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats.readers_for_training import ShardError, open_split
from pretrain import checkpoint as ckpt
from pretrain.config import ConfigError, diff_keys, resolve_against_manifest, trajectory_hash
from pretrain.data import FEATURES, Layout, RowSource, StepLoader, row_features
from pretrain.optim import LossScale, LRSchedule, build_optimizer


class TrainingError(RuntimeError):
    """Training cannot go on (non-finite loss, persistent overflow); the message names the step."""


def _log(msg: str) -> None:
    print(msg, flush=True)


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


class Trainer:
    def __init__(self, cfg: dict[str, Any], data: str | Path, output: str | Path, log: Any = _log):
        self.cfg, self.log = cfg, log
        self.output = Path(output)
        self.data = Path(data)
        self._init_context()
        self._open_data()
        self._build()

    # ---------------------------------------------------------------- set-up
    def _init_context(self) -> None:
        import mindspore as ms

        t, p = self.cfg["train"], self.cfg["parallel"]
        ms.reset_auto_parallel_context()
        ms.set_context(mode=ms.PYNATIVE_MODE if t["mode"] == "pynative" else ms.GRAPH_MODE)
        self.device = ms.get_context("device_target")
        self.rank, world = 0, 1
        if distributed_env():
            from mindspore.communication import get_group_size, get_rank, init

            init()
            self.rank, world = get_rank(), get_group_size()
        tp, pp, dp = p["tensor_parallel"], p["pipeline_stages"], p["data_parallel"]
        if tp * pp > 1:
            self._check_model_split(tp, pp)
            ms.set_auto_parallel_context(
                parallel_mode="semi_auto_parallel",
                device_num=dp * tp * pp,
                pipeline_stages=pp,
                gradients_mean=True,
                # each rank feeds its dp shard; ranks of one replica (same dp_rank) feed identical rows
                dataset_strategy=tuple((dp, 1) for _ in FEATURES),
            )
            if self.device == "CPU":
                raise ConfigError(
                    f"tensor_parallel {tp} / pipeline_stages {pp} need an Ascend or GPU backend: MindSpore "
                    "compiles semi_auto_parallel only there (this machine runs CPU). The auto-parallel "
                    "context is configured; the data layout would be:\n"
                    + layout_table(Layout(dp * tp * pp, tp, pp))
                    + "\nUse tensor_parallel: 1 and pipeline_stages: 1 here (data parallel works on CPU)."
                )
        try:
            self.layout = Layout(world, tp, pp)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if self.layout.dp != dp:
            n = dp * tp * pp
            raise ConfigError(
                f"parallel.data_parallel = {dp} x tp {tp} x pp {pp} needs {n} processes, this world has "
                f"{world}: launch with msrun --worker_num={n} --local_worker_num={n} --master_port=8118 "
                "--join=True pretrain/run.py ... (or set parallel.data_parallel to match)"
            )
        self.pp_stage, self.dp_rank, self.tp_rank = self.layout.coords(self.rank)
        if tp * pp == 1 and world > 1:
            ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True, device_num=world)
        seed = int(self.cfg["seed"])
        ms.set_seed(seed)  # seeds first: the dataset and the model are built after this
        np.random.seed(seed)
        random.seed(seed)

    def _check_model_split(self, tp: int, pp: int) -> None:
        from pretrain.model import ModelConfig, check_parallel_shape

        m = {k: v for k, v in self.cfg["model"].items() if k != "init_from"}
        if "auto" in (m["vocab_size"], m["seq_length"]):  # sizes not known before the manifest: check later
            m = {
                **m,
                "vocab_size": 8 * tp if m["vocab_size"] == "auto" else m["vocab_size"],
                "seq_length": 8 if m["seq_length"] == "auto" else m["seq_length"],
            }
        problems = check_parallel_shape(ModelConfig.from_dict(m), tp, pp)
        if problems:
            raise ConfigError("parallel layout does not fit the model: " + "; ".join(problems))

    def _open_data(self) -> None:
        t = self.cfg["train"]
        try:
            split = open_split(self.data, t["split"], t["data_format"])
        except (ShardError, FileNotFoundError) as e:
            raise ConfigError(str(e)) from None
        self.shards = split.shards
        resolve_against_manifest(self.cfg, self.shards)
        self.split = split
        self.eos_id = int(self.shards["eos_id"])
        self.pad_id = self.shards.get("pad_id")
        self.data_identity = {
            "split": split.split,
            "format": split.format,
            "files": [{k: e.get(k) for k in ("path", "rows", "sha256")} for e in split.entries],
        }
        self.source = RowSource(
            split, self.layout.dp, self.dp_rank, int(self.cfg["seed"]), bool(t["shuffle"])
        )
        self.eval_split = None
        e = self.cfg["eval"]
        if e["interval"] > 0:
            try:
                self.eval_split = open_split(self.data, e["split"], t["data_format"])
            except ShardError as err:
                self.log(f"eval: disabled ({err})")

    def _build(self) -> None:
        import mindspore as ms
        from mindspore import Tensor, amp, nn, ops

        from pretrain.model import LlamaForCausalLM, ModelConfig, no_decay

        m = {k: v for k, v in self.cfg["model"].items() if k != "init_from"}
        t = self.cfg["train"]
        m["compute_dtype"] = "float16" if t["amp_level"] == "O2" else "float32"
        self.model_cfg = ModelConfig.from_dict(m)
        self.net = LlamaForCausalLM(self.model_cfg, seed=int(self.cfg["seed"]))
        if self.layout.tp * self.layout.pp > 1:  # semi_auto_parallel (Ascend/GPU only; not run on CPU)
            from pretrain.model import apply_parallel_strategy, check_parallel_shape

            problems = check_parallel_shape(self.model_cfg, self.layout.tp, self.layout.pp)
            if problems:
                raise ConfigError("parallel layout does not fit the model: " + "; ".join(problems))
            apply_parallel_strategy(self.net, self.layout.dp, self.layout.tp, self.layout.pp)
        if self.cfg["model"]["init_from"]:
            self._init_from(self.cfg["model"]["init_from"])
        self.params = self.net.trainable_params()
        self.opt = build_optimizer(self.params, self.cfg["optimizer"], no_decay)
        self.schedule = LRSchedule.from_config(self.cfg["lr_schedule"], t["steps"])
        ls = t["loss_scale"]
        self.loss_scale = (
            LossScale(float(ls["init"]), float(ls["factor"]), int(ls["window"]), enabled=True)
            if t["amp_level"] == "O2"
            else LossScale()
        )
        self.hash = trajectory_hash(self.cfg, self.data_identity)
        dp = self.layout.dp
        reducer = nn.DistributedGradReducer(self.params, mean=True, degree=dp) if dp > 1 else None
        self._allreduce = ops.AllReduce() if dp > 1 else None
        net, opt = self.net, self.opt

        def forward(ids: Tensor, labels: Tensor, mask: Tensor, pos: Tensor, seg: Tensor, coef: Tensor) -> Any:
            nll_sum, _ = net(ids, labels, mask, pos, seg)
            return nll_sum * coef, nll_sum

        grad_fn = ms.value_and_grad(forward, None, opt.parameters, has_aux=True)

        def micro(ids: Tensor, labels: Tensor, mask: Tensor, pos: Tensor, seg: Tensor, coef: Tensor) -> Any:
            (_, nll_sum), grads = grad_fn(ids, labels, mask, pos, seg, coef)
            return nll_sum, grads

        def accumulate(acc: tuple, grads: tuple) -> tuple:
            return tuple(a + g for a, g in zip(acc, grads))  # noqa: B905 (graph syntax has no strict=)

        clip = float(t["grad_clip"])

        def update(grads: tuple, inv_scale: Tensor, lr: Tensor) -> Any:
            """Reduce across dp ranks, unscale, check finiteness, clip, and apply only when finite."""
            if reducer is not None:
                grads = reducer(grads)
            grads = tuple(g * inv_scale for g in grads)
            finite = amp.all_finite(grads)
            norm = ops.sqrt(sum((g * g).sum() for g in grads))
            if finite:
                coef = ops.minimum(clip / (norm + 1e-6), 1.0) if clip > 0 else ops.ones_like(norm)
                # the learning rate goes in as an input: set_data on opt.learning_rate from Python
                # does not reach an already compiled graph (it keeps the first value)
                ops.assign(opt.learning_rate, lr)
                opt(tuple(g * coef for g in grads))
            return finite, norm

        def single_step(
            ids: Tensor,
            labels: Tensor,
            mask: Tensor,
            pos: Tensor,
            seg: Tensor,
            coef: Tensor,
            inv_scale: Tensor,
            lr: Tensor,
        ) -> Any:
            """A step without accumulation, in one graph: (nll sum, finite, grad norm)."""
            (_, nll_sum), grads = grad_fn(ids, labels, mask, pos, seg, coef)
            finite, norm = update(grads, inv_scale, lr)
            return nll_sum, finite, norm

        def evaluate(ids: Tensor, labels: Tensor, mask: Tensor, pos: Tensor, seg: Tensor) -> Any:
            return net(ids, labels, mask, pos, seg)

        wrap = (lambda f: f) if t["mode"] == "pynative" else ms.jit
        self._micro, self._accumulate, self._update = wrap(micro), wrap(accumulate), wrap(update)
        self._single_step, self._eval = wrap(single_step), wrap(evaluate)
        self._Tensor = Tensor
        self._mutable = ms.mutable if t["mode"] != "pynative" else (lambda x: x)

    def _init_from(self, path: str) -> None:
        import mindspore as ms

        params = ms.load_checkpoint(str(path))
        not_loaded, unused = ms.load_param_into_net(self.net, params)
        if not_loaded:
            raise ConfigError(
                f"model.init_from {path}: {len(not_loaded)} model parameters are not in the checkpoint "
                f"(e.g. {not_loaded[:3]}); refusing to train with silently re-initialised layers"
            )
        self.log(f"init_from: loaded {len(params) - len(unused)} parameters from {path}")

    # ---------------------------------------------------------------- steps
    def _tensors(self, f: dict[str, np.ndarray]) -> list[Any]:
        return [self._Tensor(f[k]) for k in FEATURES]

    def train_step(self, micro_batches: list[dict[str, np.ndarray]]) -> dict[str, Any]:
        """One optimizer step over the given micro-batches; returns loss, grad norm, skipped flag."""
        tokens = float(sum(f["loss_mask"].sum() for f in micro_batches))
        coef = self._Tensor(np.float32(self.loss_scale.value / max(tokens, 1.0)))
        inv_scale = self._Tensor(np.float32(1.0 / self.loss_scale.value))
        lr = self.schedule.at(self.updates)
        lr_t = self._Tensor(np.float32(lr))
        if len(micro_batches) == 1:
            nll, finite_t, norm_t = self._single_step(*self._tensors(micro_batches[0]), coef, inv_scale, lr_t)
            nll_total = float(nll.asnumpy())
        else:
            acc = None
            nll_total = 0.0
            for f in micro_batches:
                nll, grads = self._micro(*self._tensors(f), coef)
                acc = grads if acc is None else self._accumulate(self._mutable(acc), self._mutable(grads))
                nll_total += float(nll.asnumpy())
            finite_t, norm_t = self._update(self._mutable(acc), inv_scale, lr_t)
        finite, norm = bool(finite_t.asnumpy()), float(norm_t.asnumpy())
        if self._allreduce is not None:
            both = self._allreduce(self._Tensor(np.array([nll_total, tokens], np.float32))).asnumpy()
            nll_total, tokens = float(both[0]), float(both[1])
        loss = nll_total / max(tokens, 1.0)
        scale_used = self.loss_scale.value
        skipped = not finite
        if finite:
            self.updates += 1
        self.loss_scale.update(finite)
        return {
            "loss": loss,
            "grad_norm": norm if finite else None,
            "lr": lr,
            "loss_scale": scale_used,
            "skipped": skipped,
            "tokens": tokens,
        }

    def evaluate(self) -> dict[str, float] | None:
        if self.eval_split is None:
            return None
        t, e = self.cfg["train"], self.cfg["eval"]
        if not hasattr(self, "_eval_source"):
            self._eval_source = RowSource(self.eval_split, self.layout.dp, self.dp_rank, 0, shuffle=False)
        src = self._eval_source
        n_batches = min(e["max_batches"], src.rows_per_rank // t["batch_size"])
        if n_batches == 0:
            return None
        nll = tokens = 0.0
        for raw in src.batches(0, t["batch_size"], 0, n_batches):
            f = row_features(
                raw["input_ids"], raw.get("actual_seq_len"), raw.get("loss_mask"), self.eos_id, self.pad_id
            )
            s, n = self._eval(*self._tensors(f))
            nll += float(s.asnumpy())
            tokens += float(n.asnumpy())
        if self._allreduce is not None:
            both = self._allreduce(self._Tensor(np.array([nll, tokens], np.float32))).asnumpy()
            nll, tokens = float(both[0]), float(both[1])
        loss = nll / max(tokens, 1.0)
        return {"eval_loss": loss, "eval_ppl": math.exp(min(loss, 50.0)), "eval_tokens": tokens}

    # ---------------------------------------------------------------- checkpoints
    def ckpt_root(self) -> Path:
        base = self.cfg["checkpoint"]["dir"] or self.output / "checkpoints"
        return ckpt.rank_dir(base, self.rank)

    def save(self, step: int) -> Path:
        epoch, in_epoch = self.loader_position(step)
        state = {
            "updates": self.updates,
            "loss_scale": self.loss_scale.state(),
            "samples_consumed": step * self.rows_per_step * self.layout.dp,
            "epoch": epoch,
            "step_in_epoch": in_epoch,
            "trajectory_hash": self.hash,
            "config": self.cfg,
            "rank": self.rank,
            "layout": [self.layout.world, self.layout.tp, self.layout.pp],
        }
        path = ckpt.save(self.ckpt_root(), step, self.opt, state, int(self.cfg["checkpoint"]["keep_last"]))
        self.log(f"checkpoint: step {step} -> {path}")
        return path

    def resume(self, spec: str) -> int:
        """Restore from ``auto`` (newest valid checkpoint, or a fresh start) or a path; returns the step."""
        if spec == "auto":
            path = ckpt.find_resume(self.ckpt_root(), self.log)
            if path is None:
                self.log(f"resume: no valid checkpoint in {self.ckpt_root()}, starting from step 0")
                return 0
        else:
            path = Path(spec)
            if not (path / ckpt.STATE_FILE).exists() and (path / f"rank_{self.rank}").is_dir():
                path = path / f"rank_{self.rank}"
            if not (path / ckpt.STATE_FILE).exists():
                found = ckpt.find_resume(path, self.log)
                if found is None:
                    raise ckpt.CheckpointError(f"no valid checkpoint at {spec}")
                path = found
        state = ckpt.read_state(path)
        if state["trajectory_hash"] != self.hash:
            changes = diff_keys(state.get("config", {}), self.cfg)
            raise ConfigError(
                f"checkpoint {path} belongs to a different run (config or data changed): "
                + ("; ".join(changes[:8]) or "the data files differ")
                + ". Resume with the original config and data, or start a new output directory."
            )
        ckpt.load_into(path, [self.opt])
        self.updates = int(state["updates"])
        self.loss_scale.load(state["loss_scale"])
        self.log(f"resume: step {state['step']} from {path} (samples consumed {state['samples_consumed']})")
        return int(state["step"])

    def loader_position(self, step: int) -> tuple[int, int]:
        spe = self.source.rows_per_rank // self.rows_per_step
        return divmod(step, spe) if spe else (0, step)

    @property
    def rows_per_step(self) -> int:
        t = self.cfg["train"]
        return t["batch_size"] * t["grad_accumulation_steps"]

    # ---------------------------------------------------------------- loop
    def fit(self, resume: str | None = None, stop_at: int | None = None) -> list[dict[str, Any]]:
        """Train to ``train.steps`` (or stop after step ``stop_at``, checkpointing there; the LR
        schedule still spans train.steps); returns this run's step records."""
        t, c = self.cfg["train"], self.cfg["checkpoint"]
        end = min(stop_at or t["steps"], t["steps"])
        self.updates = 0
        start = self.resume(resume) if resume else 0
        main = self.rank == 0
        self.output.mkdir(parents=True, exist_ok=True)
        metrics_path = self.output / ("metrics.jsonl" if main else f"metrics.rank{self.rank}.jsonl")
        _truncate_metrics(metrics_path, start)
        if main and start == 0:
            (self.output / "config.resolved.json").write_text(
                json.dumps(self.cfg, indent=1), encoding="utf-8"
            )
        if start >= end:
            self.log(f"nothing to do: already at step {start}")
            return []
        loader = StepLoader(
            self.source,
            t["batch_size"],
            t["grad_accumulation_steps"],
            self.eos_id,
            self.pad_id,
            start,
            end,
            prefetch=t["prefetch"],
        )
        self.log(
            f"train: rank {self.rank} (dp_rank {self.dp_rank} of {self.layout.dp}), {self.split.format} "
            f"split {self.split.split!r}: {self.source.total_rows} rows, "
            f"{loader.steps_per_epoch} steps per epoch, "
            f"global batch {self.rows_per_step * self.layout.dp} rows x {self.model_cfg.seq_length} tokens; "
            f"{sum(p.size for p in self.params):,} parameters; steps {start + 1}..{end} of {t['steps']}"
        )
        records: list[dict[str, Any]] = []
        norms: deque[float | None] = deque(maxlen=5)
        overflows = 0
        seq = self.model_cfg.seq_length
        t_prev = time.perf_counter()
        wait_prev = 0.0
        try:
            with open(metrics_path, "a", encoding="utf-8") as mf:
                for step_index, micro in loader:
                    step = step_index + 1
                    r = self.train_step(micro)
                    now = time.perf_counter()
                    dt = now - t_prev
                    wait = loader.wait_seconds - wait_prev
                    t_prev, wait_prev = now, loader.wait_seconds
                    norms.append(r["grad_norm"])
                    epoch, _ = loader.position(step_index)
                    rec = {
                        "step": step,
                        "loss": r["loss"],
                        "lr": r["lr"],
                        "grad_norm": r["grad_norm"],
                        "loss_scale": r["loss_scale"],
                        "skipped": r["skipped"],
                        "step_time": dt,
                        "tokens_per_s": self.rows_per_step * self.layout.dp * seq / dt,
                        "data_wait_share": wait / dt if dt > 0 else 0.0,
                        "epoch": epoch,
                        "samples": step * self.rows_per_step * self.layout.dp,
                    }
                    nonfinite = not math.isfinite(r["loss"])
                    if (nonfinite or r["skipped"]) and not self.loss_scale.enabled:
                        what = f"loss is {r['loss']}" if nonfinite else "gradients are not finite"
                        raise TrainingError(
                            f"step {step}: {what}; last grad norms {list(norms)}. "
                            "Check the data (ids < vocab_size?), lower lr_schedule.learning_rate, or run "
                            "with train.amp_level O0 to rule out float16 overflow."
                        )
                    if r["skipped"]:
                        overflows += 1
                        self.log(
                            f"step {step}: gradient overflow at loss scale {r['loss_scale']:g}, "
                            f"update skipped, scale now {self.loss_scale.value:g}"
                        )
                        if overflows > t["loss_scale"]["max_consecutive_overflows"]:
                            raise TrainingError(
                                f"step {step}: {overflows} consecutive overflow steps (loss scale "
                                f"{self.loss_scale.value:g}); last grad norms {list(norms)}; the run diverged"
                            )
                    else:
                        overflows = 0
                    records.append(rec)
                    mf.write(json.dumps(rec) + "\n")
                    mf.flush()
                    if step % t["log_interval"] == 0 or step == end:
                        gn = "skip" if r["grad_norm"] is None else f"{r['grad_norm']:.3f}"
                        recent = [x["loss"] for x in records[-t["log_interval"] :]]
                        avg = f" (mean {sum(recent) / len(recent):.4f})" if len(recent) > 1 else ""
                        self.log(
                            f"step {step:>6} | loss {r['loss']:.4f}{avg} | lr {r['lr']:.3e} | "
                            f"grad_norm {gn} | {rec['tokens_per_s']:,.0f} tok/s | "
                            f"data wait {100 * rec['data_wait_share']:.1f}%"
                            + (f" | scale {r['loss_scale']:g}" if self.loss_scale.enabled else "")
                        )
                    e = self.cfg["eval"]
                    if e["interval"] and (step % e["interval"] == 0 or step == end):
                        ev = self.evaluate()
                        if ev is not None:
                            ev_rec = {"step": step, **ev}
                            mf.write(json.dumps(ev_rec) + "\n")
                            mf.flush()
                            self.log(
                                f"eval  {step:>6} | loss {ev['eval_loss']:.4f} | ppl {ev['eval_ppl']:.2f}"
                            )
                        # eval time is not step time
                        t_prev = time.perf_counter()
                    if (c["save_interval"] and step % c["save_interval"] == 0) or step == end:
                        self.save(step)
                        t_prev = time.perf_counter()
        finally:
            loader.close()
        if main:
            plot_metrics(metrics_path, self.output / "loss.png")
        return records

    def overfit_check(self) -> tuple[bool, float, float]:
        """Train on one fixed tiny slice (overfit.rows rows) for overfit.steps steps; the check passes
        when the final loss is below overfit.max_loss. Returns (passed, first loss, last loss)."""
        o = self.cfg["overfit"]
        raw = next(self.source.batches(0, o["rows"], 0, 1))
        f = row_features(
            raw["input_ids"], raw.get("actual_seq_len"), raw.get("loss_mask"), self.eos_id, self.pad_id
        )
        self.updates = 0
        self.schedule = LRSchedule(
            "constant", self.schedule.learning_rate, 0.0, min(10, o["steps"] // 10), o["steps"]
        )
        first = last = float("nan")
        for step in range(1, o["steps"] + 1):
            r = self.train_step([f])
            if step == 1:
                first = r["loss"]
            last = r["loss"]
            if step % max(1, o["steps"] // 10) == 0 or step == o["steps"]:
                self.log(f"overfit step {step:>4} | loss {last:.4f}")
            if not math.isfinite(last):
                break
        return bool(last < o["max_loss"]), first, last


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop records after ``step`` (from a run that went further than the checkpoint we resume)."""
    if not path.exists():
        return
    if step == 0:
        path.unlink()
        return
    keep = [
        ln for ln in path.read_text(encoding="utf-8").splitlines() if ln and json.loads(ln)["step"] <= step
    ]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(k + "\n" for k in keep), encoding="utf-8")
    os.replace(tmp, path)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in Path(path).read_text(encoding="utf-8").splitlines() if ln.strip()]


def plot_metrics(metrics_path: Path, png: Path) -> None:
    """Loss curve (train loss per step, eval loss points) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = read_metrics(metrics_path) if metrics_path.exists() else []
    train = [(r["step"], r["loss"]) for r in recs if "loss" in r and r["loss"] is not None]
    evals = [(r["step"], r["eval_loss"]) for r in recs if "eval_loss" in r]
    if not train:
        return
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    steps, values = (np.asarray(v, dtype=float) for v in zip(*train, strict=True))
    ax.plot(steps, values, label="train loss", linewidth=0.8, alpha=0.45)
    window = max(1, min(50, len(values) // 10))
    if window > 1:
        smooth = np.convolve(values, np.ones(window) / window, mode="valid")
        ax.plot(steps[window - 1 :], smooth, label=f"train loss, mean of {window} steps", linewidth=1.6)
    if evals:
        ax.plot(*zip(*evals, strict=True), "o-", label="eval loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)


def main_guard(fn: Any) -> int:
    """Run ``fn``; map config/data/training errors to one-line messages and exit codes."""
    try:
        return int(fn() or 0)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (TrainingError, ckpt.CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
