"""The data mix: how many copies of each document the train split gets, and in which order, so
that every source reaches its target share of the training tokens (see docs/mixing.md).

Pure functions of the documents' ids and token counts and of the seed, and :func:`apply_mix`,
which the pack stage's decide calls with them; nothing here depends on the worker count or the
order jobs finish in.

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

import dataclasses
import json
import math
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.decide_jobs import DecideJobs
from dataprep.document import Document, Drop
from dataprep.formats.manifest import MixManifest, SourceMix
from dataprep.shards.output import SplitRows
from dataprep.stage import DriverContext, InputError
from stages._pack_jobs import SplitSpills, TaskSpill


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


def _warn(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def apply_mix(ctx: DriverContext, train: SplitSpills, row: int) -> tuple[MixManifest, SplitSpills]:
    """The mix of the ``train`` split (``ctx``: the packing stage's; ``row``: tokens a row holds
    under concat packing, else 1): per source its target tokens, each document's copies, each
    task's copies in stream order (two copies of a document never in one row); the train spills
    rewritten so into ``work/mixed`` (one job per task), the documents no copy of which is
    written rejected (``mix_not_chosen``). Returns the manifest's ``mix`` block and the rewritten
    train spills. A source short of its share: a warning, or under ``mix.policy: strict`` an
    InputError before anything is written."""
    config = ctx.artifacts["sources"]
    sources, settings = config["sources"], config["mix"]
    names = [s["name"] for s in sources]
    tasks = [t.task_id for t in train.tasks]
    by_task = {t.task_id: t for t in train.tasks}
    work = Path(train.work_dir)
    lengths: dict[str, np.ndarray] = {}
    where: dict[str, list[list[Any]]] = {}
    for t in tasks:
        lengths[t] = np.fromfile(work / f"{t}.train.docs", dtype="<i8").reshape(-1, 2)[:, 0] + 1
        with open(work / f"{t}.train.ids", encoding="utf-8") as f:
            where[t] = [w for line in f for w in json.loads(line)]
    of_source = [[t for t in tasks if by_task[t].source == k] for k in range(len(names))]
    available = [int(sum(int(lengths[t].sum()) for t in ts)) for ts in of_source]
    targets = plan_targets(
        available,
        [s["share"] for s in sources],
        [s["max_epochs"] for s in sources],
        int(settings.get("total_tokens", 0)),
    )
    short = [k for k, n in enumerate(targets.short) if n >= 1]
    for k in short:
        have = available[k] * sources[k]["max_epochs"]
        msg = (
            f"mix: source {names[k]!r} is short by {int(targets.short[k])} tokens: its share "
            f"{sources[k]['share']:g} of {int(targets.total)} is {int(targets.goal[k])} tokens, it has "
            f"{available[k]} after cleaning and dedup (x max_epochs {sources[k]['max_epochs']:g} = "
            f"{int(have)})"
        )
        if settings.get("policy") == "strict":
            raise InputError(f"{msg}; mix.policy is strict, so no shard was written")
        _warn(f"warning: {msg}; the achieved shares will differ from the targets")
    mult: dict[str, np.ndarray] = {}
    for k, ts in enumerate(of_source):
        if not ts:
            continue
        ids = [w[0] for t in ts for w in where[t]]
        joined = np.concatenate([lengths[t] for t in ts])
        m = multiplicities(joined, doc_hash(ids, ctx.seed), targets.planned[k])
        cuts = np.cumsum([0] + [len(lengths[t]) for t in ts])
        for j, t in enumerate(ts):
            mult[t] = m[cuts[j] : cuts[j + 1]]
    mixed_dir = ctx.work_dir / "mixed"
    mixed_dir.mkdir(exist_ok=True)
    offset = 0
    jobs: list[RewriteJob] = []
    mixed: list[TaskSpill] = []
    written = [[0, 0] for _ in names]  # copies, tokens (with EOS)
    kept = [[0, 0] for _ in names]
    unplaced = [0 for _ in names]
    for i, t in enumerate(tasks):
        k = by_task[t].source
        order, left = order_copies(lengths[t], mult[t], offset, row, [ctx.seed, i])
        tokens = int(lengths[t][order].sum())
        offset += tokens
        np.save(mixed_dir / f"{t}.order.npy", order)
        order_path = str(mixed_dir / f"{t}.order.npy")
        jobs.append(RewriteJob(train.work_dir, str(mixed_dir), t, by_task[t].dtype, order_path))
        if len(order):
            mixed.append(dataclasses.replace(by_task[t], tokens=tokens, documents=len(order)))
        written[k][0] += len(order)
        written[k][1] += tokens
        chosen = mult[t] > 0
        kept[k][0] += int(chosen.sum())
        kept[k][1] += int(lengths[t][chosen].sum())
        unplaced[k] += int(left.sum())
        for j in np.flatnonzero(~chosen).tolist():
            doc_id, source, chars = where[t][j]
            drop = Drop(
                Document(id=doc_id, text="", source=source),
                "mix_not_chosen",
                detail=f"source {names[k]}: not among the documents chosen (seeded hash) for its share",
                extra={"source": names[k], "tokens": int(lengths[t][j]) - 1},
            )
            ctx.reject(drop, chars=chars)
    DecideJobs(ctx).map(rewrite_task, jobs)
    shares = achieved([w[1] for w in written])
    tolerance = float(settings.get("tolerance", 0.005))
    entries: dict[str, SourceMix] = {}
    for k, name in enumerate(names):
        docs_available = sum(len(lengths[t]) for t in of_source[k])
        entries[name] = SourceMix(
            source_id=k,
            target_share=sources[k]["share"],
            achieved_share=round(shares[k], 6),
            epochs=epochs_of(written[k][1], available[k]),
            max_epochs=sources[k]["max_epochs"],
            priority=sources[k]["priority"],
            docs_available=docs_available,
            tokens_available=available[k],
            docs_kept=kept[k][0],
            tokens_kept=kept[k][1],
            docs_written=written[k][0],
            tokens_written=written[k][1],
            short_tokens=int(targets.short[k]),
            unplaced_copies=unplaced[k],
        )
        for key in ("docs_written", "tokens_written", "unplaced_copies"):
            ctx.stats.count(f"mix_{key}.{name}", getattr(entries[name], key))
    met = all(within(e.achieved_share, e.target_share, tolerance) for e in entries.values())
    mix = MixManifest(
        sources=entries,
        total_tokens=int(sum(w[1] for w in written)),
        policy=str(settings.get("policy", "warn")),
        tolerance=tolerance,
        met=met,
        short=[names[k] for k in short],
    )
    if not met and not short:
        _warn("warning: mix: achieved shares outside the tolerance of the targets (see manifest.json mix)")
    return mix, SplitSpills(str(mixed_dir), "train", mixed)


def count_rows(ctx: DriverContext, mix: MixManifest, train: SplitRows | None) -> None:
    """Each source's rows in the train split (a row is its first token's source), into ``mix``
    and the stage's counters."""
    if train is None or train.sources is None:
        return
    starts, ids = train.sources
    ends = [*starts[1:], train.rows]
    for name, entry in mix.sources.items():
        entry.rows = sum(
            max(0, min(e, train.rows) - s)
            for s, e, i in zip(starts, ends, ids, strict=True)
            if i == entry.source_id
        )
        ctx.stats.count(f"mix_rows.{name}", entry.rows)
