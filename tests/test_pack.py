"""Packers (concat / pad / bestfit), the row shuffle and the shard plan, on synthetic token streams."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataprep.formats.rows import RowBatch
from stages.pack import (
    BestFitPacker,
    ConcatPacker,
    DocChunk,
    PackStats,
    PadPacker,
    RowSpool,
    piece_ends,
    shard_plan,
    split_of,
)

EOS, PAD = 2, 0


def make_docs(lengths: list[int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(10, 1000, size=n).astype(np.int32) for n in lengths]


def chunk_of(docs: list[np.ndarray], cuts: list[np.ndarray] | None = None) -> DocChunk:
    flat = np.concatenate(docs) if docs else np.zeros(0, np.int32)
    return DocChunk(flat, np.asarray([len(d) for d in docs], dtype=np.int64), cuts)


def run(packer, chunks: list[DocChunk]) -> RowBatch:
    out = []
    for c in chunks:
        out += packer.add(c)
    out += packer.finish()
    return RowBatch.concat(out, packer.L)


def segments(batch: RowBatch) -> list[np.ndarray]:
    """Every document piece of every row, in row order."""
    out = []
    for i in range(len(batch)):
        start = 0
        for end in batch.boundaries(i):
            out.append(batch.tokens[i, start:end])
            start = int(end)
    return out


def check_rows(batch: RowBatch, L: int) -> None:
    assert batch.tokens.shape[1] == L
    for i in range(len(batch)):
        b = batch.boundaries(i)
        assert len(b) >= 1 and (np.diff(b) > 0).all() and b[0] > 0 and b[-1] <= L
        assert (batch.tokens[i, b[-1] :] == PAD).all()


doc_lengths = st.lists(st.integers(1, 40), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(doc_lengths, st.integers(2, 17), st.sampled_from(["pad", "drop"]), st.integers(1, 4))
def test_concat_rows_are_the_eos_stream_cut_every_row(lengths, L, tail, parts):
    docs = make_docs(lengths)
    stream = np.concatenate([np.append(d, EOS) for d in docs])
    k = max(1, len(docs) // parts)
    packer = ConcatPacker(L, EOS, PAD, tail)
    batch = run(packer, [chunk_of(docs[i : i + k]) for i in range(0, len(docs), k)])
    check_rows(batch, L)
    real = np.concatenate(
        [np.zeros(0, np.int32)] + [batch.tokens[i, : batch.real_tokens[i]] for i in range(len(batch))]
    )
    kept = len(stream) if tail == "pad" else len(stream) // L * L
    assert np.array_equal(real, stream[:kept])
    assert packer.stats.tail_dropped == len(stream) - kept
    assert packer.stats.eos_dropped == int((stream[kept:] == EOS).sum())
    # a boundary sits after every EOS, and at the end of every row
    for i in range(len(batch)):
        eos_ends = set((np.flatnonzero(batch.tokens[i, : batch.real_tokens[i]] == EOS) + 1).tolist())
        assert set(batch.boundaries(i).tolist()) == eos_ends | {int(batch.real_tokens[i])}


@settings(max_examples=60, deadline=None)
@given(doc_lengths, st.integers(3, 17), st.sampled_from(["split", "truncate"]))
def test_pad_keeps_one_document_per_row(lengths, L, long_docs):
    docs = make_docs(lengths)
    packer = PadPacker(L, EOS, PAD, long_docs)
    batch = run(packer, [chunk_of(docs)])
    check_rows(batch, L)
    assert all(len(batch.boundaries(i)) == 1 for i in range(len(batch)))
    pieces = segments(batch)
    joined = np.concatenate(pieces)
    ends = np.flatnonzero(joined == EOS)
    assert len(ends) == len(docs)  # every document keeps its EOS
    restored = np.split(joined, ends + 1)[:-1]
    for doc, got in zip(docs, restored, strict=True):
        if long_docs == "split" or len(doc) + 1 <= L:
            assert np.array_equal(got, np.append(doc, EOS))
        else:
            assert np.array_equal(got, np.append(doc[: L - 1], EOS))
    total = sum(len(d) + 1 for d in docs)
    assert joined.size == total - packer.stats.truncated_tokens


@settings(max_examples=60, deadline=None)
@given(doc_lengths, st.integers(3, 33), st.integers(1, 3))
def test_bestfit_never_splits_documents_that_fit_and_conserves_tokens(lengths, L, window):
    docs = make_docs(lengths)
    packer = BestFitPacker(L, EOS, PAD, "split", window)
    batch = run(packer, [chunk_of(docs)])
    check_rows(batch, L)
    pieces = segments(batch)
    whole = sorted(tuple(np.append(d, EOS)) for d in docs if len(d) + 1 <= L)
    eos_pieces = [tuple(p) for p in pieces if p[-1] == EOS]
    for w in whole:
        assert w in eos_pieces
    counts_in = np.bincount(np.concatenate([np.append(d, EOS) for d in docs]), minlength=1001)
    counts_out = np.bincount(np.concatenate(pieces), minlength=1001)
    assert np.array_equal(counts_in, counts_out)
    assert packer.stats.padding == len(batch) * L - int(batch.real_tokens.sum())


def test_bestfit_fills_rows_better_than_one_document_per_row():
    docs = make_docs([5, 3, 7, 2, 6, 4, 1, 5, 3, 2] * 10, seed=3)
    best = BestFitPacker(9, EOS, PAD, "split", 100)
    rows_best = len(run(best, [chunk_of(docs)]))
    rows_pad = len(run(PadPacker(9, EOS, PAD, "split"), [chunk_of(docs)]))
    concat_rows = -(-sum(len(d) + 1 for d in docs) // 9)
    assert concat_rows <= rows_best < rows_pad


def test_long_documents_are_cut_at_paragraph_cuts_when_they_fit():
    stats = PackStats()
    assert piece_ends(25, np.asarray([4, 9, 14, 20]), 10, stats) == [9, 14, 20, 25]
    assert stats.hard_cuts == 0
    assert piece_ends(25, None, 10, stats) == [10, 20, 25]
    assert stats.hard_cuts == 2
    doc = make_docs([24])[0]
    packer = PadPacker(10, EOS, PAD, "split")
    batch = run(packer, [chunk_of([doc], [np.asarray([4, 9, 14, 20])])])
    assert batch.real_tokens.tolist() == [9, 5, 6, 5]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 300), buckets=st.integers(1, 5), seed=st.integers(0, 3))
def test_shuffle_is_a_seeded_permutation_of_the_rows(tmp_path_factory, n, buckets, seed):
    L = 4
    tokens = np.arange(n * L, dtype=np.int32).reshape(n, L)
    batch = RowBatch(tokens, np.repeat(np.int32(L), n), np.ones(n, np.int32))

    def shuffled(s: int) -> tuple[np.ndarray, np.ndarray]:
        spool = RowSpool(tmp_path_factory.mktemp("spool"), L, buckets, np.random.default_rng(s))
        for lo in range(0, n, 7):
            spool.add(batch.select(np.arange(lo, min(n, lo + 7))))
        parts = list(spool.batches())
        idx = np.concatenate([p[0] for p in parts])
        rows = np.concatenate([p[1].tokens for p in parts])
        spool.remove()
        return idx, rows

    idx, rows = shuffled(seed)
    assert sorted(idx.tolist()) == list(range(n))
    assert np.array_equal(rows, tokens[idx])  # rows travel with their stream index
    again, _ = shuffled(seed)
    assert np.array_equal(idx, again)


def test_shuffle_moves_rows_and_depends_on_the_seed(tmp_path):
    L, n = 3, 500
    batch = RowBatch(np.zeros((n, L), np.int32) + 1, np.full(n, L, np.int32), np.ones(n, np.int32))
    orders = []
    for s in (0, 1):
        spool = RowSpool(tmp_path / f"s{s}", L, 4, np.random.default_rng(s))
        spool.add(batch)
        orders.append(np.concatenate([i for i, _ in spool.batches()]))
    assert not np.array_equal(orders[0], np.arange(n))
    assert not np.array_equal(orders[0], orders[1])


@pytest.mark.parametrize("flush_bytes", [1 << 30, 1000, 1])
@pytest.mark.parametrize("shuffle", [True, False])
def test_spool_rows_left_in_memory_come_out_as_flushed_ones(tmp_path, monkeypatch, shuffle, flush_bytes):
    L, n = 5, 400
    rng = np.random.default_rng(7)
    counts = rng.integers(1, 3, size=n).astype(np.int32)
    ends = np.concatenate([[L] if c == 1 else [2, L] for c in counts])
    rows = RowBatch(rng.integers(0, 99, size=(n, L)), ends, counts)
    monkeypatch.setattr(RowSpool, "FLUSH_BYTES", flush_bytes)

    def batches(name: str, flush_first: bool) -> list[tuple[list[int], ...]]:
        spool = RowSpool(tmp_path / name, L, 3, np.random.default_rng(1) if shuffle else None)
        for lo in range(0, n, 30):
            spool.add(rows.select(np.arange(lo, min(n, lo + 30))))
        if flush_first:
            spool.flush()
        out = [
            (i.tolist(), b.tokens.ravel().tolist(), b.seg_ends.tolist(), b.seg_counts.tolist())
            for i, b in spool.batches()
        ]
        assert not spool._pending and spool._pending_bytes == 0
        return out

    assert batches("memory", False) == batches("flushed", True)


def test_unshuffled_spool_replays_stream_order(tmp_path):
    spool = RowSpool(tmp_path / "s", 2, 8, None)
    for k in range(3):
        spool.add(RowBatch(np.full((2, 2), k, np.int32), np.full(2, 2, np.int32), np.ones(2, np.int32)))
    assert np.concatenate([i for i, _ in spool.batches()]).tolist() == list(range(6))


@pytest.mark.parametrize(
    ("rows", "files", "equal", "sizes", "kept"),
    [
        (100, 8, True, [12] * 8, 96),
        (100, 8, False, [13] * 4 + [12] * 4, 100),
        (5, 8, True, [1] * 5, 5),
        (0, 8, True, [0], 0),
    ],
)
def test_shard_plan(rows, files, equal, sizes, kept):
    assert shard_plan(rows, files, equal) == (sizes, kept)


def test_validation_split_is_a_stable_fraction_of_ids():
    ids = [f"doc{i}" for i in range(20000)]
    share = sum(split_of(i, 0.1) == "validation" for i in ids) / len(ids)
    assert 0.09 < share < 0.11
    assert [split_of(i, 0.1) for i in ids[:50]] == [split_of(i, 0.1) for i in ids[:50]]
    assert all(split_of(i, 0.0) == "train" for i in ids[:100])


def test_a_truncated_spool_file_is_an_error_not_short_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(RowSpool, "FLUSH_BYTES", 1)  # every add is flushed to disk
    spool = RowSpool(tmp_path / "s", 3, 2, np.random.default_rng(0))
    spool.add(RowBatch(np.ones((50, 3), np.int32), np.full(50, 3, np.int32), np.ones(50, np.int32)))
    bucket = sorted((tmp_path / "s").iterdir())[0]
    bucket.write_bytes(bucket.read_bytes()[:-5])
    with pytest.raises(RuntimeError, match="truncated"):
        list(spool.batches())
