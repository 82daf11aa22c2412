"""MinHash-LSH near-duplicate removal, Chinese-aware (see ``_minhash`` for shingles and hashing).

What is hashed is each document as every copy of it reads alike, not as earlier stages happened
to edit one copy: with ``exclude_boilerplate`` (and a paragraph_dedup earlier in the recipe), the
document without the paragraphs paragraph_dedup found in more than its ``max_docs`` documents,
whichever copy it kept them in (``_paragraphs.without_boilerplate``; so boilerplate shared by
unrelated documents never makes them near duplicates, and a paragraph kept in one copy only
never sets two copies apart); with ``fold_regional``, Taiwan / Hong Kong phrasings folded to the
mainland's (``_regional``). Neither changes the text that is kept.

compute (per task, vectorised): simplify -> shingle (CJK character n-grams or word n-grams, per
  document) -> signature (uint32 x num_perm) -> band keys (uint64 x bands). Spilled under the
  stage's work directory through renames: ``<task>.bands.parquet`` (id, length, shingle count,
  a short preview, one uint64 column per band) and, for ``verify: exact``, ``<task>.shingles.u32``
  + ``<task>.offsets.i64`` (the shingle sets, ~4 bytes per distinct shingle: about the size of
  the text), else ``<task>.sig.u32`` (signatures, 4 x num_perm bytes per document); both are read
  through memory maps.
decide: rounds of jobs spread over the run's workers (:class:`dataprep.decide_jobs.DecideJobs`:
  the process pool or Ray tasks; one named job dataclass per round), exchanging files under
  ``<work>/lsh`` (a shuffle through the file system); the driver only sizes the rounds and
  merges counters (memory O(tasks + calls)).
  1. per task: document lengths and ids for random access; per band, the band keys with their
     low ceil(log2 docs) bits replaced by the document's corpus position, sorted (documents
     without shingles are never candidates).
  2. per key-range partition (top bits of the keys, ~LSH_PARTITION_KEYS keys each): for every
     band, the keys of that range from every task (binary search in the sorted files), sorted;
     groups of equal keys give candidate pairs (all pairs of small groups, a star and a chain for
     large ones); the distinct pairs are written, routed by a hash of the pair.
  3. per pair bucket: the distinct candidate pairs (each verified once, whatever the number of
     bands it came from): ``signature`` = estimated Jaccard >= threshold, ``exact`` = Jaccard of
     the shingle sets >= threshold, ``none``; accepted pairs become edges.
  4. connected components of the edges with the large-star / small-star algorithm
     (``_components``: a few rounds, one bucket of edges per call, never the whole graph in
     one place), ending in one star per cluster centred on its smallest position.
  5. per edge bucket: each cluster's centre sees all its members: the survivor is the longest
     document (characters), then the earliest in corpus order (task, then row); the others get
     their survivor, the cluster size and their similarity to the survivor.
  6. per task: its dropped documents, with their survivors' ids, as ``<task>.decision.json``.
  The clusters are the connected components of the verified candidate pairs, exactly as a
  single-process union-find over the same pairs finds them, so the decisions do not depend on
  the partition or bucket counts (which grow with the worker count and the corpus). Cluster id
  = the survivor's corpus position.
apply: (first deleting the task's spilled files, no longer needed once decided) the other
  members are dropped as ``near_duplicate``; score = their similarity to the
  survivor (exact Jaccard with ``verify: exact``, else the signature estimate); rejected/ records
  carry ``extra`` = {"cluster", "survivor", "cluster_size", "similarity"}.
stats: histogram ``cluster_size``; counters ``clusters``, ``cross_script_clusters`` (members in
  more than one script, as lang_id's ``meta["script"]`` says: a Traditional and a Simplified
  copy), ``docs_in_clusters``,
  ``candidate_pairs`` (summed over bands), ``pairs_verified`` and ``pairs_rejected`` (distinct
  pairs), ``no_shingles``, ``component_rounds``; examples of clusters (members side by side) for
  report.html (members side by side, what differs from the survivor marked); bands/rows in
  manifest.json.
"""

from __future__ import annotations

import bisect
import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from dataprep.decide_jobs import DecideJobs, load_shared, share
from dataprep.document import Document, Drop, meta_values
from dataprep.formats import arrow
from dataprep.stage import DriverContext, GlobalStage, StageContext, StageResult, param, register
from dataprep.stats import Histogram
from stages import _minhash as mh
from stages import _paragraphs as para
from stages import _regional
from stages._components import (
    EDGE,
    FileSet,
    bucket_bits,
    connected_components,
    edge_records,
    fileset,
    fileset_paths,
    neighbourhoods,
    read_bucket,
    remove_files,
    write_bucketed,
)
from stages._decisions import DecisionReplay, write_decision
from stages._keyspill import ROW_GROUP, StringTable, lookup_ids, read_rows, save_atomic

CLUSTER_EDGES: list[float] = [2, 3, 4, 5, 6, 8, 11, 16, 32, 64, 128, 256, 1024, 4096]
PAIR_CHUNK = 20_000  # pairs verified at once (signature: 2 x 20k x num_perm x 4 bytes)
SHINGLE_CHUNK = 1_000_000  # shingles of the pairs verified at once (exact): ~40 MB of work space
SPILL_SUFFIXES = (".bands.parquet", ".sig.u32", ".shingles.u32", ".offsets.i64")


@dataclass
class MinhashDedupParams:
    threshold: float = param(0.8, help="Jaccard similarity at or above which documents are near duplicates")
    num_perm: int = param(128, help="hash functions per signature")
    ngram_cjk: int = param(5, help="shingle length in characters for CJK documents")
    ngram_word: int = param(5, help="shingle length in words for other documents")
    fold_variants: bool = param(
        True, help="fold Traditional to Simplified characters before shingling (OpenCC t2s per character)"
    )
    fold_regional: bool = param(
        True,
        help="fold Taiwan / Hong Kong phrasings to the mainland's before shingling (OpenCC's regional "
        "phrase tables; 伺服器 -> 服务器): only the hashed text, never the kept one",
    )
    exclude_boilerplate: bool = param(
        True,
        help="shingle each document without the paragraphs an earlier paragraph_dedup found in more "
        "than max_docs documents, in every copy alike (the kept text follows paragraph_dedup)",
    )
    bands: int = param(0, help="LSH bands; 0: chosen with rows from threshold and the weights")
    rows: int = param(0, help="signature rows per band; 0: chosen with bands")
    fp_weight: float = param(0.05, help="weight of the false-positive area when choosing bands x rows")
    fn_weight: float = param(
        0.95, help="weight of the false-negative area (high: more candidates, verification drops the excess)"
    )
    verify: Literal["none", "signature", "exact"] = param(
        "exact",
        help="check candidate pairs: estimated Jaccard (signature), Jaccard of the shingle sets "
        "(exact; spills ~the text size to disk), or not at all (none)",
    )
    preview_chars: int = param(200, help="characters of each document kept for report examples")
    examples: int = param(5, help="clusters shown in report.html")

    def validate(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError("threshold must be in (0, 1]")
        if not 1 <= self.num_perm <= 1024:
            raise ValueError("num_perm must be in 1..1024")
        if self.ngram_cjk < 1 or self.ngram_word < 1:
            raise ValueError("ngram_cjk and ngram_word must be >= 1")
        if (self.bands == 0) != (self.rows == 0):
            raise ValueError("set both bands and rows, or neither")
        if self.bands * self.rows > self.num_perm:
            raise ValueError(f"bands x rows = {self.bands * self.rows} exceeds num_perm = {self.num_perm}")
        if self.fp_weight < 0 or self.fn_weight < 0 or self.fp_weight + self.fn_weight == 0:
            raise ValueError("fp_weight and fn_weight must be >= 0 and not both 0")

    def band_shape(self) -> tuple[int, int]:
        if self.bands:
            return self.bands, self.rows
        return mh.optimal_bands(self.threshold, self.num_perm, self.fp_weight, self.fn_weight)


SCRIPTS = ("", "Hans", "Hant", "Latn", "Jpan", "Kore", "Cyrl")  # meta["script"] as a code; others: 255


def script_code(script: object) -> int:
    """The code of a document's ``meta["script"]`` (set by lang_id): 0 when unknown."""
    if not script:
        return 0
    return SCRIPTS.index(script) if script in SCRIPTS else 255


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


class _TaskSpill:
    """The files one task writes in compute; ``close`` renames them into place."""

    def __init__(self, work_dir: Path, task_id: str, bands: int, exact: bool):
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.final = [work_dir / f"{task_id}.bands.parquet"]
        if exact:  # the shingle sets; else the signatures (for estimates)
            self.final += [work_dir / f"{task_id}.shingles.u32", work_dir / f"{task_id}.offsets.i64"]
        else:
            self.final += [work_dir / f"{task_id}.sig.u32"]
        self.tmps = [_tmp(p) for p in self.final]
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


# Decide is spread over the run's workers (DecideJobs) in rounds; each call holds one
# partition or bucket, whose sizes these budgets bound (the counts adapt to the corpus).
LSH_PARTITION_KEYS = 1 << 25  # band keys per key-range partition in round 2 (8 bytes each)
PAIR_BUCKET = 1 << 23  # candidate pairs per verification call (24 bytes each)
EDGE_BUCKET = 1 << 23  # edge records per connected-components call (24 bytes each)
PARALLEL_MIN = 1 << 20  # keys, pairs or edges below which a round is one call (no worker start-up)
INDEX_BAND_GROUP = 8  # band columns read from a task's spill at once in round 1
MAP_CACHE = 256  # memory maps a worker keeps open at once (file descriptors)
PAIR = np.dtype([("h", "<u8"), ("u", "<i8"), ("v", "<i8")])
DECISION = np.dtype([("pos", "<i8"), ("survivor", "<i8"), ("size", "<i8"), ("score", "<f8")])


@dataclass(frozen=True)
class _Layout:
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


def _layout(path: str) -> _Layout:
    return load_shared(path, _Layout)


# The jobs of the decide rounds (``layout``: the path of the shared :class:`_Layout`) and what
# they return.


@dataclass(frozen=True)
class IndexJob:
    """Round 1: index the spills of task ``task``."""

    layout: str
    task: int


@dataclass(frozen=True)
class IndexResult:
    keyed: int  # documents with shingles (their band keys are indexed)
    no_shingles: int


@dataclass(frozen=True)
class CandidatesJob:
    """Round 2: the candidate pairs of key-range partition ``partition`` of ``partitions``."""

    layout: str
    partition: int
    partitions: int


@dataclass(frozen=True)
class CandidatesResult:
    candidates: int  # candidate pairs summed over bands
    distinct: int  # distinct pairs written


@dataclass(frozen=True)
class VerifyJob:
    """Round 3: verify pair bucket ``bucket`` of ``buckets`` (read from the ``partitions``
    candidate files of round 2)."""

    layout: str
    bucket: int
    buckets: int
    partitions: int


@dataclass(frozen=True)
class VerifyResult:
    distinct: int
    verified: int
    rejected: int
    edges: int  # accepted pairs


@dataclass(frozen=True)
class SurvivorsJob:
    """Round 5: the survivors of the clusters in bucket ``bucket`` of ``buckets`` of the final
    edge files ``edges``."""

    layout: str
    bucket: int
    edges: FileSet
    buckets: int


@dataclass(frozen=True)
class SurvivorsResult:
    clusters: int
    cross_script_clusters: int
    docs_in_clusters: int
    cluster_size: dict[str, Any]  # Histogram.to_json()
    examples: list[tuple[int, int, list[int]]]  # (survivor, size, up to 4 members)


@dataclass(frozen=True)
class DecisionJob:
    """Round 6: the decision of task ``task``, from the ``buckets`` files of round 5."""

    layout: str
    task: int
    buckets: int


class _Spills:
    """A worker's random access to the spilled per-document data by corpus position: lengths,
    signatures, shingle sets (memory maps, opened on demand, at most MAP_CACHE at once)."""

    def __init__(self, layout: _Layout):
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
            values[mh.ranges(dest[sel], sizes[sel])] = shingles[mh.ranges(starts[sel], sizes[sel])]
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
                out[lo:hi] = mh.pair_jaccard_flat(*self.shingle_sets(a), *self.shingle_sets(b))
            else:
                out[lo:hi] = (self.signatures(a) == self.signatures(b)).mean(axis=1)
        return out


def _table_versions(fold_variants: bool, fold_regional: bool) -> dict[str, str]:
    """Versions of the data behind the simplification tables (shingles depend on them)."""
    import unicodedata
    from importlib.metadata import PackageNotFoundError, version

    out = {"unicode": unicodedata.unidata_version}
    if fold_variants:
        try:
            out["opencc"] = version("opencc")
        except PackageNotFoundError:
            out["opencc"] = "unknown"
    if fold_regional:
        out["regional_phrases"] = _regional.table_version()
    return out


NEIGHBOUR_CHUNK = 1 << 20


def _band_pairs(keys: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Candidate pairs (u < v, corpus positions) of one band from its sorted tagged keys: the low
    ``bits`` of each key hold the document's position, the rest its band key, so equal band keys
    are neighbours ordered by position (no argsort index). Keys that differ only in the low bits
    are merged: a few extra candidates in huge corpora, which verification rejects."""
    n = len(keys)
    if n < 2:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    low = np.uint64((1 << bits) - 1)
    same = np.empty(n - 1, dtype=bool)  # keys[i] and keys[i + 1] share a band key
    for lo in range(0, n - 1, NEIGHBOUR_CHUNK):
        hi = min(lo + NEIGHBOUR_CHUNK, n - 1)
        np.less_equal(keys[lo + 1 : hi + 1] ^ keys[lo:hi], low, out=same[lo:hi])
    in_group = np.zeros(n, dtype=bool)
    in_group[:-1] |= same
    in_group[1:] |= same
    del same
    picked = keys[np.flatnonzero(in_group)]
    del in_group
    if len(picked) < 2:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    members = (picked & low).astype(np.int64)
    group_key = picked >> np.uint64(bits)
    starts = np.flatnonzero(np.r_[True, group_key[1:] != group_key[:-1]])
    sizes = np.diff(np.append(starts, len(members)))
    return mh.group_pairs(members, starts, sizes)


def _distinct_pairs(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct pairs of (u, v), sorted by (u, v)."""
    order = np.lexsort((v, u))
    u, v = u[order], v[order]
    keep = np.ones(len(u), dtype=bool)
    if len(u) > 1:
        keep[1:] = (u[1:] != u[:-1]) | (v[1:] != v[:-1])
    return u[keep], v[keep]


def index_task(job: IndexJob) -> IndexResult:
    """Decide round 1, one task: the task's document lengths and ids for random access, and per
    band its band keys tagged with the documents' corpus positions (low bits), sorted, as one
    uint64 [bands, documents with shingles] file."""
    import pyarrow.parquet as pq

    layout = _layout(job.layout)
    t = job.task
    # one worker of many: no reader threads, no pre-buffering (half the CPU on small tasks)
    f = pq.ParquetFile(layout.spill(t, ".bands.parquet"), pre_buffer=False)
    table = f.read(columns=["id", "length", "shingles", "script"], use_threads=False)
    save_atomic(layout.index(t, "length.npy"), arrow.to_numpy(table.column("length"), np.int32))
    save_atomic(layout.index(t, "script.npy"), arrow.to_numpy(table.column("script"), np.uint8))
    StringTable.write_arrow(layout.index(t, "ids"), table.column("id"))
    has = arrow.to_numpy(table.column("shingles"), np.int32) > 0
    del table
    positions = (np.flatnonzero(has) + layout.offsets[t]).astype(np.uint64)
    path = layout.index(t, "keys.npy")
    if not len(positions):
        save_atomic(path, np.zeros((layout.bands, 0), dtype=np.uint64))
        return IndexResult(0, len(has))
    low = np.uint64((1 << layout.bits) - 1)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    header = {"descr": "<u8", "fortran_order": False, "shape": (layout.bands, len(positions))}
    with open(tmp, "wb") as out:  # the .npy file row after row: no memory map to flush
        np.lib.format.write_array_header_1_0(out, header)
        for first in range(0, layout.bands, INDEX_BAND_GROUP):
            group = range(first, min(first + INDEX_BAND_GROUP, layout.bands))
            table = f.read(columns=[f"band{j:03d}" for j in group], use_threads=False)
            for k in range(len(group)):
                column = arrow.to_numpy(table.column(k), np.uint64)[has]
                column &= ~low
                column |= positions
                column.sort()
                column.tofile(out)
            del table
    os.replace(tmp, path)
    return IndexResult(len(positions), int(len(has) - len(positions)))


def find_candidates(job: CandidatesJob) -> CandidatesResult:
    """Decide round 2, key-range partition p of count (top bits of the band keys): for every
    band, the keys of that range from every task, sorted; groups of equal keys give candidate
    pairs (``group_pairs``). Writes the partition's distinct pairs, routed by a hash of the pair,
    to ``cand.<p>``."""
    layout, p, count = _layout(job.layout), job.partition, job.partitions
    shift = 64 - (count.bit_length() - 1)
    pieces: list[list[np.ndarray]] = [[] for _ in range(layout.bands)]
    for t in range(len(layout.task_ids)):
        keys = np.load(layout.index(t, "keys.npy"), mmap_mode="r")
        m = keys.shape[1]
        if m:
            for j in range(layout.bands):
                row = keys[j]  # a mapped row: bisect touches ~log2(m) pages
                start = bisect.bisect_left(row, np.uint64(p << shift)) if p else 0
                stop = bisect.bisect_left(row, np.uint64((p + 1) << shift)) if p + 1 < count else m
                pieces[j].append(np.array(row[start:stop]))
        del keys
    candidates = 0
    u = v = np.zeros(0, dtype=np.int64)
    for j in range(layout.bands):
        band = np.concatenate(pieces[j]) if pieces[j] else np.zeros(0, dtype=np.uint64)
        pieces[j] = []
        band.sort()
        bu, bv = _band_pairs(band, layout.bits)
        del band
        candidates += len(bu)
        if len(bu):
            u, v = _distinct_pairs(np.concatenate([u, bu]), np.concatenate([v, bv]))
    pairs = np.empty(len(u), dtype=PAIR)
    pairs["h"] = mh.mix64(mh.mix64(u.astype(np.uint64)) ^ v.astype(np.uint64))
    pairs["u"], pairs["v"] = u, v
    write_bucketed(fileset_paths(fileset(layout.lsh, "cand", count))[p], pairs)
    return CandidatesResult(candidates, len(u))


def verify_pairs(job: VerifyJob) -> VerifyResult:
    """Decide round 3, pair bucket q of count: the distinct candidate pairs of the bucket (from
    every partition of round 2), verified (``verify``); the accepted ones are written as edges in
    both directions to ``edge.<q>``."""
    layout, q, count, partitions = _layout(job.layout), job.bucket, job.buckets, job.partitions
    pairs = read_bucket(fileset(layout.lsh, "cand", partitions), q, count, PAIR)
    u, v = _distinct_pairs(pairs["u"], pairs["v"])
    del pairs
    distinct = len(u)
    verified = rejected = 0
    if layout.verify != "none" and len(u):
        ok = _Spills(layout).similarity(u, v) >= layout.threshold
        verified, rejected = len(u), int(np.count_nonzero(~ok))
        u, v = u[ok], v[ok]
    write_bucketed(fileset_paths(fileset(layout.lsh, "edge", count))[q], edge_records(u, v))
    return VerifyResult(distinct, verified, rejected, len(u))


def choose_survivors(job: SurvivorsJob) -> SurvivorsResult:
    """Decide round 5, bucket b of the final edge set (a forest of stars, one per cluster): every
    centre (the cluster's smallest position) sees all its members here. Survivor: the longest,
    then the earliest; the others are written to ``final.<b>`` sorted by position with their
    survivor, cluster size and similarity to the survivor. Returns counters, the cluster_size
    histogram and the ``examples`` clusters of the bucket with the earliest survivors."""
    layout, b, edges, count = _layout(job.layout), job.bucket, job.edges, job.buckets
    x, y, starts = neighbourhoods(read_bucket(edges, b, count, EDGE))
    nodes = x[starts]
    centre = y[starts] > nodes  # y is sorted within a node: no smaller neighbour
    of_centre = np.repeat(centre, np.diff(np.append(starts, len(x))))
    members = np.concatenate([nodes[centre], y[of_centre]])
    cluster = np.concatenate([nodes[centre], x[of_centre]])
    del x, y
    spills = _Spills(layout)
    order = np.lexsort((members, -spills.lengths(members), cluster))
    members, cluster = members[order], cluster[order]
    first = np.ones(len(members), dtype=bool)
    first[1:] = cluster[1:] != cluster[:-1]
    heads = np.flatnonzero(first)
    size = np.diff(np.append(heads, len(members)))
    which = np.cumsum(first) - 1
    decisions = np.empty(len(members) - len(heads), dtype=DECISION)
    decisions["pos"] = members[~first]
    decisions["survivor"] = members[heads][which[~first]]
    decisions["size"] = size[which[~first]]
    decisions["score"] = spills.similarity(decisions["pos"], decisions["survivor"])
    save_atomic(
        fileset_paths(fileset(layout.lsh, "final", count))[b],
        decisions[np.argsort(decisions["pos"], kind="stable")],
    )
    hist = Histogram(CLUSTER_EDGES)
    hist.add(size)
    # clusters whose members were written in more than one script (as lang_id labelled them)
    script = spills.scripts(members).astype(np.int64)
    known = script > 0
    lo = np.where(known, script, 256)  # the smallest known script of each cluster ...
    hi = np.where(known, script, -1)  # ... and the largest
    cross = int(np.count_nonzero(np.minimum.reduceat(lo, heads) < np.maximum.reduceat(hi, heads)))
    examples = []
    for k in np.argsort(members[heads], kind="stable")[: layout.examples].tolist():
        group = members[heads[k] : heads[k] + min(int(size[k]), 4)]
        examples.append((int(group[0]), int(size[k]), group.tolist()))
    return SurvivorsResult(len(heads), cross, len(members), hist.to_json(), examples)


class _IdPaths:
    """The tasks' id tables as a sequence whose paths are made when asked for (a task's decision
    looks up its survivors' tasks only: no list of every task's path per task)."""

    def __init__(self, layout: _Layout):
        self.layout = layout

    def __getitem__(self, t: int) -> Path:
        return self.layout.index(t, "ids")


def write_task_decision(job: DecisionJob) -> None:
    """Decide round 6, one task: its dropped documents (rows), from every ``final.<b>`` file
    (binary search on the positions), with their survivors' ids, as ``<task>.decision.json``."""
    layout, t, count = _layout(job.layout), job.task, job.buckets
    lo, hi = layout.offsets[t], layout.offsets[t + 1]
    parts = [np.zeros(0, dtype=DECISION)]
    for path in fileset_paths(fileset(layout.lsh, "final", count)):
        records = np.load(path, mmap_mode="r") if path.stat().st_size > 128 else np.load(path)
        if len(records):
            pos = records["pos"]
            start, stop = bisect.bisect_left(pos, lo), bisect.bisect_left(pos, hi)
            if stop > start:
                parts.append(np.array(records[start:stop]))
        del records
    mine = np.concatenate(parts)
    mine = mine[np.argsort(mine["pos"], kind="stable")]
    offsets = np.asarray(layout.offsets, dtype=np.int64)
    names = lookup_ids(_IdPaths(layout), offsets, mine["survivor"])
    write_decision(
        layout.spill(t, ".decision.json"),
        (mine["pos"] - lo).tolist(),
        mine["survivor"].tolist(),
        [names[int(s)] for s in mine["survivor"]],
        mine["size"].tolist(),
        mine["score"].tolist(),
    )


@register
class MinhashDedup(GlobalStage):
    """Drop near duplicates (MinHash LSH on CJK character / word shingles), one survivor per cluster."""

    name = "minhash_dedup"
    Params = MinhashDedupParams
    uses = ("boilerplate_paragraphs",)  # with exclude_boilerplate, when paragraph_dedup runs before

    def __init__(self, params: MinhashDedupParams):
        super().__init__(params)
        self._spill: _TaskSpill | None = None
        self._hasher: mh.MinHasher | None = None
        self._hasher_seed: int | None = None
        self._replay: DecisionReplay | None = None
        self._boilerplate: tuple[str, para.BoilerplateSet] | None = None

    def _hashed_texts(self, batch: list[Document], ctx: StageContext) -> list[str]:
        """The texts to shingle: without the corpus-wide boilerplate paragraphs when
        paragraph_dedup published them (``exclude_boilerplate``); regional phrasing is folded by
        the shingler (``fold_regional``)."""
        texts = [d.text for d in batch]
        found = ctx.artifacts.get("boilerplate_paragraphs") if self.params.exclude_boilerplate else None
        if not found or not found["count"]:
            return texts
        if self._boilerplate is None or self._boilerplate[0] != found["path"]:
            self._boilerplate = (found["path"], para.BoilerplateSet(found["path"]))
        before = sum(map(len, texts))
        texts = para.without_boilerplate(texts, found["unit"], found["min_chars"], self._boilerplate[1])
        ctx.stats.count("boilerplate_chars_not_hashed", before - sum(map(len, texts)))
        return texts

    def setup(self, ctx: DriverContext) -> None:
        self.params.band_shape()

    def begin_task(self, ctx: StageContext) -> None:
        self._spill = None
        self._replay = None

    def compute(self, batch: list[Document], ctx: StageContext) -> None:
        p = self.params
        bands, rows = p.band_shape()
        if self._spill is None:
            self._spill = _TaskSpill(ctx.work_dir, ctx.task_id, bands, p.verify == "exact")
        if self._hasher is None or self._hasher_seed != ctx.seed:
            self._hasher, self._hasher_seed = mh.MinHasher(p.num_perm, ctx.seed), ctx.seed
        shingles = mh.shingle_batch(
            self._hashed_texts(batch, ctx), p.ngram_cjk, p.ngram_word, p.fold_variants, p.fold_regional
        )
        sig = self._hasher.signatures(shingles)
        keys = mh.band_keys(sig, bands, rows)
        self._spill.write(batch, shingles, sig, keys, p.preview_chars)
        ctx.stats.count("cjk_documents", int(np.count_nonzero(shingles.cjk & (shingles.sizes() > 0))))

    def finish_compute(self, ctx: StageContext) -> None:
        if self._spill is None:  # a task without documents still leaves its (empty) files
            self._spill = _TaskSpill(
                ctx.work_dir, ctx.task_id, self.params.band_shape()[0], self.params.verify == "exact"
            )
        self._spill.close()
        self._spill = None

    def decide(self, ctx: DriverContext) -> dict:
        import shutil

        import pyarrow.parquet as pq

        from dataprep.progress import phase_bar

        p = self.params
        bands, rows = p.band_shape()
        counts = [pq.ParquetFile(ctx.work_dir / f"{t}.bands.parquet").metadata.num_rows for t in ctx.task_ids]
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        n = int(offsets[-1])
        layout = _Layout(
            str(ctx.work_dir), list(ctx.task_ids), offsets.tolist(), p.num_perm, bands, p.verify,
            p.threshold, p.examples,
        )  # fmt: skip
        shutil.rmtree(layout.lsh, ignore_errors=True)  # an interrupted earlier attempt
        layout.lsh.mkdir()
        shared = share(layout.lsh / "layout.json", layout)
        jobs = DecideJobs(ctx)

        def spread(total: int, budget: int) -> int:  # calls of a round
            return 1 << bucket_bits(total, budget, ctx.workers if total >= PARALLEL_MIN else 1)

        tasks = range(len(ctx.task_ids))
        title = f"minhash_dedup: indexing the band keys of {n:,} docs (LSH {bands} bands x {rows} rows)"
        bar = phase_bar(title, None, "round", quiet=ctx.quiet)

        def step(what: str) -> None:  # one round done, the next one starts
            bar.update(1)
            bar.set_description(f"minhash_dedup: {what}")

        indexed = jobs.map(index_task, [IndexJob(shared, t) for t in tasks])
        keyed = sum(r.keyed for r in indexed)
        partitions = spread(keyed * bands, LSH_PARTITION_KEYS)
        step(f"candidate pairs of {keyed:,} docs x {bands} bands in {partitions} partitions")
        found = jobs.map(find_candidates, [CandidatesJob(shared, k, partitions) for k in range(partitions)])
        pair_buckets = spread(sum(r.distinct for r in found), PAIR_BUCKET)
        step(f"verifying pairs in {pair_buckets} buckets ({p.verify})")
        checked = jobs.map(
            verify_pairs, [VerifyJob(shared, q, pair_buckets, partitions) for q in range(pair_buckets)]
        )
        remove_files(fileset(layout.lsh, "cand", partitions))
        edges = fileset(layout.lsh, "edge", pair_buckets)
        buckets = spread(2 * sum(r.edges for r in checked), EDGE_BUCKET)
        final, rounds = connected_components(
            jobs.map,
            edges,
            buckets,
            layout.lsh,
            on_round=lambda k: step(f"connected components, round {k + 1} ({buckets} buckets)"),
        )
        step("choosing survivors")
        survivor_jobs = [SurvivorsJob(shared, b, final, buckets) for b in range(buckets)]
        results = jobs.map(choose_survivors, survivor_jobs)
        step(f"writing the decisions of {len(ctx.task_ids)} tasks")
        jobs.map(write_task_decision, [DecisionJob(shared, t, buckets) for t in tasks])
        bar.update(1)
        bar.close()
        hist = ctx.stats.histogram("cluster_size", CLUSTER_EDGES)
        for r in results:
            hist.merge(Histogram.from_json(r.cluster_size))
        for name, value in (
            ("clusters", sum(r.clusters for r in results)),
            ("cross_script_clusters", sum(r.cross_script_clusters for r in results)),
            ("docs_in_clusters", sum(r.docs_in_clusters for r in results)),
            ("candidate_pairs", sum(r.candidates for r in found)),
            ("pairs_verified", sum(r.verified for r in checked)),
            ("pairs_rejected", sum(r.rejected for r in checked)),
            ("no_shingles", sum(r.no_shingles for r in indexed)),
            ("component_rounds", rounds),
        ):
            ctx.stats.count(name, value)
        examples = sorted((e for r in results for e in r.examples), key=lambda e: e[0])[: p.examples]
        self._examples(ctx, offsets, examples)
        shutil.rmtree(layout.lsh)
        return {
            "minhash_dedup": {
                "threshold": p.threshold,
                "num_perm": p.num_perm,
                "bands": bands,
                "rows": rows,
                "verify": p.verify,
                "shingles": {
                    "cjk_chars": p.ngram_cjk,
                    "words": p.ngram_word,
                    "fold_variants": p.fold_variants,
                    "fold_regional": p.fold_regional,
                    "exclude_boilerplate": p.exclude_boilerplate,
                    **_table_versions(p.fold_variants, p.fold_regional),
                },
            }
        }

    def _examples(
        self, ctx: DriverContext, offsets: np.ndarray, examples: list[tuple[int, int, list[int]]]
    ) -> None:
        """Report examples: clusters as (survivor, size, up to 4 members, survivor first)."""
        wanted = np.unique(np.asarray([m for _, _, group in examples for m in group], dtype=np.int64))
        previews: dict[int, tuple[str, str]] = {}
        task = np.searchsorted(offsets, wanted, side="right") - 1
        for t in np.unique(task):
            sel = wanted[task == t]
            path = ctx.work_dir / f"{ctx.task_ids[int(t)]}.bands.parquet"
            got = read_rows(path, ["id", "preview", "script"], sel - offsets[t])
            for pos, doc_id, text, code in zip(
                sel.tolist(), got["id"], got["preview"], got["script"], strict=True
            ):
                previews[pos] = (doc_id, text, SCRIPTS[code] if code < len(SCRIPTS) else "other")
        for survivor, size, group in examples:
            items = []
            for k, pos in enumerate(group):
                doc_id, text, script = previews[pos]
                label = f"{'kept' if k == 0 else 'dropped'}: {doc_id}" + (f" ({script})" if script else "")
                items.append({"label": label, "text": text})
            ctx.stats.add_example(f"cluster {survivor} ({size} documents)", items, compare=True)

    def apply(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        if self._replay is None:
            self._replay = DecisionReplay(ctx.work_dir / f"{ctx.task_id}.decision.json")
            for suffix in SPILL_SUFFIXES:  # decided: the spills are no longer needed
                (ctx.work_dir / f"{ctx.task_id}{suffix}").unlink(missing_ok=True)
        out: list[StageResult] = []
        for doc in batch:
            d = self._replay.next()
            if d is None:
                out.append(doc)
                continue
            extra = {
                "cluster": d["cluster"],
                "survivor": d["survivor"],
                "cluster_size": d["size"],
                "similarity": d["score"],
            }
            detail = (
                f"near duplicate of {d['survivor']} (similarity {d['score']:.3f}, "
                f"cluster {d['cluster']} of {d['size']} documents)"
            )
            out.append(Drop(doc, "near_duplicate", score=d["score"], detail=detail, extra=extra))
        return out
