"""MinHash-LSH near-duplicate removal, Chinese-aware (see ``_minhash`` for shingles and hashing).

compute (per task, vectorised): simplify -> shingle (CJK character n-grams or word n-grams, per
  document) -> signature (uint32 x num_perm) -> band keys (uint64 x bands). Spilled under the
  stage's work directory through renames: ``<task>.bands.parquet`` (id, length, shingle count,
  a short preview, one uint64 column per band) and, for ``verify: exact``, ``<task>.shingles.u32``
  + ``<task>.offsets.i64`` (the shingle sets, ~4 bytes per distinct shingle: about the size of
  the text), else ``<task>.sig.u32`` (signatures, 4 x num_perm bytes per document); both are read
  through memory maps.
decide (driver, once): band after band, sort the band's keys of all documents, turn groups of
  equal keys into candidate pairs, drop pairs already connected, verify the rest (``verify``:
  ``signature`` = estimated Jaccard >= threshold, ``exact`` = Jaccard of the shingle sets >=
  threshold, ``none``), and union them (vectorised union-find). Memory: the union-find parent
  (4 bytes), length and shingle count (8 bytes) of every document, plus one band's key
  buffer (8 bytes + 2) at a time (two when ``workers`` > 1: the next band is read and sorted in a
  thread meanwhile): ~22-32 bytes per document (bench/bench_dedup_decide_memory.py);
  signatures and shingle sets are read from memory-mapped files for candidate pairs only.
  Survivor of a cluster (connected component): the longest document (characters), then the
  earliest in corpus order (task, then row). Cluster id = the survivor's corpus position.
apply: (first deleting the task's spilled files, no longer needed once decided) the other
  members are dropped as ``near_duplicate``; score = their similarity to the
  survivor (exact Jaccard with ``verify: exact``, else the signature estimate); rejected/ records
  carry ``extra`` = {"cluster", "survivor", "cluster_size", "similarity"}.
stats: histogram ``cluster_size``; counters ``clusters``, ``docs_in_clusters``,
  ``candidate_pairs``, ``pairs_verified``, ``pairs_rejected``, ``no_shingles``; examples of
  clusters (members side by side) for report.html; bands/rows in manifest.json.
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from dataprep.document import Document, Drop
from dataprep.io import write_text_atomic
from dataprep.stage import DriverContext, GlobalStage, StageContext, StageResult, param, register
from stages import _minhash as mh
from stages._keyspill import ROW_GROUP, lookup_ids, read_rows

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
                keys,
            )
        )
        self.pending_rows += len(docs)
        if self.pending_rows >= ROW_GROUP:
            self._flush()
        if self.exact:
            self.files[0].write(batch.hashes.astype(np.uint32).tobytes())
            ends = batch.offsets[1:] + self.shingles_written
            self.files[1].write(ends.astype(np.int64).tobytes())
            self.shingles_written += int(batch.offsets[-1])
        else:
            self.files[0].write(np.ascontiguousarray(sig, dtype=np.uint32).tobytes())

    def _flush(self) -> None:
        """Write the buffered batches as one row group (fewer, larger row groups: faster)."""
        import pyarrow as pa

        if not self.pending:
            return
        ids, lengths, sizes, previews, keys = zip(*self.pending, strict=True)
        band_keys = np.concatenate(keys)
        columns: dict[str, Any] = {
            "id": [x for part in ids for x in part],
            "length": np.concatenate(lengths),
            "shingles": np.concatenate(sizes),
            "preview": [x for part in previews for x in part],
        }
        for j in range(band_keys.shape[1]):
            columns[f"band{j:03d}"] = band_keys[:, j]
        self.table.write_table(pa.table(columns, schema=self.schema), row_group_size=ROW_GROUP)
        self.pending, self.pending_rows = [], 0

    def close(self) -> None:
        self._flush()
        self.table.close()
        for f in self.files:
            f.close()
        for tmp, final in zip(self.tmps, self.final, strict=True):
            os.replace(tmp, final)


class _Corpus:
    """Driver-side view of the spilled files: per-document arrays, signatures and shingle sets
    by corpus position (global position = offsets[task] + row), through memory maps."""

    def __init__(self, work_dir: Path, task_ids: list[str], num_perm: int, exact: bool):
        import pyarrow.parquet as pq

        self.work_dir = work_dir
        self.task_ids = task_ids
        self.band_paths = [work_dir / f"{t}.bands.parquet" for t in task_ids]
        counts = [pq.ParquetFile(p).metadata.num_rows for p in self.band_paths]
        self.offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=self.offsets[1:])
        self.n = int(self.offsets[-1])
        self.length = np.zeros(self.n, dtype=np.int32)
        self.shingles = np.zeros(self.n, dtype=np.int32)
        for t, path in enumerate(self.band_paths):
            table = pq.read_table(path, columns=["length", "shingles"])
            lo, hi = self.offsets[t], self.offsets[t + 1]
            self.length[lo:hi] = table.column("length").to_numpy()
            self.shingles[lo:hi] = table.column("shingles").to_numpy()
        self.num_perm = num_perm
        self._sig: list[np.ndarray] = []
        self._sh = self._off = None
        if not exact:
            self._sig = [self._map(work_dir / f"{t}.sig.u32", np.uint32, (num_perm,)) for t in task_ids]
        else:
            self._sh = [self._map(work_dir / f"{t}.shingles.u32", np.uint32, ()) for t in task_ids]
            self._off = [self._map(work_dir / f"{t}.offsets.i64", np.int64, ()) for t in task_ids]

    @staticmethod
    def _map(path: Path, dtype: Any, tail: tuple[int, ...]) -> np.ndarray:
        size = path.stat().st_size
        if size == 0:
            return np.zeros((0, *tail), dtype=dtype)
        arr = np.memmap(path, dtype=dtype, mode="r")
        return arr.reshape(-1, *tail) if tail else arr

    def band(self, j: int) -> np.ndarray:
        import pyarrow.parquet as pq

        out = np.empty(self.n, dtype=np.uint64)
        for t, path in enumerate(self.band_paths):
            column = pq.read_table(path, columns=[f"band{j:03d}"]).column(0)
            out[self.offsets[t] : self.offsets[t + 1]] = column.to_numpy()
        return out

    def _split(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        task = np.searchsorted(self.offsets, pos, side="right") - 1
        return task, pos - self.offsets[task]

    def signatures(self, pos: np.ndarray) -> np.ndarray:
        out = np.empty((len(pos), self.num_perm), dtype=np.uint32)
        task, row = self._split(pos)
        for t in np.unique(task):
            sel = task == t
            out[sel] = self._sig[int(t)][row[sel]]
        return out

    def shingle_sets(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(values, sizes): the shingle sets of ``pos`` concatenated in that order, gathered from
        the mapped files task by task (vectorised)."""
        assert self._sh is not None and self._off is not None
        task, row = self._split(np.asarray(pos, dtype=np.int64))
        starts = np.empty(len(pos), dtype=np.int64)
        sizes = np.empty(len(pos), dtype=np.int64)
        for t in np.unique(task):
            sel = task == t
            off = self._off[int(t)]
            starts[sel] = off[row[sel]]
            sizes[sel] = off[row[sel] + 1] - starts[sel]
        values = np.empty(int(sizes.sum()), dtype=np.uint32)
        dest = np.cumsum(sizes) - sizes
        for t in np.unique(task):
            sel = np.flatnonzero(task == t)
            values[mh._ranges(dest[sel], sizes[sel])] = self._sh[int(t)][mh._ranges(starts[sel], sizes[sel])]
        return values, sizes

    def similarity(self, u: np.ndarray, v: np.ndarray, exact: bool) -> np.ndarray:
        """Jaccard of the pairs (u[i], v[i]): exact from the shingle sets, else estimated. Pairs
        are taken in chunks of at most PAIR_CHUNK pairs and SHINGLE_CHUNK shingles (memory)."""
        out = np.empty(len(u), dtype=np.float64)
        if exact:
            weight = np.cumsum(self.shingles[u].astype(np.int64) + self.shingles[v])
            cuts = np.searchsorted(
                weight, np.arange(SHINGLE_CHUNK, int(weight[-1]) if len(weight) else 0, SHINGLE_CHUNK)
            )
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

    def previews(self, pos: np.ndarray) -> dict[int, tuple[str, str]]:
        """{position: (id, preview)}, reading only the row groups that hold them."""
        pos = np.unique(np.asarray(pos, dtype=np.int64))
        out: dict[int, tuple[str, str]] = {}
        task, row = self._split(pos)
        for t in np.unique(task):
            sel = task == t
            got = read_rows(self.band_paths[int(t)], ["id", "preview"], row[sel])
            for p, i, text in zip(pos[sel].tolist(), got["id"], got["preview"], strict=True):
                out[p] = (i, text)
        return out


NEIGHBOUR_CHUNK = 1 << 20


def _table_versions(fold_variants: bool) -> dict[str, str]:
    """Versions of the data behind the simplification tables (shingles depend on them)."""
    import unicodedata
    from importlib.metadata import PackageNotFoundError, version

    out = {"unicode": unicodedata.unidata_version}
    if fold_variants:
        try:
            out["opencc"] = version("opencc")
        except PackageNotFoundError:
            out["opencc"] = "unknown"
    return out


def _band_candidates(keys: np.ndarray, shingles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Candidate pairs of one band: documents (positions) with equal band keys.

    Works in place on ``keys`` (uint64 [docs], consumed): the low ceil(log2 docs) bits of each key
    are replaced by the document's position and the array is sorted, so equal keys become
    neighbours ordered by position, without an argsort index. Memory: the keys (8 bytes) plus
    two bytes per document. Documents without shingles are never candidates. (Dropping the low
    bits merges keys that differ only there: a few extra candidates in huge corpora, which
    verification rejects.)"""
    n = len(keys)
    if n < 2:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    bits = int(n - 1).bit_length()
    low = np.uint64((1 << bits) - 1)
    for lo in range(0, n, NEIGHBOUR_CHUNK):
        chunk = keys[lo : lo + NEIGHBOUR_CHUNK]
        chunk &= ~low
        chunk |= np.arange(lo, lo + len(chunk), dtype=np.uint64)
    keys.sort()
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
    members = (picked & low).astype(np.int64)
    group_key = picked >> np.uint64(bits)
    keep = shingles[members] > 0
    members, group_key = members[keep], group_key[keep]
    if len(members) < 2:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    starts = np.flatnonzero(np.r_[True, group_key[1:] != group_key[:-1]])
    sizes = np.diff(np.append(starts, len(members)))
    multi = sizes > 1
    return mh.group_pairs(members, starts[multi], sizes[multi])


@register
class MinhashDedup(GlobalStage):
    """Drop near duplicates (MinHash LSH on CJK character / word shingles), one survivor per cluster."""

    name = "minhash_dedup"
    Params = MinhashDedupParams

    def __init__(self, params: MinhashDedupParams):
        super().__init__(params)
        self._spill: _TaskSpill | None = None
        self._hasher: mh.MinHasher | None = None
        self._hasher_seed: int | None = None
        self._decision: dict[str, Any] | None = None

    def setup(self, ctx: DriverContext) -> None:
        self.params.band_shape()

    def begin_task(self, ctx: StageContext) -> None:
        self._spill = None
        self._decision = None
        self._position = self._next = 0

    def compute(self, batch: list[Document], ctx: StageContext) -> None:
        p = self.params
        bands, rows = p.band_shape()
        if self._spill is None:
            self._spill = _TaskSpill(ctx.work_dir, ctx.task_id, bands, p.verify == "exact")
        if self._hasher is None or self._hasher_seed != ctx.seed:
            self._hasher, self._hasher_seed = mh.MinHasher(p.num_perm, ctx.seed), ctx.seed
        shingles = mh.shingle_batch([d.text for d in batch], p.ngram_cjk, p.ngram_word, p.fold_variants)
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
        from dataprep.progress import phase_bar

        p = self.params
        bands, rows = p.band_shape()
        exact = p.verify == "exact"
        corpus = _Corpus(ctx.work_dir, ctx.task_ids, p.num_perm, exact)
        n = corpus.n
        uf = mh.UnionFind(n)
        candidates = verified = rejected = 0
        bar = phase_bar(
            f"minhash_dedup: LSH {bands} bands x {rows} rows over {n:,} docs", bands, "band", quiet=ctx.quiet
        )
        from concurrent.futures import ThreadPoolExecutor

        def band_pairs(j: int) -> tuple[np.ndarray, np.ndarray]:
            return _band_candidates(corpus.band(j), corpus.shingles)

        # with more than one worker, the next band is read and sorted in a thread (numpy and
        # pyarrow release the GIL) while this one is verified: one more band buffer in memory
        pool = ThreadPoolExecutor(1) if ctx.workers > 1 and bands > 1 else None
        upcoming = pool.submit(band_pairs, 0) if pool else None
        for j in range(bands):
            if pool is not None and upcoming is not None:
                u, v = upcoming.result()
                upcoming = pool.submit(band_pairs, j + 1) if j + 1 < bands else None
            else:
                u, v = band_pairs(j)
            candidates += len(u)
            if len(u):
                apart = uf.find(u) != uf.find(v)
                u, v = u[apart], v[apart]
                if p.verify != "none" and len(u):
                    ok = corpus.similarity(u, v, exact) >= p.threshold
                    verified += len(u)
                    rejected += int(np.count_nonzero(~ok))
                    u, v = u[ok], v[ok]
                uf.union(u, v)
            uf.compress()
            bar.update(1)
        bar.close()
        if pool is not None:
            pool.shutdown()
        roots = uf.roots()
        not_root = np.flatnonzero(roots != np.arange(n, dtype=roots.dtype))
        clustered = np.union1d(not_root, roots[not_root]).astype(np.int64)
        del not_root
        # survivor: longest, then earliest position
        order = np.lexsort((clustered, -corpus.length[clustered].astype(np.int64), roots[clustered]))
        members = clustered[order]
        member_roots = roots[members].astype(np.int64)
        first = np.ones(len(members), dtype=bool)
        first[1:] = member_roots[1:] != member_roots[:-1]
        cluster_root = member_roots[first]  # ascending
        cluster_size = np.diff(np.append(np.flatnonzero(first), len(members)))
        dropped = members[~first]
        which = np.searchsorted(cluster_root, member_roots[~first])
        survivor = members[first][which]
        size = cluster_size[which]
        score = corpus.similarity(dropped, survivor, exact) if len(dropped) else np.zeros(0)
        ctx.stats.histogram("cluster_size", CLUSTER_EDGES).add(cluster_size)
        for name, value in (
            ("clusters", int(np.count_nonzero(first))),
            ("docs_in_clusters", len(members)),
            ("candidate_pairs", candidates),
            ("pairs_verified", verified),
            ("pairs_rejected", rejected),
            ("no_shingles", int(np.count_nonzero(corpus.shingles == 0))),
        ):
            ctx.stats.count(name, value)
        names = lookup_ids(corpus.band_paths, corpus.offsets, survivor)
        self._examples(ctx, corpus, members, member_roots, first)
        by_position = np.argsort(dropped, kind="stable")
        dropped, survivor, size, score = (x[by_position] for x in (dropped, survivor, size, score))
        task_of = np.searchsorted(corpus.offsets, dropped, side="right") - 1
        bar = phase_bar("minhash_dedup: writing decisions", len(ctx.task_ids), "task", quiet=ctx.quiet)
        for t, task_id in enumerate(ctx.task_ids):
            sel = task_of == t
            decision = {
                "drop": (dropped[sel] - corpus.offsets[t]).tolist(),
                "cluster": survivor[sel].tolist(),
                "survivor": [names[int(s)] for s in survivor[sel]],
                "size": size[sel].tolist(),
                "score": [round(float(x), 6) for x in score[sel]],
            }
            write_text_atomic(
                ctx.work_dir / f"{task_id}.decision.json", json.dumps(decision, ensure_ascii=False)
            )
            bar.update(1)
        bar.close()
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
                    **_table_versions(p.fold_variants),
                },
            }
        }

    def _examples(
        self,
        ctx: DriverContext,
        corpus: _Corpus,
        members: np.ndarray,
        member_roots: np.ndarray,
        first: np.ndarray,
    ) -> None:
        """The first ``examples`` clusters in corpus order of their survivor, up to 4 members each."""
        survivors = members[first]
        picked = np.sort(survivors)[: self.params.examples]
        starts = np.flatnonzero(first)
        ends = np.append(starts[1:], len(members))
        index_of = {int(s): (int(a), int(b)) for s, a, b in zip(survivors, starts, ends, strict=True)}
        groups = [members[index_of[int(s)][0] : index_of[int(s)][1]][:4] for s in picked]
        if not groups:
            return
        previews = corpus.previews(np.concatenate(groups))
        for s, group in zip(picked, groups, strict=True):
            size = index_of[int(s)][1] - index_of[int(s)][0]
            items = []
            for k, pos in enumerate(group.tolist()):
                doc_id, text = previews[pos]
                items.append({"label": f"{'kept' if k == 0 else 'dropped'}: {doc_id}", "text": text})
            ctx.stats.add_example(f"cluster {int(s)} ({size} documents)", items)

    def apply(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        if self._decision is None:
            self._decision = json.loads((ctx.work_dir / f"{ctx.task_id}.decision.json").read_text())
            self._position = self._next = 0
            for suffix in SPILL_SUFFIXES:  # decided: the spills are no longer needed
                (ctx.work_dir / f"{ctx.task_id}{suffix}").unlink(missing_ok=True)
        d = self._decision
        drops = d["drop"]
        out: list[StageResult] = []
        for doc in batch:
            k = self._next
            if k < len(drops) and drops[k] == self._position:
                extra = {
                    "cluster": d["cluster"][k],
                    "survivor": d["survivor"][k],
                    "cluster_size": d["size"][k],
                    "similarity": d["score"][k],
                }
                detail = (
                    f"near duplicate of {d['survivor'][k]} (similarity {d['score'][k]:.3f}, "
                    f"cluster {d['cluster'][k]} of {d['size'][k]} documents)"
                )
                out.append(Drop(doc, "near_duplicate", score=d["score"][k], detail=detail, extra=extra))
                self._next += 1
            else:
                out.append(doc)
            self._position += 1
        return out
