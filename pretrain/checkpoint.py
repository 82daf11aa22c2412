"""Atomic training checkpoints with integrity checks.

Layout: ``<dir>/rank_<r>/step_<NNNNNNNN>/`` holding ``train.ckpt`` (model parameters, optimizer
moments and step, as one MindSpore checkpoint) and ``state.json`` (step, optimizer updates, loss
scale, data position, trajectory hash, sha256 of train.ckpt). A checkpoint is written into a
hidden temporary directory, fsynced, then renamed into place; ``state.json`` is written last, so a
directory without a readable state.json, or whose train.ckpt does not match the recorded sha256,
is partial or corrupt and is skipped by ``--resume auto``. Old checkpoints are pruned separately
(:func:`prune`), after every rank has written the new one, so that a step complete on all ranks
always survives.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

STEP_DIR = re.compile(r"^step_(\d{8})$")
CKPT_FILE = "train.ckpt"
STATE_FILE = "state.json"


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
