"""Atomic training checkpoints with integrity checks.

Layout: ``<dir>/rank_<r>/step_<NNNNNNNN>/`` holding ``train.ckpt`` (model parameters, optimizer
moments and step, as one MindSpore checkpoint) and ``state.json`` (step, optimizer updates, loss
scale, data position, trajectory hash, sha256 of train.ckpt). A checkpoint is written into a
hidden temporary directory, fsynced, then renamed into place; ``state.json`` is written last, so a
directory without a readable state.json, or whose train.ckpt does not match the recorded sha256,
is partial or corrupt and is skipped by ``--resume auto``. Old checkpoints are pruned separately
(:func:`prune`), after every rank has written the new one, so that a step complete on all ranks
always survives.

:class:`Checkpointer` is what the training loop uses: this rank's checkpoints, saved with a barrier
before pruning, and resumption that all ranks agree on (the newest step complete on every rank),
refusing a checkpoint of another run or of a global batch or tensor/pipeline split this run does
not have.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pretrain.config import ConfigError, diff_keys, saved_global_batch

if TYPE_CHECKING:
    from pretrain.context import RankContext

STEP_DIR = re.compile(r"^step_(\d{8})$")
CKPT_FILE = "train.ckpt"
STATE_FILE = "state.json"
MAX_AGREED_STEPS = 64  # newest checkpoint steps per rank compared when ranks agree on a resume step


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used (corrupt, partial, or from a different run)."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rank_dir(root: str | Path, rank: int) -> Path:
    return Path(root) / f"rank_{rank}"


def save(root: Path, step: int, save_obj: Any, state: dict[str, Any]) -> Path:
    """Write checkpoint ``step`` atomically under ``root`` (a rank directory)."""
    import mindspore as ms

    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:08d}"
    tmp = root / f".tmp-step_{step:08d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    ckpt = tmp / CKPT_FILE
    ms.save_checkpoint(save_obj, str(ckpt))
    with open(ckpt, "rb") as f:
        os.fsync(f.fileno())
    state = {**state, "step": step, "ckpt_sha256": _sha256(ckpt)}
    with open(tmp / STATE_FILE, "w", encoding="utf-8") as f:
        json.dump(state, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(tmp)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    return final


def prune(root: Path, keep_last: int) -> list[Path]:
    """Delete all but the ``keep_last`` newest checkpoint directories under ``root`` (0 keeps all);
    returns the deleted ones."""
    old = list_checkpoints(root, validate=False)[:-keep_last] if keep_last > 0 else []
    for path in old:
        shutil.rmtree(path, ignore_errors=True)
    return old


def step_of(path: Path) -> int:
    """The step number of a checkpoint directory (``step_00000042`` -> 42)."""
    m = STEP_DIR.match(path.name)
    if not m:
        raise CheckpointError(f"{path} is not a checkpoint directory (step_NNNNNNNN)")
    return int(m.group(1))


def read_state(path: Path) -> dict[str, Any]:
    """state.json of a checkpoint directory after checking train.ckpt's sha256; CheckpointError if bad."""
    try:
        state = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: no readable {STATE_FILE} (partial checkpoint?): {e}") from None
    ckpt = path / CKPT_FILE
    if not ckpt.is_file():
        raise CheckpointError(f"{path}: {CKPT_FILE} is missing")
    if _sha256(ckpt) != state.get("ckpt_sha256"):
        raise CheckpointError(f"{path}: {CKPT_FILE} does not match the sha256 in {STATE_FILE} (corrupt)")
    return state


def list_checkpoints(root: Path, validate: bool = True) -> list[Path]:
    """Checkpoint directories under ``root``, oldest first (only valid ones when ``validate``)."""
    if not root.is_dir():
        return []
    found = sorted((p for p in root.iterdir() if p.is_dir() and STEP_DIR.match(p.name)), key=lambda p: p.name)
    if not validate:
        return found
    good = []
    for p in found:
        try:
            read_state(p)
            good.append(p)
        except CheckpointError:
            continue
    return good


def load_into(path: Path, cells: list[Any]) -> dict[str, Any]:
    """Load ``path``'s train.ckpt into the given cells (net, optimizer); every parameter of every
    cell must be present. Returns the verified state.json."""
    import mindspore as ms

    state = read_state(path)
    params = ms.load_checkpoint(str(path / CKPT_FILE))
    for cell in cells:
        not_loaded, _ = ms.load_param_into_net(cell, params, strict_load=True)
        if not_loaded:
            raise CheckpointError(f"{path}: parameters missing from the checkpoint: {not_loaded[:5]}")
    return state


class Checkpointer:
    """This rank's checkpoints under ``base`` (``base/rank_<r>/step_<N>``). Collective methods
    (:meth:`save`, :meth:`find`, :meth:`check_resumable`) must be called by every rank."""

    def __init__(self, base: Path, ctx: RankContext, log: Callable[[str], None]):
        self.base, self.ctx, self.log = base, ctx, log

    @property
    def root(self) -> Path:
        return rank_dir(self.base, self.ctx.rank)

    def save(self, step: int, save_obj: Any, state: dict[str, Any], keep_last: int) -> Path:
        """Write this rank's checkpoint of ``step``; once every rank has written it, prune old ones."""
        path = save(self.root, step, save_obj, state)
        self.ctx.collectives.all_ranks([step])  # a barrier: older ones go once every rank has this one
        prune(self.root, keep_last)
        self.log(f"checkpoint: step {step} -> {path}")
        return path

    def _resume_root(self, base: Path) -> Path:
        """This rank's checkpoint directory under ``base``; a rank that has none (the data-parallel
        size grew since) reads rank 0's: under pure data parallelism every replica holds the whole
        state."""
        own = rank_dir(base, self.ctx.rank)
        if own.is_dir() or self.ctx.layout.tp * self.ctx.layout.pp > 1:
            return own
        return rank_dir(base, 0)

    def find(self, spec: str) -> Path | None:
        """The checkpoint to resume from: ``auto`` (the newest step complete on every rank; None
        when there is none), a checkpoint root / rank directory (same agreement there) or one
        step directory."""
        if spec == "auto":
            return self._agree(self._resume_root(self.base))
        given = Path(spec)
        if (given / STATE_FILE).exists():
            return given
        root = self._resume_root(given) if (given / "rank_0").is_dir() else given
        found = self._agree(root)
        if found is None:
            raise CheckpointError(f"no valid checkpoint at {spec}")
        return found

    def _agree(self, root: Path) -> Path | None:
        """The newest step whose checkpoint is complete (state.json + matching sha256) on every
        rank, or None when no rank has any. Collective; logs which rank lacked which newer step.
        Raises CheckpointError when ranks have checkpoints but no step in common."""
        all_ranks = self.ctx.collectives.all_ranks
        present = {step_of(p): p for p in list_checkpoints(root, validate=False)}
        mine = sorted(present)[-MAX_AGREED_STEPS:]
        table = all_ranks(mine + [-1] * (MAX_AGREED_STEPS - len(mine))).astype(np.int64)
        per_rank = [sorted(int(s) for s in row if s >= 0) for row in table]
        candidates = sorted(set.intersection(*(set(r) for r in per_rank)), reverse=True)
        lacking: dict[int, list[int]] = {r: [] for r in range(len(per_rank))}
        chosen = None
        for step in candidates:
            try:
                read_state(present[step])
                ok = True
            except CheckpointError as e:
                self.log(f"skipping checkpoint: {e}")
                ok = False
            oks = all_ranks([float(ok)])[:, 0]
            if oks.all():
                chosen = step
                break
            for r in np.flatnonzero(oks == 0):
                lacking[int(r)].append(step)
        newest_anywhere = max((s for r in per_rank for s in r), default=None)
        if newest_anywhere is None:
            return None
        floor = -1 if chosen is None else chosen
        for r, steps in enumerate(per_rank):
            missing = [s for s in {s for row in per_rank for s in row} if s > floor and s not in steps]
            lacking[r] = sorted(set(lacking[r]) | set(missing), reverse=True)
        gaps = [
            f"rank {r} lacks a complete checkpoint of step {', '.join(map(str, s))}"
            for r, s in lacking.items()
            if s
        ]
        if chosen is None:
            have = "; ".join(f"rank {r} has steps {steps or 'none'}" for r, steps in enumerate(per_rank))
            raise CheckpointError(
                f"no step has a complete checkpoint on every rank under {root.parent} ({have}): restore the "
                "missing files, resume from an explicit --resume PATH, or start a new --output"
            )
        if gaps:
            self.log(f"resume: {'; '.join(gaps)}; all {self.ctx.world} ranks resume from step {chosen}")
        return present[chosen]

    def check_resumable(
        self, spec: str, path: Path, global_batch: int, trajectory_hash: str, cfg: dict[str, Any]
    ) -> tuple[int, dict[str, Any]]:
        """Refuse a checkpoint this run cannot continue (another global batch, tensor/pipeline split
        or optimizer sharding, another trajectory, or ranks at different steps); return its step
        (from the samples consumed) and its state. ``cfg``: this run's resolved config as a dict."""
        ctx = self.ctx
        state = read_state(path)
        saved_cfg = state.get("config", {})
        saved_batch = int(state.get("global_batch") or saved_global_batch(saved_cfg))
        if saved_batch != global_batch:
            old = saved_cfg.get("parallel", {}).get("data_parallel", "?"), saved_cfg.get("train", {})
            raise ConfigError(
                f"checkpoint {path} was trained with a global batch of {saved_batch} rows (data_parallel "
                f"{old[0]} x batch_size {old[1].get('batch_size', '?')} x micro-batches), this run has "
                f"{global_batch}: the layout may change on resume, the global batch may not (keep "
                "data_parallel x batch_size x grad_accumulation_steps equal)"
            )
        world, tp, pp = state.get("layout", [ctx.world, 1, 1])
        shard = ctx.plan.optimizer_shard
        if (tp, pp) != (ctx.layout.tp, ctx.layout.pp) or bool(state.get("optimizer_shard")) != bool(shard):
            raise ConfigError(
                f"checkpoint {path} was written with tensor_parallel {tp}, pipeline_stages {pp}, "
                f"optimizer_shard {bool(state.get('optimizer_shard'))}; this run has {ctx.layout.tp}, "
                f"{ctx.layout.pp}, {shard}: those checkpoints are sliced per rank and "
                "this loop does not re-slice them (mindspore.parallel.transform_checkpoints would); keep "
                "them or start anew"
            )
        if state["trajectory_hash"] != trajectory_hash:
            changes = diff_keys(saved_cfg, cfg)
            raise ConfigError(
                f"checkpoint {path} belongs to a different run (config or data changed): "
                + ("; ".join(changes[:8]) or "the data files differ")
                + ". Resume with the original config and data, or start a new output directory."
            )
        step, rest = divmod(int(state["samples_consumed"]), global_batch)
        if rest or step != int(state["step"]):
            raise CheckpointError(
                f"{path}: samples consumed {state['samples_consumed']} do not make whole global batches of "
                f"{global_batch} ending at step {state['step']}"
            )
        if world != ctx.world:
            self.log(f"resume: world {world} -> {ctx.world} ranks, same global batch {global_batch}")
        steps = ctx.collectives.all_ranks([step])[:, 0]
        if len(set(steps.tolist())) > 1:
            raise CheckpointError(
                f"--resume {spec}: ranks would resume from different steps {steps.astype(int).tolist()}; "
                "give a checkpoint root (all ranks agree on a step there) or --resume auto"
            )
        return step, state
