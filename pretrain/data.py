"""Training data: rank layout, per-rank sharding, row features and a prefetching step loader.

Layout (as MindSpore/MindFormers): world = dp x tp x pp and
``rank = pp_stage * (dp * tp) + dp_rank * tp + tp_rank``. The dataset is split into ``dp`` shards
(``num_shards = dp, shard_id = dp_rank``), so all ranks of one model replica (same dp_rank, any
tp_rank / pp_stage) read identical batches.

Order (as Megatron's pretraining sampler, by consumed samples): epoch ``e`` is a permutation of
all rows seeded by ``seed + e`` (or the stored order when shuffle is off). The epoch is cut into
global batches of G = dp x batch_size x grad_accumulation_steps rows; rows past the last whole
global batch are left out of that epoch (fewer than G, a different few each epoch). Global step
``t`` of an epoch reads rows ``order[t*G:(t+1)*G]``; data-parallel rank ``r`` takes every dp-th of
them starting at ``r`` and splits its share into micro-batches of batch_size. So the rows of a step
depend only on the step and G: any layout with the same global batch (dp=2 x batch 2 or dp=1 x
batch 4, with or without accumulation) trains on the same rows at every step, which is what lets a
run resume exactly and resume under another data-parallel size.

Features of a micro-batch (numpy, fixed shapes, S = seq_length):
``input_ids`` int32 [B, S] = row[:-1]; ``labels`` int32 [B, S] = row[1:];
``loss_mask`` float32 [B, S] (1 where the label counts); ``position_ids`` int32 [B, S] (restart at
0 at each document start); ``segment_ids`` int32 [B, S] (document index within the row; padding is
its own segment). Boundaries come from ``actual_seq_len`` when stored, else from EOS positions.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from dataprep.formats.readers_for_training import SplitFiles
from dataprep.formats.registry import get_format


@dataclass(frozen=True)
class Layout:
    """Parallel layout of ``world`` ranks: dp x tp x pp."""

    world: int
    tp: int = 1
    pp: int = 1

    def __post_init__(self) -> None:
        if self.world < 1 or self.tp < 1 or self.pp < 1 or self.world % (self.tp * self.pp):
            raise ValueError(
                f"world size {self.world} is not divisible by tensor_parallel {self.tp} x "
                f"pipeline_stages {self.pp}"
            )

    @property
    def dp(self) -> int:
        return self.world // (self.tp * self.pp)

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(pp_stage, dp_rank, tp_rank) of a rank."""
        if not 0 <= rank < self.world:
            raise ValueError(f"rank {rank} outside world of {self.world}")
        return rank // (self.dp * self.tp), rank % (self.dp * self.tp) // self.tp, rank % self.tp

    def rank_of(self, pp_stage: int, dp_rank: int, tp_rank: int) -> int:
        return pp_stage * (self.dp * self.tp) + dp_rank * self.tp + tp_rank


def epoch_order(num_rows: int, epoch: int, seed: int, shuffle: bool) -> np.ndarray:
    """Row indices of one epoch, before sharding (int64 [num_rows])."""
    if not shuffle:
        return np.arange(num_rows, dtype=np.int64)
    return np.random.default_rng([seed, epoch]).permutation(num_rows).astype(np.int64)


def steps_per_epoch(num_rows: int, global_batch: int) -> int:
    """Whole global batches in one epoch (the remainder of the epoch's order is left out)."""
    return num_rows // global_batch


def rank_rows(order: np.ndarray, step_in_epoch: int, global_batch: int, dp: int, dp_rank: int) -> np.ndarray:
    """Row indices ``dp_rank`` reads at one step of an epoch: every dp-th row of the step's global
    batch ``order[step*G:(step+1)*G]``, starting at ``dp_rank`` (G / dp rows, micro-batches in order)."""
    lo = step_in_epoch * global_batch
    return order[lo : lo + global_batch][dp_rank::dp]


def segments_from_ends(ends: np.ndarray, s: int) -> tuple[np.ndarray, np.ndarray]:
    """(segment_ids, position_ids) int32 [s] for one row given its cumulative document ends."""
    starts = np.zeros(s, dtype=bool)
    starts[0] = True
    inner = ends[(ends > 0) & (ends < s)]
    starts[inner] = True
    return _segments_from_starts(starts[None, :])


def _segments_from_starts(starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """starts bool [B, S] (True where a document begins; column 0 must be True)."""
    seg = np.cumsum(starts, axis=1, dtype=np.int32) - 1
    idx = np.broadcast_to(np.arange(starts.shape[1], dtype=np.int32), starts.shape)
    first = np.maximum.accumulate(np.where(starts, idx, 0), axis=1)
    return seg.astype(np.int32), (idx - first).astype(np.int32)


def row_features(
    rows: np.ndarray,
    actual_seq_len: list[np.ndarray] | None,
    loss_mask: np.ndarray | None,
    eos_id: int,
    pad_id: int | None,
    mask_cross_document_label: bool = False,
) -> dict[str, np.ndarray]:
    """Model inputs for rows int [B, S+1] (see the module docstring for the output contract).

    Loss mask: ``loss_mask[:, 1:]`` when stored (it marks row tokens that count as labels; a stored
    mask of seq_length is taken as already aligned with the labels); else
    labels past the last real token (``actual_seq_len[-1]``) are masked; else padding is found from
    ``pad_id`` (a trailing run of pad tokens; when pad_id == eos_id the first one is the real EOS).
    Document boundaries: ``actual_seq_len`` when stored; else a document ends after each EOS.

    ``mask_cross_document_label``: also mask label i when row token i + 1 starts a document, i.e.
    the prediction made at a document's last token (its EOS) of the next document's first token.
    With EOS-derived boundaries this is exactly Megatron-LM's ``--eod-mask-loss`` (mask the loss
    where the input token is EOD); the EOS itself stays a label (the model still learns to end a
    document).
    """
    rows = np.asarray(rows, dtype=np.int32)
    b, length = rows.shape
    s = length - 1
    inputs, labels = rows[:, :-1], rows[:, 1:]
    # doc_start[k, j]: row token j begins a document (j = 0 always does)
    doc_start = np.zeros((b, length), dtype=bool)
    doc_start[:, 0] = True
    if actual_seq_len is not None:
        real = np.empty(b, np.int64)
        for k, ends in enumerate(actual_seq_len):
            ends = np.asarray(ends, dtype=np.int64)
            real[k] = ends[-1] if len(ends) else length
            doc_start[k, ends[(ends > 0) & (ends < length)]] = True  # the padding is a segment too
        seg, pos = _segments_from_starts(doc_start[:, :s])
    else:
        doc_start[:, 1:] = rows[:, :-1] == eos_id
        seg, pos = _segments_from_starts(doc_start[:, :s])
        real = np.full(b, length, np.int64)
        if pad_id is not None:
            not_pad = rows != pad_id
            last = np.where(not_pad.any(axis=1), length - 1 - np.argmax(not_pad[:, ::-1], axis=1), -1)
            trailing = last < length - 1
            extra = 1 if pad_id == eos_id else 0
            real = np.where(trailing, last + 1 + extra, length)
    if loss_mask is not None:
        lm = np.asarray(loss_mask)
        if lm.shape == (b, length):  # per row token: does it count as a label
            lm = lm[:, 1:]
        elif lm.shape != (b, s):  # (a mask of seq_length is already aligned with the labels)
            raise ValueError(f"loss_mask shape {lm.shape} fits neither ({b}, {length}) nor ({b}, {s})")
        mask = (lm != 0).astype(np.float32)
    else:
        mask = (np.arange(1, length)[None, :] < real[:, None]).astype(np.float32)
    if mask_cross_document_label:
        mask[doc_start[:, 1:]] = 0.0
    return {
        "input_ids": np.ascontiguousarray(inputs),
        "labels": np.ascontiguousarray(labels),
        "loss_mask": mask,
        "position_ids": pos,
        "segment_ids": seg,
    }


FEATURES = ("input_ids", "labels", "loss_mask", "position_ids", "segment_ids")


def with_labels(f: dict[str, np.ndarray], raw: dict[str, Any]) -> dict[str, np.ndarray]:
    """``f`` with the raw batch's ``row_ids`` and each row's ``source_label`` (the blend's, else
    the mixed output's ``source_id``), when it has them."""
    if "row_ids" in raw:
        f["row_ids"] = raw["row_ids"]
    if raw.get("source_label") is not None:
        f["source_label"] = np.asarray(raw["source_label"], dtype=np.int32)
    elif raw.get("source_id") is not None:
        f["source_label"] = np.asarray(raw["source_id"], dtype=np.int32)
    return f


class RowSource:
    """Rows of one split for one dp rank, epoch by epoch, read through the split's shard format
    (:mod:`dataprep.formats.registry`: .bin via memmap, MindRecord via MindDataset with a
    SubsetSampler of this rank's row indices; every format reads the same order)."""

    def __init__(self, split: SplitFiles, dp: int, dp_rank: int, seed: int, shuffle: bool, rows: Any = None):
        """``rows``: a TrainingRows to read instead of the split's own (e.g. a blend of several
        outputs, :class:`pretrain.blend.BlendedRows`)."""
        self.split, self.dp, self.dp_rank, self.seed, self.shuffle = split, dp, dp_rank, seed, shuffle
        self.rows = rows if rows is not None else get_format(split.format).training_rows(split)
        self.columns = self.rows.columns
        self.total_rows = len(self.rows)
        self._orders: dict[int, np.ndarray] = {}

    def order(self, epoch: int) -> np.ndarray:
        """The epoch's permutation of all rows (cached for the two most recent epochs)."""
        if epoch not in self._orders:
            if len(self._orders) >= 2:
                self._orders.pop(min(self._orders))
            self._orders[epoch] = epoch_order(self.total_rows, epoch, self.seed, self.shuffle)
        return self._orders[epoch]

    def steps_per_epoch(self, global_batch: int) -> int:
        return steps_per_epoch(self.total_rows, global_batch)

    def step_batches(
        self, epoch: int, first_step: int, n_steps: int, global_batch: int, batch_size: int
    ) -> Iterator[dict[str, Any]]:
        """This rank's raw micro-batches ({column: rows, "row_ids": indices}) for steps
        ``first_step .. first_step + n_steps - 1`` of an epoch, in order."""
        order = self.order(epoch)
        idx = (
            np.concatenate(
                [
                    rank_rows(order, s, global_batch, self.dp, self.dp_rank)
                    for s in range(first_step, first_step + n_steps)
                ]
            )
            if n_steps
            else np.zeros(0, np.int64)
        )
        yield from self.read(idx, batch_size)

    def read(self, idx: np.ndarray, batch_size: int) -> Iterator[dict[str, Any]]:
        """Rows ``idx`` (in that order) as raw batches of ``batch_size`` rows."""
        yield from self.rows.batches(idx, batch_size)


class StepLoader:
    """Yields, for steps ``start_step .. end_step-1``, a list of ``accum`` micro-batch feature dicts.

    A background thread prepares up to ``prefetch`` steps ahead; ``wait_seconds`` accumulates the
    time the consumer spent blocked waiting for data (the data-wait share of step time), measured
    with ``clock`` (seconds; injectable for tests).
    """

    def __init__(
        self,
        source: RowSource,
        batch_size: int,
        accum: int,
        eos_id: int,
        pad_id: int | None,
        start_step: int,
        end_step: int,
        prefetch: int = 4,
        use_stored: bool = True,
        mask_cross_document_label: bool = False,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.source, self.batch_size, self.accum = source, batch_size, accum
        self.clock = clock
        self.eos_id, self.pad_id, self.use_stored = eos_id, pad_id, use_stored
        self.mask_cross_document_label = mask_cross_document_label
        self.rows_per_step = batch_size * accum
        self.global_batch = self.rows_per_step * source.dp
        self.steps_per_epoch = source.steps_per_epoch(self.global_batch)
        if self.steps_per_epoch == 0:
            raise ValueError(
                f"the split has {source.total_rows} rows, fewer than one global batch (data_parallel "
                f"{source.dp} x batch_size {batch_size} x {accum} accumulation = {self.global_batch}); use a "
                "smaller train.batch_size / grad_accumulation_steps or more data"
            )
        self.start_step, self.end_step = start_step, end_step
        self.wait_seconds = 0.0
        self._q: queue.Queue = queue.Queue(maxsize=max(1, prefetch))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name="step-loader", daemon=True)
        self._thread.start()

    def position(self, step: int) -> tuple[int, int]:
        """(epoch, step within epoch) of a global step."""
        return divmod(step, self.steps_per_epoch)

    def _features(self, raw: dict[str, Any]) -> dict[str, np.ndarray]:
        f = row_features(
            raw["input_ids"],
            raw.get("actual_seq_len") if self.use_stored else None,
            raw.get("loss_mask") if self.use_stored else None,
            self.eos_id,
            self.pad_id,
            self.mask_cross_document_label,
        )
        return with_labels(f, raw)

    def _produce(self) -> None:
        try:
            step = self.start_step
            while step < self.end_step and not self._stop.is_set():
                epoch, offset = self.position(step)
                n_steps = min(self.steps_per_epoch - offset, self.end_step - step)
                batches = self.source.step_batches(epoch, offset, n_steps, self.global_batch, self.batch_size)
                micro: list[dict[str, np.ndarray]] = []
                for raw in batches:
                    micro.append(self._features(raw))
                    if len(micro) == self.accum:
                        self._put((step, micro))
                        micro = []
                        step += 1
                        if self._stop.is_set():
                            return
            self._put(None)
        except BaseException as e:  # hand the failure to the consumer
            self._put(e)

    def _put(self, item: Any) -> None:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def __iter__(self) -> Iterator[tuple[int, list[dict[str, np.ndarray]]]]:
        while True:
            t0 = self.clock()
            item = self._next_item()
            self.wait_seconds += self.clock() - t0
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def _next_item(self) -> Any:
        """The next prepared step (blocks until the loader thread has one)."""
        return self._q.get()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
