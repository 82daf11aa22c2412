"""Training data: rank layout, per-rank sharding, row features and a prefetching step loader.

Layout (as MindSpore/MindFormers): world = dp x tp x pp and
``rank = pp_stage * (dp * tp) + dp_rank * tp + tp_rank``. The dataset is split into ``dp`` shards
(``num_shards = dp, shard_id = dp_rank``), so all ranks of one model replica (same dp_rank, any
tp_rank / pp_stage) read identical batches.

Order: epoch ``e`` is a permutation of all rows seeded by ``seed + e`` (or the stored order when
shuffle is off), padded by repeating its first rows to a multiple of ``dp`` (so every row is seen
every epoch; MindDataset pads the same way), then split among the dp ranks. A step consumes
``grad_accumulation_steps`` micro-batches of ``batch_size`` rows per rank; rows left over at the end
of an epoch (fewer than one step) are skipped. The rows of step ``t`` depend only on ``t``: that is
what makes resumption exact.

Features of a micro-batch (numpy, fixed shapes, S = seq_length):
``input_ids`` int32 [B, S] = row[:-1]; ``labels`` int32 [B, S] = row[1:];
``loss_mask`` float32 [B, S] (1 where the label counts); ``position_ids`` int32 [B, S] (restart at
0 at each document start); ``segment_ids`` int32 [B, S] (document index within the row; padding is
its own segment). Boundaries come from ``actual_seq_len`` when stored, else from EOS positions.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from dataprep.formats.readers_for_training import BinRows, SplitFiles, mindrecord_columns


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


def shard_of(order: np.ndarray, dp: int, dp_rank: int) -> np.ndarray:
    """dp_rank's share of an epoch order: padded by wrap-around to a multiple of dp, then strided."""
    per_rank = math.ceil(len(order) / dp)
    pad = per_rank * dp - len(order)
    if pad:
        order = np.concatenate([order, order[:pad]])
    return order[dp_rank::dp]


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
) -> dict[str, np.ndarray]:
    """Model inputs for rows int [B, S+1] (see the module docstring for the output contract).

    Loss mask: ``loss_mask[:, 1:]`` when stored (it marks row tokens that count as labels; a stored
    mask of seq_length is taken as already aligned with the labels); else
    labels past the last real token (``actual_seq_len[-1]``) are masked; else padding is found from
    ``pad_id`` (a trailing run of pad tokens; when pad_id == eos_id the first one is the real EOS).
    Document boundaries: ``actual_seq_len`` when stored; else a document ends after each EOS.
    """
    rows = np.asarray(rows, dtype=np.int32)
    b, length = rows.shape
    s = length - 1
    inputs, labels = rows[:, :-1], rows[:, 1:]
    if actual_seq_len is not None:
        seg = np.empty((b, s), np.int32)
        pos = np.empty((b, s), np.int32)
        real = np.empty(b, np.int64)
        for k, ends in enumerate(actual_seq_len):
            ends = np.asarray(ends, dtype=np.int64)
            seg[k], pos[k] = (a[0] for a in segments_from_ends(ends, s))
            real[k] = ends[-1] if len(ends) else length
    else:
        starts = np.zeros((b, s), dtype=bool)
        starts[:, 0] = True
        starts[:, 1:] = inputs[:, :-1] == eos_id
        seg, pos = _segments_from_starts(starts)
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
    return {
        "input_ids": np.ascontiguousarray(inputs),
        "labels": np.ascontiguousarray(labels),
        "loss_mask": mask,
        "position_ids": pos,
        "segment_ids": seg,
    }


_DATASET_SEED_LOCK = threading.Lock()

FEATURES = ("input_ids", "labels", "loss_mask", "position_ids", "segment_ids")


class RowSource:
    """Rows of one split for one dp rank, epoch by epoch (bin via memmap, MindRecord via MindDataset)."""

    def __init__(self, split: SplitFiles, dp: int, dp_rank: int, seed: int, shuffle: bool):
        self.split, self.dp, self.dp_rank, self.seed, self.shuffle = split, dp, dp_rank, seed, shuffle
        if split.format == "bin":
            self.bin = BinRows(split)
            self.columns = self.bin.columns
            self.total_rows = len(self.bin)
        else:
            self.bin = None
            self.columns = mindrecord_columns(split)
            self.total_rows = self._mindrecord_size()
        self.rows_per_rank = math.ceil(self.total_rows / dp) if self.total_rows else 0

    def _files_arg(self) -> str | list[str]:
        files = [str(p) for p in self.split.files]
        # one file: MindDataset finds the other components of that MindRecord set itself
        return files[0] if len(files) == 1 else files

    def _mindrecord_size(self) -> int:
        import mindspore.dataset as ds

        rows = ds.MindDataset(self._files_arg(), columns_list=["input_ids"], shuffle=False).get_dataset_size()
        if self.split.rows and rows != self.split.rows:
            raise ValueError(
                f"MindRecord files of split {self.split.split!r} hold {rows} rows but the manifest lists "
                f"{self.split.rows} (rerun prepare or `dataprep verify`)"
            )
        return int(rows)

    def _mindrecord_rows(self, epoch: int, skip_rows: int) -> Iterator[dict[str, np.ndarray]]:
        import mindspore.dataset as ds

        with _DATASET_SEED_LOCK:  # the dataset seed is process-global: set + build + start atomically
            ds.config.set_seed(self.seed + epoch)  # before the dataset is built: it fixes the order
            dataset = ds.MindDataset(
                self._files_arg(),
                columns_list=list(self.columns),
                num_shards=self.dp if self.dp > 1 else None,
                shard_id=self.dp_rank if self.dp > 1 else None,
                shuffle=self.shuffle,
                num_parallel_workers=1,
            )
            if skip_rows:
                dataset = dataset.skip(skip_rows)
            it = dataset.create_dict_iterator(num_epochs=1, output_numpy=True)
        return it

    def batches(self, epoch: int, batch_size: int, skip_batches: int, count: int) -> Iterator[dict[str, Any]]:
        """``count`` raw batches ({column: rows}) of one epoch, starting after ``skip_batches``."""
        if self.bin is not None:
            idx = shard_of(
                epoch_order(self.total_rows, epoch, self.seed, self.shuffle), self.dp, self.dp_rank
            )
            for k in range(skip_batches, skip_batches + count):
                batch = self.bin.read(idx[k * batch_size : (k + 1) * batch_size])
                batch["row_ids"] = idx[k * batch_size : (k + 1) * batch_size]
                yield batch
            return
        it = self._mindrecord_rows(epoch, skip_batches * batch_size)
        buf: list[dict[str, np.ndarray]] = []
        produced = 0
        for row in it:
            buf.append(row)
            if len(buf) == batch_size:
                yield {
                    "input_ids": np.stack([r["input_ids"] for r in buf]).astype(np.int32),
                    "actual_seq_len": [r["actual_seq_len"] for r in buf]
                    if "actual_seq_len" in self.columns
                    else None,
                    "loss_mask": np.stack([r["loss_mask"] for r in buf])
                    if "loss_mask" in self.columns
                    else None,
                }
                buf = []
                produced += 1
                if produced == count:
                    break
        if produced < count:
            raise RuntimeError(f"MindDataset ended after {produced} of {count} batches in epoch {epoch}")


class StepLoader:
    """Yields, for steps ``start_step .. end_step-1``, a list of ``accum`` micro-batch feature dicts.

    A background thread prepares up to ``prefetch`` steps ahead; ``wait_seconds`` accumulates the
    time the consumer spent blocked waiting for data (the data-wait share of step time).
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
    ):
        self.source, self.batch_size, self.accum = source, batch_size, accum
        self.eos_id, self.pad_id, self.use_stored = eos_id, pad_id, use_stored
        self.rows_per_step = batch_size * accum
        self.steps_per_epoch = source.rows_per_rank // self.rows_per_step
        if self.steps_per_epoch == 0:
            raise ValueError(
                f"the split has {source.total_rows} rows = {source.rows_per_rank} per data-parallel rank, "
                f"fewer than one step needs ({batch_size} x {accum} accumulation); use a smaller "
                "train.batch_size / grad_accumulation_steps or more data"
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
        )
        if "row_ids" in raw:
            f["row_ids"] = raw["row_ids"]
        return f

    def _produce(self) -> None:
        try:
            step = self.start_step
            while step < self.end_step and not self._stop.is_set():
                epoch, offset = self.position(step)
                n_steps = min(self.steps_per_epoch - offset, self.end_step - step)
                batches = self.source.batches(
                    epoch, self.batch_size, offset * self.accum, n_steps * self.accum
                )
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
            t0 = time.perf_counter()
            item = self._q.get()
            self.wait_seconds += time.perf_counter() - t0
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
