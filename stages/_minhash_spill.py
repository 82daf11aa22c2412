"""The files minhash_dedup spills and their readers (no stage here).

compute: per task, :class:`TaskSpill` writes ``<task>.bands.parquet`` (id, length, shingle count,
preview, script code, one uint64 column per band) and either the shingle sets
(``<task>.shingles.u32`` + ``<task>.offsets.i64``, ``verify: exact``) or the signatures
(``<task>.sig.u32``), each renamed into place when the task ends. decide: :class:`Layout` is what
every decide call shares (tasks, corpus offsets, settings; where the spills and the round files
are); :class:`Spills` gives a worker random access to the spilled data by corpus position.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dataprep.decide_jobs import load_shared
from dataprep.document import Document, meta_values
from dataprep.formats import arrow
from stages import _minhash as mh
from stages import _minhash_lsh as lsh
from stages._keyspill import ROW_GROUP

PAIR_CHUNK = 20_000  # pairs verified at once (signature: 2 x 20k x num_perm x 4 bytes)
SHINGLE_CHUNK = 1_000_000  # shingles of the pairs verified at once (exact): ~40 MB of work space
SPILL_SUFFIXES = (".bands.parquet", ".sig.u32", ".shingles.u32", ".offsets.i64")
MAP_CACHE = 256  # memory maps a worker keeps open at once (file descriptors)


SCRIPTS = ("", "Hans", "Hant", "Latn", "Jpan", "Kore", "Cyrl")  # meta["script"] as a code; others: 255


def script_code(script: object) -> int:
    """The code of a document's ``meta["script"]`` (set by lang_id): 0 when unknown."""
    if not script:
        return 0
    return SCRIPTS.index(script) if script in SCRIPTS else 255


def tmp_path(path: Path) -> Path:
    """Where ``path`` is written before it is renamed into place."""
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


class TaskSpill:
    """The files one task writes in compute; ``close`` renames them into place."""

    def __init__(self, work_dir: Path, task_id: str, bands: int, exact: bool):
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.final = [work_dir / f"{task_id}.bands.parquet"]
        if exact:  # the shingle sets; else the signatures (for estimates)
            self.final += [work_dir / f"{task_id}.shingles.u32", work_dir / f"{task_id}.offsets.i64"]
        else:
            self.final += [work_dir / f"{task_id}.sig.u32"]
        self.tmps = [tmp_path(p) for p in self.final]
        self.schema = pa.schema(
            [
                ("id", pa.string()),
                ("length", pa.int32()),
                ("shingles", pa.int32()),
                ("preview", pa.string()),
                ("script", pa.uint8()),
                *[(f"band{j:03d}", pa.uint64()) for j in range(bands)],
            ]
        )
        # band keys are random: neither dictionary encoding nor compression would pay off
        compression = {name: "zstd" if name in ("id", "preview") else "none" for name in self.schema.names}
        self.table = pq.ParquetWriter(
            self.tmps[0], self.schema, compression=compression, use_dictionary=False
        )
        self.files = [open(p, "wb") for p in self.tmps[1:]]  # noqa: SIM115 (closed in close())
        self.exact = exact
        self.shingles_written = 0
        self.pending: list[tuple] = []
        self.pending_rows = 0
        if exact:
            self.files[1].write(np.zeros(1, dtype=np.int64).tobytes())

    def write(
        self, docs: list[Document], batch: mh.ShingleBatch, sig: np.ndarray, keys: np.ndarray, preview: int
    ) -> None:
        self.pending.append(
            (
                [d.id for d in docs],
                np.fromiter((len(d.text) for d in docs), dtype=np.int32, count=len(docs)),
                batch.sizes().astype(np.int32),
                [d.text[:preview] for d in docs],
                np.fromiter(map(script_code, meta_values(docs, "script")), dtype=np.uint8, count=len(docs)),
                keys,
            )
        )
        self.pending_rows += len(docs)
        if self.pending_rows >= ROW_GROUP:
            self._flush()
        if self.exact:
            self.files[0].write(np.ascontiguousarray(batch.hashes, dtype=np.uint32).data)  # no copy
            ends = batch.offsets[1:] + self.shingles_written
            self.files[1].write(ends.astype(np.int64).data)
            self.shingles_written += int(batch.offsets[-1])
        else:
            self.files[0].write(np.ascontiguousarray(sig, dtype=np.uint32).data)

    def _flush(self) -> None:
        """Write the buffered batches as one row group (fewer, larger row groups: faster)."""
        import pyarrow as pa

        if not self.pending:
            return
        ids, lengths, sizes, previews, scripts, keys = zip(*self.pending, strict=True)
        band_keys = np.concatenate(keys)
        columns = [
            arrow.strings([x for part in ids for x in part]),
            arrow.numbers(np.concatenate(lengths), np.int32),
            arrow.numbers(np.concatenate(sizes), np.int32),
            arrow.strings([x for part in previews for x in part]),
            arrow.numbers(np.concatenate(scripts), np.uint8),
            *[arrow.numbers(band_keys[:, j], np.uint64) for j in range(band_keys.shape[1])],
        ]
        table = pa.Table.from_arrays(columns, schema=self.schema)
        self.table.write_table(table, row_group_size=ROW_GROUP)
        self.pending, self.pending_rows = [], 0

    def close(self) -> None:
        self._flush()
        self.table.close()
        for f in self.files:
            f.close()
        for tmp, final in zip(self.tmps, self.final, strict=True):
            os.replace(tmp, final)


@dataclass(frozen=True)
class Layout:
    """What every decide call shares (written once as JSON, read by each call): settings, the
    tasks and the corpus position of each task's first document (global position = offsets[task]
    + row), plus the total."""

    work_dir: str
    task_ids: list[str]
    offsets: list[int]
    num_perm: int
    bands: int
    verify: str
    threshold: float
    examples: int

    @property
    def exact(self) -> bool:
        return self.verify == "exact"

    @property
    def bits(self) -> int:
        """Low bits of a band key replaced by the document's corpus position."""
        return int(max(self.offsets[-1], 2) - 1).bit_length()

    @property
    def lsh(self) -> Path:
        return Path(self.work_dir) / "lsh"

    def spill(self, t: int, suffix: str) -> Path:
        return Path(self.work_dir) / f"{self.task_ids[t]}{suffix}"

    def index(self, t: int, name: str) -> Path:
        return self.lsh / f"{self.task_ids[t]}.{name}"


def load_layout(path: str) -> Layout:
    """The :class:`Layout` shared at ``path`` (parsed once per process)."""
    return load_shared(path, Layout)


class Spills:
    """A worker's random access to the spilled per-document data by corpus position: lengths,
    signatures, shingle sets (memory maps, opened on demand, at most MAP_CACHE at once)."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self.offsets = np.asarray(layout.offsets, dtype=np.int64)
        self._maps: dict[tuple[int, str], np.ndarray] = {}

    def _map(self, t: int, name: str) -> np.ndarray:
        key = (t, name)
        arr = self._maps.get(key)
        if arr is None:
            if len(self._maps) >= MAP_CACHE:
                self._maps.clear()
            if name in ("length", "script"):
                arr = np.load(self.layout.index(t, f"{name}.npy"), mmap_mode="r")
            else:
                path = self.layout.spill(t, name)
                dtype = np.int64 if name.endswith(".i64") else np.uint32
                arr = np.memmap(path, dtype=dtype, mode="r") if path.stat().st_size else np.zeros(0, dtype)
                if name == ".sig.u32":
                    arr = arr.reshape(-1, self.layout.num_perm)
            self._maps[key] = arr
        return arr

    def _split(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pos = np.asarray(pos, dtype=np.int64)
        task = np.searchsorted(self.offsets, pos, side="right") - 1
        return task, pos - self.offsets[task]

    def _gather(self, pos: np.ndarray, name: str, out: np.ndarray, shift: int = 0) -> np.ndarray:
        task, row = self._split(pos)
        for t in np.unique(task):
            sel = task == t
            out[sel] = self._map(int(t), name)[row[sel] + shift]
        return out

    def lengths(self, pos: np.ndarray) -> np.ndarray:
        return self._gather(pos, "length", np.empty(len(pos), dtype=np.int64))

    def scripts(self, pos: np.ndarray) -> np.ndarray:
        return self._gather(pos, "script", np.empty(len(pos), dtype=np.uint8))

    def signatures(self, pos: np.ndarray) -> np.ndarray:
        return self._gather(pos, ".sig.u32", np.empty((len(pos), self.layout.num_perm), dtype=np.uint32))

    def shingle_counts(self, pos: np.ndarray) -> np.ndarray:
        ends = self._gather(pos, ".offsets.i64", np.empty(len(pos), dtype=np.int64), shift=1)
        return ends - self._gather(pos, ".offsets.i64", np.empty(len(pos), dtype=np.int64))

    def shingle_sets(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(values, sizes): the shingle sets of ``pos`` concatenated in that order, gathered from
        the mapped files task by task (vectorised)."""
        task, _ = self._split(pos)
        starts = self._gather(pos, ".offsets.i64", np.empty(len(pos), dtype=np.int64))
        sizes = self._gather(pos, ".offsets.i64", np.empty(len(pos), dtype=np.int64), shift=1) - starts
        values = np.empty(int(sizes.sum()), dtype=np.uint32)
        dest = np.cumsum(sizes) - sizes
        for t in np.unique(task):
            sel = np.flatnonzero(task == t)
            shingles = self._map(int(t), ".shingles.u32")
            values[lsh.ranges(dest[sel], sizes[sel])] = shingles[lsh.ranges(starts[sel], sizes[sel])]
        return values, sizes

    def similarity(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Jaccard of the pairs (u[i], v[i]): exact from the shingle sets (``verify: exact``), else
        estimated from the signatures. Pairs are taken in chunks of at most PAIR_CHUNK pairs and
        SHINGLE_CHUNK shingles (memory)."""
        exact = self.layout.exact
        out = np.empty(len(u), dtype=np.float64)
        if exact and len(u):
            weight = np.cumsum(self.shingle_counts(u) + self.shingle_counts(v))
            cuts = np.searchsorted(weight, np.arange(SHINGLE_CHUNK, int(weight[-1]), SHINGLE_CHUNK))
            bounds = sorted({0, len(u), *cuts.tolist(), *range(0, len(u), PAIR_CHUNK)})
        else:
            bounds = sorted({0, len(u), *range(0, len(u), PAIR_CHUNK)})
        for lo, hi in itertools.pairwise(bounds):
            if hi <= lo:
                continue
            a, b = u[lo:hi], v[lo:hi]
            if exact:
                out[lo:hi] = lsh.pair_jaccard_flat(*self.shingle_sets(a), *self.shingle_sets(b))
            else:
                out[lo:hi] = (self.signatures(a) == self.signatures(b)).mean(axis=1)
        return out
