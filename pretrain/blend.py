"""Several prepared outputs blended by weight, as Megatron-LM's BlendedDataset.

The sample index is built once, from the weights, the outputs' row counts and the seed only (never
from the rank layout): sample ``i`` of the blend comes from the dataset ``d`` whose share so far
lags its weight most (``argmax_d weight_d * (i + 1) - taken_d``, ties to the lower d), and is that
dataset's next row in its own seeded order (a fresh permutation each time it is used up). The
blend holds as many samples as the datasets together; it is then read like any split (epoch
permutations, global batches, every dp-th row per rank: :mod:`pretrain.data`), so a run resumes
at the exact sample and any layout with the same global batch reads the same samples.

Every sample carries ``blend_id`` (its dataset) and ``source_label``: its index in
:attr:`BlendedRows.labels` (``name`` of the data entry, or ``name/source`` when that output was
itself mixed from sources, from its ``source_id`` column): the loss is logged per label.

Shards are read only through :mod:`dataprep.formats` (each split's registered training reader).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dataprep.formats.readers_for_training import SplitFiles
from dataprep.formats.registry import get_format

if TYPE_CHECKING:
    from pretrain.config import DataSource


@dataclass(frozen=True)
class DataEntry:
    """One output of ``data:`` in the training config."""

    path: str
    weight: float
    name: str


def blending_index(weights: list[float], n: int) -> tuple[np.ndarray, np.ndarray]:
    """(dataset of every sample int32 [n], its rank among that dataset's samples int64 [n]) for
    normalised ``weights``, Megatron's greedy rule (see the module docstring)."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    taken = np.zeros(len(w), dtype=np.int64)
    dataset = np.empty(n, dtype=np.int32)
    within = np.empty(n, dtype=np.int64)
    for i in range(n):
        d = int(np.argmax(w * (i + 1) - taken))
        dataset[i], within[i] = d, taken[d]
        taken[d] += 1
    return dataset, within


def source_labels(entries: list[DataEntry], splits: list[SplitFiles]) -> tuple[list[str], list[np.ndarray]]:
    """(labels, per entry the label index of each of its source ids, or of the entry itself)."""
    labels: list[str] = []
    maps: list[np.ndarray] = []
    for entry, split in zip(entries, splits, strict=True):
        names = split.shards.sources
        if names:
            maps.append(np.arange(len(labels), len(labels) + len(names), dtype=np.int32))
            labels += [f"{entry.name}/{s}" for s in names]
        else:
            maps.append(np.asarray([len(labels)], dtype=np.int32))
            labels.append(entry.name)
    return labels, maps


class BlendedRows:
    """The rows of several splits blended by weight (a TrainingRows of
    :mod:`dataprep.formats.registry`): ``batches(indices, batch_size)`` yields the blend's samples
    ``indices`` with ``row_ids`` (blend sample ids), ``blend_id`` and ``source_label``."""

    def __init__(
        self,
        entries: list[DataEntry],
        splits: list[SplitFiles],
        seed: int,
        open_rows: Callable[[SplitFiles], Any] | None = None,
    ):
        """``open_rows(split)``: the TrainingRows of a split (default: its format's own reader; the
        trainer's checks the files first, :class:`dataprep.formats.readers_for_training.CheckedRows`)."""
        if len(entries) != len(splits) or not entries:
            raise ValueError("BlendedRows needs one split per data entry")
        self.entries = entries
        self.rows = [(open_rows or (lambda s: get_format(s.format).training_rows(s)))(s) for s in splits]
        sizes = [len(r) for r in self.rows]
        empty = [e.name for e, n in zip(entries, sizes, strict=True) if n == 0]
        if empty:
            raise ValueError(f"data entries without rows: {', '.join(empty)}")
        common = set(self.rows[0].columns)
        for r in self.rows[1:]:
            common &= set(r.columns)
        self.columns = tuple(c for c in self.rows[0].columns if c in common)
        self.labels, self._label_of = source_labels(entries, splits)
        self.total = sum(sizes)
        self.dataset, within = blending_index([e.weight for e in entries], self.total)
        self.row = np.empty(self.total, dtype=np.int64)
        for d, size in enumerate(sizes):
            mine = np.flatnonzero(self.dataset == d)
            passes = int(within[mine].max()) // size + 1 if len(mine) else 0
            if passes:
                perms = [np.random.default_rng([seed, d, p]).permutation(size) for p in range(passes)]
                self.row[mine] = np.concatenate(perms)[within[mine]]

    def __len__(self) -> int:
        return self.total

    def samples_per_dataset(self) -> list[int]:
        return np.bincount(self.dataset, minlength=len(self.entries)).tolist()

    def batches(self, indices: np.ndarray, batch_size: int) -> Iterator[dict[str, Any]]:
        """Samples ``indices`` (in that order) in whole batches of ``batch_size``."""
        indices = np.asarray(indices, dtype=np.int64)
        for k in range(0, len(indices) - batch_size + 1, batch_size):
            yield self._read(indices[k : k + batch_size])

    def _read(self, ids: np.ndarray) -> dict[str, Any]:
        ds, rows = self.dataset[ids], self.row[ids]
        parts: dict[int, dict[str, Any]] = {}
        for d in np.unique(ds).tolist():
            sel = np.flatnonzero(ds == d)
            parts[d] = next(iter(self.rows[d].batches(rows[sel], len(sel))))
        first = parts[int(ds[0])]["input_ids"]
        out_ids = np.empty((len(ids), first.shape[1]), dtype=np.int32)
        asl: list[np.ndarray] | None = None
        if "actual_seq_len" in self.columns:
            asl = [np.zeros(0, np.int32)] * len(ids)
        mask = np.empty((len(ids), first.shape[1]), dtype=np.int32) if "loss_mask" in self.columns else None
        label = np.empty(len(ids), dtype=np.int32)
        for d, part in parts.items():
            sel = np.flatnonzero(ds == d)
            out_ids[sel] = part["input_ids"]
            if asl is not None:
                for j, a in zip(sel.tolist(), part["actual_seq_len"], strict=True):
                    asl[j] = a
            if mask is not None:
                mask[sel] = part["loss_mask"]
            src = part.get("source_id")
            label[sel] = self._label_of[d][src if src is not None else np.zeros(len(sel), np.int64)]
        return {
            "input_ids": out_ids,
            "actual_seq_len": asl,
            "loss_mask": mask,
            "row_ids": ids,
            "blend_id": ds.astype(np.int32),
            "source_label": label,
        }


def entries_from_config(data: list[DataSource]) -> list[DataEntry]:
    """``data:`` of a training config as DataEntry (names: the outputs' directory names, made
    unique by their position when two are equal)."""
    names = [Path(d.path).name or str(d.path) for d in data]
    out = []
    for i, (d, name) in enumerate(zip(data, names, strict=True)):
        unique = name if names.count(name) == 1 else f"{name}#{i}"
        out.append(DataEntry(str(d.path), float(d.weight), unique))
    return out
