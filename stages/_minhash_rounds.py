"""The decide rounds of minhash_dedup, one module-level function per round and a named job
dataclass for each (run by :class:`dataprep.decide_jobs.DecideJobs` on the run's workers; no stage
here). Every call reads the shared :class:`~stages._minhash_spill.Layout` and exchanges files under
``<work>/lsh``; the round order and what each returns are in the stage's docstring.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats import arrow
from dataprep.stats import Histogram
from stages import _minhash as mh
from stages import _minhash_lsh as lsh
from stages._components import (
    EDGE,
    FileSet,
    edge_records,
    fileset,
    fileset_paths,
    neighbourhoods,
    read_bucket,
    write_bucketed,
)
from stages._decisions import write_decision
from stages._keyspill import StringTable, lookup_ids, save_atomic
from stages._minhash_spill import Layout, Spills, load_layout, tmp_path

CLUSTER_EDGES: list[float] = [2, 3, 4, 5, 6, 8, 11, 16, 32, 64, 128, 256, 1024, 4096]

INDEX_BAND_GROUP = 8  # band columns read from a task's spill at once in round 1
PAIR = np.dtype([("h", "<u8"), ("u", "<i8"), ("v", "<i8")])
DECISION = np.dtype([("pos", "<i8"), ("survivor", "<i8"), ("size", "<i8"), ("score", "<f8")])


# The jobs of the decide rounds (``layout``: the path of the shared :class:`Layout`) and what
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
    return lsh.group_pairs(members, starts, sizes)


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

    layout = load_layout(job.layout)
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
    tmp = tmp_path(path)
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
    layout, p, count = load_layout(job.layout), job.partition, job.partitions
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
    layout, q, count, partitions = load_layout(job.layout), job.bucket, job.buckets, job.partitions
    pairs = read_bucket(fileset(layout.lsh, "cand", partitions), q, count, PAIR)
    u, v = _distinct_pairs(pairs["u"], pairs["v"])
    del pairs
    distinct = len(u)
    verified = rejected = 0
    if layout.verify != "none" and len(u):
        ok = Spills(layout).similarity(u, v) >= layout.threshold
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
    layout, b, edges, count = load_layout(job.layout), job.bucket, job.edges, job.buckets
    x, y, starts = neighbourhoods(read_bucket(edges, b, count, EDGE))
    nodes = x[starts]
    centre = y[starts] > nodes  # y is sorted within a node: no smaller neighbour
    of_centre = np.repeat(centre, np.diff(np.append(starts, len(x))))
    members = np.concatenate([nodes[centre], y[of_centre]])
    cluster = np.concatenate([nodes[centre], x[of_centre]])
    del x, y
    spills = Spills(layout)
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


class IdPaths:
    """The tasks' id tables as a sequence whose paths are made when asked for (a task's decision
    looks up its survivors' tasks only: no list of every task's path per task)."""

    def __init__(self, layout: Layout):
        self.layout = layout

    def __getitem__(self, t: int) -> Path:
        return self.layout.index(t, "ids")


def write_task_decision(job: DecisionJob) -> None:
    """Decide round 6, one task: its dropped documents (rows), from every ``final.<b>`` file
    (binary search on the positions), with their survivors' ids, as ``<task>.decision.json``."""
    layout, t, count = load_layout(job.layout), job.task, job.buckets
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
    names = lookup_ids(IdPaths(layout), offsets, mine["survivor"])
    write_decision(
        layout.spill(t, ".decision.json"),
        (mine["pos"] - lo).tolist(),
        mine["survivor"].tolist(),
        [names[int(s)] for s in mine["survivor"]],
        mine["size"].tolist(),
        mine["score"].tolist(),
    )
