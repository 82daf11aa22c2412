"""The data mix: how many copies of each document the train split gets, and in which order, so
that every source reaches its target share of the training tokens (see docs/mixing.md).

Pure functions of the documents' ids and token counts and of the seed, used by the pack stage's
decide; nothing here depends on the worker count or the order jobs finish in.

* :func:`plan_targets`: the tokens each source should contribute. With ``total_tokens`` 0 the
  output is as large as the shares allow without any source going past its ``max_epochs``
  (``T = min_k max_epochs_k * available_k / share_k``); with a fixed total, a source whose
  ``max_epochs`` copies hold fewer tokens than its share runs short, by the difference.
* :func:`multiplicities`: each document is copied ``floor(goal / available)`` times (whole
  epochs), and the documents first in the order of a seeded hash of their id get one copy more
  until the source's goal is met as closely as whole documents allow (downsampling is the case of
  zero whole epochs).
* :func:`order_copies`: a task's copies in stream order, first copies first (in their original
  order), then each further epoch in a seeded permutation, a copy being held back while it would
  share a row with the previous copy of the same document; copies that cannot be placed apart
  from it in their task are not written (counted).

Token counts here include each document's EOS (what the stream holds).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np


@dataclass
class Targets:
    """Per source (recipe order): ``goal`` tokens of its share of ``total``, ``planned`` tokens
    (the goal, or all ``max_epochs`` copies when short), ``short`` tokens it lacks."""

    total: float
    goal: list[float]
    planned: list[float]
    short: list[float]


def plan_targets(
    available: list[int], shares: list[float], max_epochs: list[float], total_tokens: int
) -> Targets:
    """Tokens per source (see the module docstring). A source without tokens is short of its
    whole goal; the total is then set by the others."""
    caps = [e * a for e, a in zip(max_epochs, available, strict=True)]
    if total_tokens > 0:
        total = float(total_tokens)
    else:
        bounds = [c / s for c, s in zip(caps, shares, strict=True) if c > 0]
        total = min(bounds) if bounds else 0.0
    goal = [s * total for s in shares]
    planned = [min(g, c) for g, c in zip(goal, caps, strict=True)]
    short = [max(0.0, g - c) for g, c in zip(goal, caps, strict=True)]
    return Targets(total, goal, planned, short)


def doc_hash(doc_ids: list[str], seed: int) -> np.ndarray:
    """uint64 seeded hash of each id (xxh3-64): the order downsampling chooses documents in."""
    import xxhash

    return np.fromiter(
        (xxhash.xxh3_64_intdigest(i.encode("utf-8"), seed=seed & (2**64 - 1)) for i in doc_ids),
        dtype=np.uint64,
        count=len(doc_ids),
    )


def multiplicities(lengths: np.ndarray, hashes: np.ndarray, goal: float) -> np.ndarray:
    """Copies (int64) of each document of one source (``lengths``: tokens with EOS) so that their
    tokens come as close to ``goal`` as whole documents allow: whole epochs, then one more copy
    of the documents first in hash order while that brings the sum nearer to the goal."""
    lengths = np.asarray(lengths, dtype=np.int64)
    available = int(lengths.sum())
    mult = np.zeros(len(lengths), dtype=np.int64)
    if available == 0 or goal <= 0:
        return mult
    epochs = int(goal // available)
    mult += epochs
    rest = goal - epochs * available
    order = np.lexsort((np.arange(len(lengths)), hashes))
    cum = np.cumsum(lengths[order])
    k = int(np.searchsorted(cum, rest, side="left"))  # cum[k] >= rest: take k or k + 1 documents
    if k < len(cum):
        below = float(cum[k - 1]) if k > 0 else 0.0
        take = k + 1 if cum[k] - rest < rest - below else k
    else:
        take = len(cum)
    mult[order[:take]] += 1
    return mult


def order_copies(
    lengths: np.ndarray, mult: np.ndarray, offset: int, row_length: int, seed: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """(document index of every copy in stream order, copies not placed per document) for one
    task whose stream starts at token ``offset`` of its split (``lengths`` with EOS). With
    ``row_length`` L, a copy starting at stream position p lies in rows p // L onwards; it is
    placed only after the row holding the end of the document's previous copy (L = 1: any order
    is fine, e.g. one document per row)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    mult = np.asarray(mult, dtype=np.int64)
    rng = np.random.default_rng(seed)
    queue: deque[int] = deque(int(i) for i in np.flatnonzero(mult > 0))
    for e in range(1, int(mult.max(initial=0))):
        again = np.flatnonzero(mult > e)
        queue.extend(int(i) for i in again[rng.permutation(len(again))])
    last_row = np.full(len(lengths), -1, dtype=np.int64)
    placed: list[int] = []
    held: deque[int] = deque()
    pos = offset

    def place(i: int) -> None:
        nonlocal pos
        placed.append(i)
        pos += int(lengths[i])
        last_row[i] = (pos - 1) // row_length

    while queue or held:
        row = pos // row_length
        k = next((j for j, i in enumerate(held) if last_row[i] < row), None)
        if k is not None:
            i = held[k]
            del held[k]
            place(i)
            continue
        if not queue:
            break
        i = queue.popleft()
        if last_row[i] < row:
            place(i)
        else:
            held.append(i)
    unplaced = np.bincount(np.asarray(list(held), dtype=np.int64), minlength=len(lengths))
    return np.asarray(placed, dtype=np.int64), unplaced.astype(np.int64)


def rows_sharing_copies(order: np.ndarray, lengths: np.ndarray, offset: int, row_length: int) -> int:
    """How many times two copies of one document share a row in a stream of copies ``order``
    starting at ``offset`` (a check: 0 for what :func:`order_copies` returns)."""
    seen: dict[int, int] = {}
    pos, bad = offset, 0
    for i in order.tolist():
        start, pos = pos, pos + int(lengths[i])
        if i in seen and seen[i] >= start // row_length:
            bad += 1
        seen[i] = (pos - 1) // row_length
    return bad


def achieved(tokens: list[int]) -> list[float]:
    """Each source's share of the tokens written."""
    total = sum(tokens)
    return [t / total if total else 0.0 for t in tokens]


def epochs_of(written: int, available: int) -> float:
    return round(written / available, 4) if available else 0.0


def within(achieved_share: float, target: float, tolerance: float) -> bool:
    return math.isclose(achieved_share, target, abs_tol=tolerance)


# ---------------------------------------------------------------------------------------------
# The pack stage's use of the above: the train split's spills rewritten with the mix applied.


@dataclass(frozen=True)
class RewriteJob:
    """One task's train spills (in ``work_dir``) rewritten into ``out_dir`` as the copies listed,
    in order, in the int64 .npy file ``order_path`` (indices of the task's documents)."""

    work_dir: str
    out_dir: str
    task_id: str
    token_dtype: str
    order_path: str


def rewrite_task(job: RewriteJob) -> None:
    """Runs in any process; writes whole files through renames (safe to run twice)."""
    import json
    import os
    from pathlib import Path

    work, out, t = Path(job.work_dir), Path(job.out_dir), job.task_id
    order = np.load(job.order_path)
    table = np.fromfile(work / f"{t}.train.docs", dtype="<i8").reshape(-1, 2)
    tok_off = np.concatenate([[0], np.cumsum(table[:, 0])])
    cut_off = np.concatenate([[0], np.cumsum(table[:, 1])])
    tokens = np.fromfile(work / f"{t}.train.tokens", dtype=job.token_dtype)
    cuts_path = work / f"{t}.train.cuts"
    cuts = np.fromfile(cuts_path, dtype="<i4") if cuts_path.exists() else None
    with open(work / f"{t}.train.ids", encoding="utf-8") as f:
        where = [w for line in f for w in json.loads(line)]

    def write(name: str, data: bytes | memoryview) -> None:
        tmp = out / f".{t}.train.{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, out / f"{t}.train.{name}")

    def gather(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        starts, sizes = offsets[order], offsets[order + 1] - offsets[order]
        firsts = np.cumsum(sizes) - sizes  # where each copy starts in the output
        index = np.repeat(starts - firsts, sizes) + np.arange(int(sizes.sum()))
        return values[index]

    write("tokens", np.ascontiguousarray(gather(tokens, tok_off)).tobytes())
    write("docs", np.ascontiguousarray(table[order], dtype="<i8").tobytes())
    if cuts is not None:
        write("cuts", np.ascontiguousarray(gather(cuts, cut_off), dtype="<i4").tobytes())
    write("ids", json.dumps([where[i] for i in order.tolist()], ensure_ascii=False).encode() + b"\n")
