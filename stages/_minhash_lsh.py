"""MinHash signatures, LSH bands and candidate pairs, vectorised with numpy (used by the
``minhash_dedup`` stage; the shingles they are made of come from ``_minhash``).

4. Signature: ``num_perm`` hash functions h_k(x) = (x * a_k) mod 2^32 (a_k odd, from ``seed``;
   random bijections of the already random, non-zero 32-bit shingle hashes), the minimum over the
   document's shingles: uint32 [docs, num_perm] (:class:`MinHasher`).
5. Bands: ``bands`` x ``rows`` (:func:`optimal_bands`), each band hashed into one uint64 key
   (:func:`band_keys`).

Candidate pairs of a group of equal band keys (:func:`group_pairs`) and the exact Jaccard of
pairs of shingle sets (:func:`pair_jaccard_flat`) serve the stage's decide rounds.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from stages._minhash import P_TOKEN, U64, ShingleBatch, mix64_inplace


@functools.lru_cache(maxsize=1)
def _signature_kernel() -> Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], None]:
    """The compiled signature loop (numba; compiled on first use, cached on disk across processes).
    For each document: its minimum of (x * a_k) mod 2^32 over its shingles x, for every k at once
    (the k loop is one SIMD multiply and minimum per 8 lanes: no temporary arrays, no per-document
    call)."""
    import numba

    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def kernel(hashes: np.ndarray, offsets: np.ndarray, a: np.ndarray, out: np.ndarray) -> None:
        acc = np.empty(a.shape[0], np.uint32)
        for d in range(offsets.shape[0] - 1):
            acc[:] = np.uint32(0xFFFFFFFF)
            for i in range(offsets[d], offsets[d + 1]):
                x = hashes[i]
                for k in range(a.shape[0]):
                    acc[k] = min(acc[k], np.uint32(x * a[k]))
            out[d, :] = acc

    return kernel


SIGNATURE_CHUNK = 8192  # shingles per numpy step: num_perm x 8192 x 4 bytes of products (4 MB)
NUMBA_AFTER = 1 << 30  # products computed with numpy in a process before the compiled loop takes over
_numpy_products = 0  # products this process has computed with numpy so far


def _signatures_numpy(hashes: np.ndarray, offsets: np.ndarray, a: np.ndarray, out: np.ndarray) -> None:
    """What :func:`_signature_kernel` computes, with numpy: the products (x * a_k) mod 2^32 of
    SIGNATURE_CHUNK shingles at a time ([num_perm, chunk], uint32 wraps exactly mod 2^32), the
    minimum over each document's part of the chunk (``minimum.reduceat``), folded into ``out``
    (a document may span chunks). ``out`` must be all 0xFFFFFFFF on entry."""
    total = hashes.shape[0]
    buf = np.empty(a.shape[0] * min(SIGNATURE_CHUNK, total), dtype=np.uint32)
    column = a[:, None]
    for s0 in range(0, total, SIGNATURE_CHUNK):
        s1 = min(s0 + SIGNATURE_CHUNK, total)
        d0 = int(np.searchsorted(offsets, s0, side="right")) - 1  # the document holding shingle s0
        d1 = int(np.searchsorted(offsets, s1, side="left"))  # documents starting before s1
        starts = np.maximum(offsets[d0:d1], s0) - s0
        ends = np.minimum(offsets[d0 + 1 : d1 + 1], s1) - s0
        part = ends > starts  # documents with shingles in the chunk
        products = buf[: a.shape[0] * (s1 - s0)].reshape(a.shape[0], s1 - s0)
        np.multiply(column, hashes[None, s0:s1], out=products)
        mins = np.minimum.reduceat(products, starts[part], axis=1).T
        docs = np.flatnonzero(part) + d0
        out[docs] = np.minimum(out[docs], mins)


class MinHasher:
    """Signatures of shingle sets: uint32 [docs, num_perm] (see the module docstring).

    A document without shingles gets a signature of all 0xFFFFFFFF.
    """

    def __init__(self, num_perm: int, seed: int = 0):
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([0x6D696E68, seed])))
        self.num_perm = num_perm
        self.a = (rng.integers(0, 1 << 32, size=num_perm, dtype=np.uint64) | U64(1)).astype(np.uint32)

    def signatures(self, batch: ShingleBatch) -> np.ndarray:
        """uint32 [docs, num_perm]: h_k(x) = (x * a_k) mod 2^32 with a_k odd (a random bijection of
        the non-zero, already random 32-bit shingle hashes per k), minimum per document.

        Two implementations, the same result to the bit: numpy (:func:`_signatures_numpy`, about
        1 ns per product) until this process has computed NUMBA_AFTER products with it (about what
        loading the compiled loop costs: ~1 CPU-s for ``import numba`` and the cached kernel),
        then the compiled loop (:func:`_signature_kernel`, ~20 times faster per product). A small
        run never pays for the compiler; a large one pays for numpy at most once that much."""
        global _numpy_products
        out = np.full((len(batch.offsets) - 1, self.num_perm), 0xFFFFFFFF, dtype=np.uint32)
        hashes = np.ascontiguousarray(batch.hashes, dtype=np.uint32)
        offsets = np.ascontiguousarray(batch.offsets, dtype=np.int64)
        products = hashes.shape[0] * self.num_perm
        if _signature_kernel.cache_info().currsize == 0 and _numpy_products + products <= NUMBA_AFTER:
            _numpy_products += products
            _signatures_numpy(hashes, offsets, self.a, out)
        else:
            _signature_kernel()(hashes, offsets, self.a, out)
        return out


def band_keys(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """uint64 [docs, bands]: band j hashes signature columns [j*rows, (j+1)*rows) (all bands at
    once: ``rows`` rounds of splitmix64 over a [docs, bands] array)."""
    n = sig.shape[0]
    grid = sig[:, : bands * rows].reshape(n, bands, rows)
    with np.errstate(over="ignore"):
        acc = np.empty((n, bands), dtype=np.uint64)
        acc[:] = np.arange(bands, dtype=np.uint64) * P_TOKEN + U64(0x5BD1E995)
        for m in range(rows):  # in place: one xor and the mix per row, no temporaries
            np.bitwise_xor(acc, grid[:, :, m], out=acc)
            mix64_inplace(acc)
    return acc


def _integrate(f, a: float, b: float, steps: int = 2000) -> float:
    xs = np.linspace(a, b, steps + 1)
    ys = f(xs)
    return float(np.sum((ys[1:] + ys[:-1]) * 0.5 * np.diff(xs)))


def false_positive_area(threshold: float, bands: int, rows: int) -> float:
    """∫_0^t P(candidate | J=s) ds with P = 1 - (1 - s^rows)^bands."""
    return _integrate(lambda s: 1.0 - (1.0 - s**rows) ** bands, 0.0, threshold)


def false_negative_area(threshold: float, bands: int, rows: int) -> float:
    """∫_t^1 P(not candidate | J=s) ds."""
    return _integrate(lambda s: (1.0 - s**rows) ** bands, threshold, 1.0)


def _area_rows(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """The trapezoid integral of each row of ``ys`` over ``xs`` (what :func:`_integrate` gives for
    one row: same operations, same order)."""
    return np.sum((ys[:, 1:] + ys[:, :-1]) * 0.5 * np.diff(xs), axis=1)


@functools.lru_cache(maxsize=64)
def optimal_bands(
    threshold: float, num_perm: int, fp_weight: float = 0.5, fn_weight: float = 0.5
) -> tuple[int, int]:
    """(bands, rows) with bands * rows <= num_perm minimising
    fp_weight * false_positive_area + fn_weight * false_negative_area (datasketch's rule): the
    first (bands, rows) in (bands, rows) order better than every earlier one by more than 1e-12.
    The areas of all rows of one bands count are integrated at once (the same figures as
    :func:`false_positive_area` and :func:`false_negative_area`, one call each per pair)."""
    below = np.linspace(0.0, threshold, 2001)
    above = np.linspace(threshold, 1.0, 2001)
    rows = np.arange(1, num_perm + 1, dtype=np.float64)[:, None]
    miss_below, miss_above = 1.0 - below**rows, 1.0 - above**rows  # 1 - s^r, row r - 1
    best, best_err = (1, num_perm), float("inf")
    for b in range(1, num_perm + 1):
        fp = _area_rows(below, 1.0 - miss_below[: num_perm // b] ** b)
        fn = _area_rows(above, miss_above[: num_perm // b] ** b)
        errs = (fp_weight * fp + fn_weight * fn).tolist()
        for r, err in enumerate(errs, start=1):
            if err < best_err - 1e-12:
                best, best_err = (b, r), err
    return best


def ranges(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Concatenated aranges: [starts[0], starts[0] + sizes[0]), [starts[1], ...), ... (int64)."""
    total = int(sizes.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    firsts = np.cumsum(sizes) - sizes
    return np.arange(total, dtype=np.int64) + np.repeat(starts.astype(np.int64) - firsts, sizes)


def pair_jaccard_flat(
    left: np.ndarray, left_sizes: np.ndarray, right: np.ndarray, right_sizes: np.ndarray
) -> np.ndarray:
    """Exact Jaccard of many pairs of sorted unique uint32 sets at once (float64 [pairs]); the
    sets of each side are concatenated in pair order, with their sizes. Two empty sets: 1.0."""
    n = len(left_sizes)
    if n == 0:
        return np.zeros(0)
    la, lb = np.asarray(left_sizes, np.int64), np.asarray(right_sizes, np.int64)
    keys = np.concatenate(
        [
            (np.repeat(np.arange(n, dtype=np.uint64), la) << U64(32)) | left.astype(np.uint64),
            (np.repeat(np.arange(n, dtype=np.uint64), lb) << U64(32)) | right.astype(np.uint64),
        ]
    )
    keys.sort()
    same = keys[1:] == keys[:-1]
    inter = np.bincount((keys[1:][same] >> U64(32)).astype(np.int64), minlength=n)
    union = la + lb - inter
    return np.where(union > 0, inter / np.maximum(union, 1), 1.0)


SMALL_GROUP = 8


def group_pairs(members: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Candidate pairs (u, v) inside groups of documents that share a band key.

    members: document indices, group after group; starts/sizes: each group's first index in
    ``members`` and its size (>= 2). Groups of up to SMALL_GROUP documents give all their pairs;
    larger ones give a star (first member with every other) plus a chain (each with the next),
    so every group stays connected with O(size) pairs."""
    us: list[np.ndarray] = []
    vs: list[np.ndarray] = []
    small = sizes <= SMALL_GROUP
    for s in np.unique(sizes[small]):
        i, j = np.triu_indices(int(s), k=1)
        base = starts[small & (sizes == s)][:, None]
        us.append(members[(base + i[None, :]).ravel()])
        vs.append(members[(base + j[None, :]).ravel()])
    big = np.flatnonzero(~small)
    if big.size:
        big_starts, big_sizes = starts[big], sizes[big]
        rel = np.arange(int(big_sizes.sum())) - np.repeat(np.cumsum(big_sizes) - big_sizes, big_sizes)
        pos = np.repeat(big_starts, big_sizes) + rel
        others = rel > 0
        us.append(members[np.repeat(big_starts, big_sizes)[others]])
        vs.append(members[pos[others]])
        chain = rel > 1  # (first, second) is already in the star
        us.append(members[pos[chain] - 1])
        vs.append(members[pos[chain]])
    if not us:
        empty = np.zeros(0, dtype=members.dtype)
        return empty, empty
    return np.concatenate(us), np.concatenate(vs)
