"""The shard plan: how a split's rows are cut into files.

Every row of a split goes to a file: train files hold equal rows and the few rows left over
(fewer than there are equal files) go to the split's remainder file, ``<split>-remainder``,
listed last. Training loaders read a split's files as one set of rows assigned to ranks by
index (see :mod:`dataprep.formats`), so the remainder's rows are trained on like any other."""

from __future__ import annotations

import math
from dataclasses import dataclass

from dataprep.formats.binrows import DTYPES

TOKEN_DTYPES = {name: dtype.str for name, dtype in DTYPES.items()}  # "uint16" -> "<u2"
REMAINDER = "remainder"  # the stem suffix of a split's remainder file: <split>-remainder


@dataclass
class ShardPlan:
    """How one split's rows are cut into files, in final order: ``sizes`` (rows per file);
    ``remainder``: the last file is the remainder file, holding the ``rows mod equal files`` rows
    left over after files of equal size (fewer rows than there are equal files); ``equal``: the
    files (the remainder file apart) hold equal rows."""

    sizes: list[int]
    remainder: bool = False
    equal: bool = False

    @property
    def rows(self) -> int:
        return sum(self.sizes)

    def stem(self, split: str, k: int) -> str:
        """The file name of file ``k`` without its suffix: <split>-NNNNN, or <split>-remainder."""
        if self.remainder and k == len(self.sizes) - 1:
            return f"{split}-{REMAINDER}"
        return f"{split}-{k:05d}"


def shard_plan(rows: int, files: int, equal: bool) -> ShardPlan:
    """Every row in a file. ``equal``: ``files`` files of ``rows // files`` rows, then the
    ``rows mod files`` rows left over in a remainder file (none when they divide); else ``files``
    files whose sizes differ by at most one row. Never more files than rows, at least one."""
    files = max(1, min(files, rows)) if rows else 1
    per, extra = divmod(rows, files)
    if equal:
        return ShardPlan([per] * files + ([extra] if extra else []), remainder=extra > 0, equal=True)
    return ShardPlan([per + (1 if i < extra else 0) for i in range(files)])


@dataclass(frozen=True)
class FilesSettings:
    """How many files a split's rows go to (``pack``'s parameters of the same names): ``shards``
    train files (0: about ``shard_mb`` MiB of int32 tokens each, their number rounded up to a
    multiple of ``shard_multiple``); ``equal_shards``: train files of equal rows plus a remainder
    file. Validation files are about ``shard_mb`` each, sizes within one row."""

    shards: int = 0
    shard_mb: int = 256
    shard_multiple: int = 8
    equal_shards: bool = True

    def train_files(self, rows: int, row_length: int) -> int:
        if self.shards:
            return self.shards
        target = max(1, (self.shard_mb << 20) // (row_length * 4))
        k = self.shard_multiple
        if rows < k:
            return 1
        return max(k, math.ceil(math.ceil(rows / target) / k) * k)

    def plan(self, split: str, rows: int, row_length: int) -> ShardPlan:
        """The plan of ``split`` holding ``rows`` rows of ``row_length`` tokens."""
        if split == "train":
            return shard_plan(rows, self.train_files(rows, row_length), self.equal_shards)
        return shard_plan(rows, max(1, math.ceil(rows * row_length * 4 / (self.shard_mb << 20))), False)
