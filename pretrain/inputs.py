"""What a training run reads: the prepared output(s) (one, or several blended by weight), their
compatibility, this rank's row source, the eval rows, and the identity of the data that goes into
the trajectory hash. Shard reading itself is pretrain/data.py and dataprep.formats.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats.readers_for_training import CheckedRows, ShardCheck, ShardError, SplitFiles, open_split
from dataprep.formats.registry import get_format
from pretrain.blend import BlendedRows, entries_from_config
from pretrain.config import ConfigError, TrainingConfig
from pretrain.data import RowSource, row_features, with_labels


class TrainingData:
    """The run's data for one data-parallel rank (``dp`` ranks, this one ``dp_rank``).

    ``source``: this rank's training rows; ``eval_split`` / ``eval_source()``: the eval rows (None
    when eval is off or there is no eval split); ``labels``: source names of blended data or a mixed
    output ([] otherwise); ``identity``: what the trajectory hash records of the data."""

    def __init__(
        self,
        cfg: TrainingConfig,
        data: Path,
        dp: int,
        dp_rank: int,
        pipelined: bool,
        log: Callable[[str], None],
    ):
        t = cfg.train
        self.cfg, self.data = cfg, data
        self.dp, self.dp_rank = dp, dp_rank
        entries = entries_from_config(cfg.data)
        try:
            paths = [e.path for e in entries] or [str(data)]
            splits = [open_split(p, t.split, t.data_format) for p in paths]
        except (ShardError, FileNotFoundError) as e:
            raise ConfigError(str(e)) from None
        split = splits[0]
        check_compatible(paths, splits)
        if not t.verify_shards:
            log(
                "shards: sha256 check against manifest.json skipped (train.verify_shards false or "
                "--no-verify-shards); sizes and token ids are still checked"
            )
        self.entries, self.splits, self.split = entries, splits, split
        self.shards = split.shards
        self.eos_id = int(self.shards.eos_id)  # type: ignore[arg-type]
        self.pad_id = self.shards.pad_id
        self.identity: dict[str, Any] = {
            "split": split.split,
            "format": split.format,
            "files": [{"path": e.path, "rows": e.rows, "sha256": e.sha256} for e in split.entries],
        }
        self.blend: BlendedRows | None = None
        self.labels: list[str] = list(split.shards.sources or [])
        if entries:
            self.identity = {
                "split": split.split,
                "format": split.format,
                "blend": [
                    {"weight": e.weight, "files": [{"rows": f.rows, "sha256": f.sha256} for f in sp.entries]}
                    for e, sp in zip(entries, splits, strict=True)
                ],
            }
            self.blend = BlendedRows(entries, splits, int(cfg.seed), open_rows=self.checked_rows)
            self.labels = self.blend.labels
        self.source = RowSource(
            split,
            dp,
            dp_rank,
            int(cfg.seed),
            bool(t.shuffle),
            rows=self.blend if self.blend is not None else self.checked_rows(split),
        )
        self.eval_split: SplitFiles | None = None
        self._eval_rows: BlendedRows | None = None
        self._eval_source: RowSource | None = None
        e = cfg.eval
        if e.interval > 0 and pipelined:
            log("eval: off under pipeline parallelism (the eval graph is not pipelined here)")
        elif e.interval > 0 and entries:
            have = []
            for entry, path in zip(entries, paths, strict=True):
                try:
                    have.append((entry, open_split(path, e.split, t.data_format)))
                except ShardError as err:
                    log(f"eval: {entry.name} left out ({err})")
            if have:
                self.eval_split = have[0][1]
                self._eval_rows = BlendedRows(
                    [h[0] for h in have], [h[1] for h in have], 0, open_rows=self.checked_rows
                )
        elif e.interval > 0:
            try:
                self.eval_split = open_split(data, e.split, t.data_format)
            except ShardError as err:
                log(f"eval: disabled ({err})")

    def checked_rows(self, split: SplitFiles) -> CheckedRows:
        """The split's training rows, read only once checked: sizes now, sha256 in the background
        and per file before its first row (unless train.verify_shards is false), token ids per
        batch (:class:`dataprep.formats.readers_for_training.CheckedRows`)."""
        check = ShardCheck(split, hashes=bool(self.cfg.train.verify_shards))
        check.check_sizes()
        check.start()
        return CheckedRows(get_format(split.format).training_rows(split), split, check)

    def eval_source(self) -> RowSource | None:
        """This rank's eval rows (opened on first use), or None without an eval split."""
        if self.eval_split is None:
            return None
        if self._eval_source is None:
            rows = self._eval_rows if self._eval_rows is not None else self.checked_rows(self.eval_split)
            self._eval_source = RowSource(self.eval_split, self.dp, self.dp_rank, 0, shuffle=False, rows=rows)
        return self._eval_source

    def features(self, raw: dict[str, Any]) -> dict[str, np.ndarray]:
        """The model inputs of a batch of rows as read (see pretrain/data.py)."""
        f = row_features(
            raw["input_ids"],
            raw.get("actual_seq_len"),
            raw.get("loss_mask"),
            self.eos_id,
            self.pad_id,
            bool(self.cfg.train.mask_cross_document_label),
        )
        return with_labels(f, raw)


def check_compatible(paths: list[str], splits: list[Any]) -> None:
    """Blended outputs must share the row layout and the token ids (same tokenizer)."""
    from dataprep.formats.manifest import read_manifest

    tokenizers = [(read_manifest(s.out)[1].tokenizer or {}).get("sha256") for s in splits]
    for path, sha in zip(paths[1:], tokenizers[1:], strict=True):
        if sha != tokenizers[0]:
            raise ConfigError(
                f"data: {path} was tokenized with another tokenizer than {paths[0]} (sha256 {sha} vs "
                f"{tokenizers[0]}); prepare both with the same tokenize.tokenizer file"
            )
    first = splits[0].shards
    for path, split in zip(paths[1:], splits[1:], strict=True):
        sh = split.shards
        for key in ("seq_length", "vocab_size", "eos_id", "pad_id", "bos_id"):
            if getattr(sh, key) != getattr(first, key):
                raise ConfigError(
                    f"data: {path} has {key} {getattr(sh, key)} but {paths[0]} has {getattr(first, key)}; "
                    "blended outputs must be prepared with the same tokenizer and pack.seq_length"
                )
