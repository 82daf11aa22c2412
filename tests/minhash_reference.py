"""Reference implementations for the MinHash tests: slow, obvious versions of what
``stages/_minhash.py`` and ``stages/_components.py`` do fast (exact Jaccard of sets, a
single-process union-find, the LSH candidate probability)."""

from __future__ import annotations

import numpy as np

from stages._minhash_lsh import pair_jaccard_flat


def candidate_probability(similarity: float, bands: int, rows: int) -> float:
    """Probability that two documents of Jaccard ``similarity`` share at least one band."""
    return 1.0 - (1.0 - similarity**rows) ** bands


def jaccard_exact(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard of two sorted unique uint32 arrays (1.0 for two empty sets)."""
    if a.size == 0 and b.size == 0:
        return 1.0
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter / (a.size + b.size - inter)


def pair_jaccard(
    left: list[np.ndarray] | tuple[np.ndarray, ...], right: list[np.ndarray] | tuple[np.ndarray, ...]
) -> np.ndarray:
    """:func:`pair_jaccard_flat` for lists of sets."""
    if not len(left):
        return np.zeros(0)
    sizes = [np.fromiter((x.size for x in side), dtype=np.int64, count=len(side)) for side in (left, right)]
    return pair_jaccard_flat(np.concatenate(left), sizes[0], np.concatenate(right), sizes[1])


class UnionFind:
    """Disjoint sets over 0..n-1 with vectorised union of many pairs at once.

    Invariant: parent[x] <= x, so the root of a set is its smallest member and hooking a larger
    root under a smaller one can never make a cycle. Memory: one int32 (int64 past 2^31) per node.
    """

    def __init__(self, n: int):
        self.parent = np.arange(n, dtype=np.int32 if n < 2**31 - 1 else np.int64)

    def find(self, x: np.ndarray) -> np.ndarray:
        """Roots of ``x`` (pointer jumping; the visited nodes are compressed)."""
        r = self.parent[x]
        while True:
            up = self.parent[r]
            if np.array_equal(up, r):
                break
            r = up
        self.parent[x] = r
        return r

    def union(self, u: np.ndarray, v: np.ndarray) -> int:
        """Merge the sets of every pair (u[i], v[i]); returns how many pairs joined two sets."""
        joined = 0
        first = True
        while len(u):
            ru, rv = self.find(u), self.find(v)
            apart = ru != rv
            if first:
                joined = int(np.count_nonzero(apart))
                first = False
            if not apart.any():
                break
            ru, rv, u, v = ru[apart], rv[apart], u[apart], v[apart]
            np.minimum.at(self.parent, np.maximum(ru, rv), np.minimum(ru, rv).astype(self.parent.dtype))
        return joined

    def compress(self) -> None:
        """Point every node straight at its root."""
        while True:
            up = self.parent[self.parent]
            if np.array_equal(up, self.parent):
                return
            self.parent = up

    def roots(self) -> np.ndarray:
        self.compress()
        return self.parent
