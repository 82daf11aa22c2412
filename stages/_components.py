"""Shuffle files and distributed connected components (used by ``minhash_dedup``'s decide).

**Bucketed files.** A round of a distributed decide writes records (a numpy structured array
whose first field ``h`` is a uint64 routing hash) sorted by ``h``, one ``.npy`` file per call,
through a rename. A call of the next round takes bucket ``b`` of ``count`` (a power of two): the
records whose top log2(count) bits of ``h`` equal b, from every file of the previous round
(:func:`read_bucket`; binary search on the memory-mapped files, so the bucket count of the next
round is free to differ from this one's). This is the shuffle of MapReduce, on a file system
every worker sees.

**Connected components** of an undirected graph given as edge files, without ever holding the
graph in one place: the large-star / small-star algorithm (Kiveris, Lattanzi, Mirrokni, Rastogi,
Vassilvitskii, "Connected Components in MapReduce and Beyond", SoCC 2014), the one the Spark
MinHash deduplications of BigCode and text-dedup use. Edges are records (h = mix(x), x, y): the
edge x-y stored under x; the input holds each undirected edge in both directions.

* large-star, per node x with neighbours N(x): m = min(N(x) ∪ {x}); link every neighbour y > x
  to m (x's links to smaller nodes are dropped: the smaller node links them).
* small-star, per node x with the neighbours N(x) it received, all smaller than x:
  m = min(N(x)); link x and every y in N(x) to m.

Both keep every component connected and neither connects two components, and alternating them
reaches, within O(log² n) rounds (in practice a handful), a forest of stars in which every
component is one star centred on its smallest node. :func:`connected_components` stops as soon
as the edge set is such a forest, which each large-star call checks on its input: every node
either has no smaller neighbour (a centre) or exactly one smaller neighbour and no larger one (a
leaf; its neighbour then is the centre). In the final edge set the centre of each component sees
all its members as neighbours in one call, so a per-component decision (the survivor of a
cluster) needs no further shuffle. Rounds depend on the graph only, never on bucket counts or
the number of workers; each call holds one bucket of edges in memory.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stages._minhash import mix64

EDGE = np.dtype([("h", "<u8"), ("x", "<i8"), ("y", "<i8")])
MAX_ROUNDS = 200  # large-star + small-star pairs; the algorithm needs O(log^2 n)

# The files of one round: (directory, name prefix, count) -> <directory>/<prefix>.<i:05d>.npy.
# Calls receive this triple rather than a list of paths, so what is sent to each worker stays
# small whatever the number of files.
FileSet = tuple[str, str, int]


def fileset(directory: Path, prefix: str, count: int) -> FileSet:
    return (str(directory), prefix, count)


def fileset_paths(files: FileSet) -> list[Path]:
    directory, prefix, count = files
    return [Path(directory) / f"{prefix}.{i:05d}.npy" for i in range(count)]


def bucket_bits(total: int, budget: int, minimum: int = 1, max_bits: int = 20) -> int:
    """log2 of the bucket count: the smallest power of two with at most ~``budget`` records per
    bucket for ``total`` records, and at least ``minimum`` buckets (e.g. one per worker)."""
    bits = 0
    while (total > budget << bits or 1 << bits < minimum) and bits < max_bits:
        bits += 1
    return bits


def route(x: np.ndarray) -> np.ndarray:
    """The routing hash of node ids (uint64; spreads consecutive ids over buckets)."""
    return mix64(np.asarray(x, dtype=np.int64).astype(np.uint64))


def write_bucketed(path: Path, records: np.ndarray) -> None:
    """Sort ``records`` by every field in order (h first: deterministic bytes) and save them
    through a temporary name and a rename."""
    names = records.dtype.names or ()
    order = np.lexsort([records[name] for name in reversed(names)])
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        np.save(f, records[order])
    os.replace(tmp, path)


def read_bucket(files: FileSet, b: int, count: int, dtype: np.dtype) -> np.ndarray:
    """Records of bucket ``b`` of ``count`` (a power of two) from every file of ``files``."""
    bits = count.bit_length() - 1
    parts = [np.zeros(0, dtype=dtype)]
    for path in fileset_paths(files):
        records = np.load(path, mmap_mode="r") if path.stat().st_size > 128 else np.load(path)
        if not len(records):
            continue
        h = records["h"]  # a strided view of the mapped file: bisect touches ~log2(n) pages
        start = bisect.bisect_left(h, np.uint64(b << (64 - bits))) if b else 0
        stop = bisect.bisect_left(h, np.uint64((b + 1) << (64 - bits))) if b + 1 < count else len(records)
        if stop > start:
            parts.append(np.array(records[start:stop]))
        del records, h
    return np.concatenate(parts)


def edge_records(x: np.ndarray, y: np.ndarray, both: bool = True) -> np.ndarray:
    """Edge records stored under x (and, with ``both``, the same edges stored under y)."""
    if both:
        x, y = np.concatenate([x, y]), np.concatenate([y, x])
    out = np.empty(len(x), dtype=EDGE)
    out["h"], out["x"], out["y"] = route(x), x, y
    return out


def neighbourhoods(records: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, y, starts): the distinct edges of ``records`` sorted by (x, y), and the index of the
    first edge of each node x."""
    x, y = records["x"], records["y"]
    order = np.lexsort((y, x))
    x, y = x[order], y[order]
    keep = np.ones(len(x), dtype=bool)
    if len(x) > 1:
        keep[1:] = (x[1:] != x[:-1]) | (y[1:] != y[:-1])
    x, y = x[keep], y[keep]
    starts = np.flatnonzero(np.r_[True, x[1:] != x[:-1]]) if len(x) else np.zeros(0, dtype=np.int64)
    return x, y, starts


@dataclass(frozen=True)
class StarJob:
    """One call of a large-star or small-star round: bucket ``bucket`` of the ``inputs`` files
    (as many buckets as there are ``outputs`` files) -> output file ``bucket``."""

    inputs: FileSet
    bucket: int
    outputs: FileSet


def large_star(job: StarJob) -> int:
    """One large-star call: bucket b of the input files -> output file b, links (y, m) stored
    under y. Returns how many nodes of the input break the star-forest condition (0 in every
    call: the input is final)."""
    inputs, b, outputs = job.inputs, job.bucket, job.outputs
    x, y, starts = neighbourhoods(read_bucket(inputs, b, outputs[2], EDGE))
    violations = 0
    links = np.zeros(0, dtype=EDGE)
    if len(x):
        nodes = x[starts]
        m = np.minimum(nodes, np.minimum.reduceat(y, starts))
        smaller = np.add.reduceat((y < x).astype(np.int64), starts)
        larger = np.add.reduceat((y > x).astype(np.int64), starts)
        violations = int(np.count_nonzero((smaller > 1) | ((smaller == 1) & (larger > 0))))
        group = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(x))))
        up = y > x
        links = edge_records(y[up], m[group[up]], both=False)
    write_bucketed(fileset_paths(outputs)[b], links)
    return violations


def small_star(job: StarJob) -> int:
    """One small-star call: bucket b of the large-star outputs (links to smaller nodes) ->
    output file b, edges in both directions. Returns the number of edges written."""
    inputs, b, outputs = job.inputs, job.bucket, job.outputs
    x, y, starts = neighbourhoods(read_bucket(inputs, b, outputs[2], EDGE))
    u = v = np.zeros(0, dtype=np.int64)
    if len(x):
        m = np.minimum.reduceat(y, starts)  # every y < x here
        group = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(x))))
        others = y != m[group]
        u = np.concatenate([x[starts], y[others]])
        v = np.concatenate([m, m[group[others]]])
    write_bucketed(fileset_paths(outputs)[b], edge_records(u, v))
    return len(u)


def connected_components(
    run_map: Callable[[Callable[[StarJob], int], list[StarJob]], list[int]],
    edges: FileSet,
    count: int,
    work: Path,
    on_round: Callable[[int], None] | None = None,
) -> tuple[FileSet, int]:
    """Alternate large-star and small-star rounds (each ``count`` calls through ``run_map``, e.g.
    :meth:`dataprep.decide_jobs.DecideJobs.map`) over the ``edges`` files (edges in both
    directions) until the edge set is a forest of stars. Returns (the files of that edge set,
    large-star rounds run); files of earlier rounds are deleted as the rounds go (never the input
    files)."""
    current, is_input = edges, True
    for k in range(MAX_ROUNDS):
        if on_round is not None:
            on_round(k)
        ls_out = fileset(work, f"ls{k:03d}", count)
        violations = run_map(large_star, [StarJob(current, b, ls_out) for b in range(count)])
        if sum(violations) == 0:
            remove_files(ls_out)
            return current, k + 1
        ss_out = fileset(work, f"ss{k:03d}", count)
        run_map(small_star, [StarJob(ls_out, b, ss_out) for b in range(count)])
        remove_files(ls_out)
        if not is_input:
            remove_files(current)
        current, is_input = ss_out, False
    raise RuntimeError(f"connected components did not converge in {MAX_ROUNDS} rounds (a bug: please report)")


def remove_files(files: FileSet) -> None:
    for p in fileset_paths(files):
        p.unlink(missing_ok=True)
