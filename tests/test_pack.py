"""Packers (concat / pad / bestfit), the row shuffle and the shard plan, on synthetic token streams."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataprep.formats.rows import RowBatch
from dataprep.shards.accounting import PackStats
from dataprep.shards.output import SplitRows, bucket_order
from dataprep.shards.plan import FilesSettings, shard_plan
from dataprep.shards.spool import (
    OUT_ROWS,
    Buckets,
    RowSpool,
    ScatterJob,
    merge_buckets,
    read_bucket,
    read_part,
    scatter_bucket,
)
from stages._pack_jobs import read_spills, task_chunks, task_ranges
from stages._packers import BestFitPacker, ConcatPacker, DocChunk, PadPacker, piece_ends
from stages.pack import split_of

EOS, PAD = 2, 0


def _settings(params):
    """Packing into an int32 spool, as decide sets it up for ``params``."""
    from stages._pack_jobs import PackSettings

    return PackSettings(
        params.packer, params.row_length, EOS, PAD, "<i4", params.shuffle, params.shuffle_buffer_mb
    )


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


def rows_numbered(n: int, L: int = 4) -> RowBatch:
    """n rows whose tokens say their stream index (row i holds i * L ... i * L + L - 1), one or two
    document pieces each."""
    tokens = np.arange(n * L, dtype=np.int32).reshape(n, L)
    counts = (np.arange(n) % 2 + 1).astype(np.int32)
    ends = np.concatenate([[L] if c == 1 else [1, L] for c in counts]).astype(np.int32)
    return RowBatch(tokens, ends, counts)


def shuffled_files(
    tmp: Path,
    rows: RowBatch,
    buckets: int,
    seed: int | None,
    sizes: list[int] | None = None,
    add_rows: int = 7,
    bucket_rows: int = 1 << 62,
    reverse_jobs: bool = False,
    writers: int = 1,
    reverse_writers: bool = False,
) -> list[list[RowBatch]]:
    """What the pack stage does after packing: spool the rows (``writers`` spools, each a
    contiguous run of the stream, as tasks are), scatter every bucket (the jobs run in bucket
    order, or in reverse), and read each file's batches back from its parts."""
    L, n = rows.row_length, len(rows)
    sizes = sizes or [n]
    assign = Buckets(None if seed is None else 1000 + seed, buckets, bucket_rows)
    (tmp / "spool").mkdir(parents=True)
    shares = []
    for w, run in enumerate(np.array_split(np.arange(n), writers)):
        spool = RowSpool(tmp / "spool", f"w{w}", L, "<i4", assign)
        for lo in range(0, len(run), add_rows):
            index = run[lo : lo + add_rows]
            spool.add(rows.select(index), index)
        shares.append(spool.close())
    if reverse_writers:  # a bucket's files out of stream order (as the driver's joined rows are)
        shares = shares[::-1]
    spooled = {"train": SplitRows(tmp / "spool", merge_buckets(shares), assign, PackStats())}
    (tmp / "parts").mkdir()
    jobs = [
        ScatterJob("train", i, bucket, L, "<i4", EOS, start, np.cumsum(sizes), perm, str(tmp / "parts"))
        for i, (_, bucket, start, perm) in enumerate(bucket_order(spooled, seed or 0))
    ]
    results = (
        [scatter_bucket(job) for job in jobs[::-1]][::-1] if reverse_jobs else list(map(scatter_bucket, jobs))
    )
    parts: list[list[tuple[str, list[int]]]] = [[] for _ in sizes]
    for result in results:
        for k, path, batches in result["parts"]:
            parts[k].append((path, batches))
    return [[b for path, batches in file for b in read_part(path, batches, L, "<i4")] for file in parts]


def stream_index(files: list[list[RowBatch]]) -> list[int]:
    return [int(t) // 4 for file in files for b in file for t in b.tokens[:, 0]]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 300), buckets=st.integers(1, 5), seed=st.integers(0, 3))
def test_shuffle_is_a_seeded_permutation_of_the_rows(tmp_path_factory, n, buckets, seed):
    rows = rows_numbered(n)
    files = shuffled_files(tmp_path_factory.mktemp("s"), rows, buckets, seed)
    order = stream_index(files)
    assert sorted(order) == list(range(n))
    got = RowBatch.concat(files[0], 4)
    want = rows.select(np.asarray(order))
    assert np.array_equal(got.tokens, want.tokens)  # rows travel with their boundaries
    assert np.array_equal(got.seg_ends, want.seg_ends) and np.array_equal(got.seg_counts, want.seg_counts)
    assert stream_index(shuffled_files(tmp_path_factory.mktemp("s"), rows, buckets, seed)) == order


def test_shuffle_moves_rows_and_depends_on_the_seed(tmp_path):
    rows = rows_numbered(500)
    orders = [stream_index(shuffled_files(tmp_path / f"s{s}", rows, 4, s)) for s in (0, 1)]
    assert orders[0] != list(range(500))
    assert orders[0] != orders[1]


@pytest.mark.parametrize("flush_bytes", [1 << 30, 1000, 1])
@pytest.mark.parametrize("seed", [1, None])
def test_files_do_not_depend_on_flushes_or_on_the_order_the_bucket_jobs_run(
    tmp_path, monkeypatch, seed, flush_bytes
):
    rows = rows_numbered(9000)
    monkeypatch.setattr(RowSpool, "FLUSH_BYTES", flush_bytes)

    def files(name: str, **kw) -> list[list[tuple[list[int], ...]]]:
        out = shuffled_files(
            tmp_path / name, rows, 3, seed, sizes=shard_plan(9000, 7, True).sizes, bucket_rows=2500, **kw
        )
        return [
            [(b.tokens.ravel().tolist(), b.seg_ends.tolist(), b.seg_counts.tolist()) for b in f] for f in out
        ]

    reference = files("in-order")
    assert [sum(len(b[2]) for b in f) for f in reference] == [1285] * 7 + [5]  # 7 equal, a remainder
    assert files("reversed", reverse_jobs=True) == reference
    assert files("one-row-adds", add_rows=1) == reference
    assert all(len(b[2]) <= OUT_ROWS for f in reference for b in f)


@pytest.mark.parametrize("writers", [1, 3])
def test_unshuffled_rows_keep_stream_order_over_several_buckets(tmp_path, writers):
    rows = rows_numbered(50)
    files = shuffled_files(tmp_path, rows, 1, None, sizes=[20, 30], bucket_rows=8, writers=writers)
    assert stream_index(files) == list(range(50))
    assert [sum(len(b) for b in f) for f in files] == [20, 30]


def test_the_shuffle_does_not_depend_on_how_rows_were_split_among_writers(tmp_path):
    """Packing jobs are runs of tasks, a few per worker: the final order must not depend on them."""
    rows = rows_numbered(600)
    order = stream_index(shuffled_files(tmp_path / "one", rows, 3, 5))
    assert sorted(order) == list(range(600)) and order != list(range(600))
    for writers in (2, 7):
        for reverse in (False, True):
            again = shuffled_files(
                tmp_path / f"w{writers}{reverse}", rows, 3, 5, writers=writers, reverse_writers=reverse
            )
            assert stream_index(again) == order
    unshuffled = shuffled_files(
        tmp_path / "u", rows, 1, None, writers=3, reverse_writers=True, bucket_rows=100
    )
    assert stream_index(unshuffled) == list(range(600))


@pytest.mark.parametrize(
    ("weights", "jobs", "ranges"),
    [
        ([5, 5, 5, 5], 2, [(0, 2), (2, 4)]),
        ([1, 1, 1], 8, [(0, 1), (1, 2), (2, 3)]),
        ([100, 1, 1, 1], 2, [(0, 1), (1, 4)]),
        ([3], 4, [(0, 1)]),
        ([], 4, []),
    ],
)
def test_task_ranges_are_contiguous_and_balanced(weights, jobs, ranges):
    assert task_ranges(weights, jobs) == ranges


def test_every_row_lands_in_a_file_with_equal_files_and_a_remainder(tmp_path):
    rows = rows_numbered(1000)
    plan = shard_plan(1000, 3, True)
    files = shuffled_files(tmp_path, rows, 4, 3, sizes=plan.sizes)
    assert [sum(len(b) for b in f) for f in files] == [333, 333, 333, 1]
    order = stream_index(files)
    assert sorted(order) == list(range(1000)) and order != list(range(1000))


@pytest.mark.parametrize(
    ("rows", "files", "equal", "sizes", "remainder"),
    [
        (100, 8, True, [12] * 8 + [4], True),
        (96, 8, True, [12] * 8, False),
        (100, 8, False, [13] * 4 + [12] * 4, False),
        (5, 8, True, [1] * 5, False),
        (0, 8, True, [0], False),
    ],
)
def test_shard_plan_puts_every_row_in_a_file(rows, files, equal, sizes, remainder):
    plan = shard_plan(rows, files, equal)
    assert (plan.sizes, plan.remainder, plan.rows) == (sizes, remainder, rows)
    last = len(sizes) - 1
    assert plan.stem("train", last) == ("train-remainder" if remainder else f"train-{last:05d}")
    assert plan.stem("train", 0) == "train-00000"


def test_file_counts_follow_shards_shard_mb_and_shard_multiple():
    """Train: ``shards`` files when set, else about shard_mb MiB of int32 rows each, rounded up to
    a multiple of shard_multiple (one file below shard_multiple rows); validation: about shard_mb
    each, sizes within a row."""
    row_length = 256  # 1 KiB of int32 a row: 1024 rows a MiB
    assert FilesSettings(shards=3).plan("train", 100, row_length).sizes == [33, 33, 33, 1]
    one_mb = FilesSettings(shard_mb=1, shard_multiple=4)
    assert len(one_mb.plan("train", 5 * 1024, row_length).sizes) == 8  # 5 files' worth -> 8
    assert one_mb.plan("train", 3, row_length).sizes == [3]
    unequal = FilesSettings(shard_mb=1, equal_shards=False)
    assert unequal.plan("train", 8 * 1024 + 3, row_length).sizes == [513] * 3 + [512] * 13  # 9 -> 16 files
    assert FilesSettings(shard_mb=1).plan("validation", 2049, row_length).sizes == [683, 683, 683]


def test_validation_split_is_a_stable_fraction_of_ids():
    ids = [f"doc{i}" for i in range(20000)]
    share = sum(split_of(i, 0.1) == "validation" for i in ids) / len(ids)
    assert 0.09 < share < 0.11
    assert [split_of(i, 0.1) for i in ids[:50]] == [split_of(i, 0.1) for i in ids[:50]]
    assert all(split_of(i, 0.0) == "train" for i in ids[:100])


def test_a_truncated_spool_file_is_an_error_not_short_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(RowSpool, "FLUSH_BYTES", 1)  # every add is flushed to disk
    spool = RowSpool(tmp_path, "t", 3, "<i4", Buckets(7, 2, 1 << 62))
    spool.add(
        RowBatch(np.ones((50, 3), np.int32), np.full(50, 3, np.int32), np.ones(50, np.int32)), np.arange(50)
    )
    bucket = spool.close()[0]
    Path(bucket.paths[0]).write_bytes(Path(bucket.paths[0]).read_bytes()[:-5])
    with pytest.raises(RuntimeError, match="truncated"):
        read_bucket(bucket, 3, "<i4")


def spill_tasks(work: Path, tasks: list[list[np.ndarray]], dtype: str = "<i4") -> list[str]:
    """Task spills of the train split, as Pack.compute and Pack.finish_compute leave them (tokens
    as ``dtype``); the task ids."""
    for i, docs in enumerate(tasks):
        t = f"t{i:05d}"
        if docs:
            np.asarray([[len(d), 0] for d in docs], dtype="<i8").tofile(work / f"{t}.train.docs")
            np.concatenate(docs).astype(dtype).tofile(work / f"{t}.train.tokens")
        total = int(sum(len(d) for d in docs))
        meta = {
            "train": {"documents": len(docs), "doc_tokens": total, "min_id": 10, "max_id": 999},
            "validation": {"documents": 0, "doc_tokens": 0, "min_id": -1, "max_id": -1},
            "token_dtype": dtype,
            "source": -1,
        }
        (work / f"{t}.meta.json").write_text(json.dumps(meta))
    return [f"t{i:05d}" for i in range(len(tasks))]


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    task_docs=st.lists(st.lists(st.integers(1, 30), max_size=6), min_size=1, max_size=8),
    L=st.integers(2, 12),
    shuffle=st.booleans(),
    tail=st.sampled_from(["pad", "drop"]),
    spill=st.sampled_from(["<i4", "<u2"]),
    workers=st.integers(1, 3),
)
def test_concat_packed_by_runs_of_tasks_equals_packing_the_whole_stream(
    tmp_path_factory, monkeypatch, task_docs, L, shuffle, tail, spill, workers
):
    """Rows spanning tasks (tasks shorter than a row, offsets on a row boundary, empty tasks) are
    joined by the driver; every row keeps its stream index."""
    from dataprep.stage import DriverContext
    from dataprep.stats import StageStats
    from stages import _pack_jobs
    from stages.pack import PackParams

    monkeypatch.setattr(_pack_jobs, "CHUNK_TOKENS", 16)  # several chunks per task
    work = tmp_path_factory.mktemp("work")
    tasks = [make_docs(lengths, seed=i) for i, lengths in enumerate(task_docs)]
    task_ids = spill_tasks(work, tasks, spill)
    if not any(tasks):
        return
    params = PackParams(seq_length=L - 1, shuffle=shuffle, tail=tail, shuffle_buffer_mb=1)
    ctx = DriverContext(work, work, task_ids, 3, {}, StageStats(), workers=workers, quiet=True)
    sp = _pack_jobs.pack_split(ctx, 0, _pack_jobs.read_spills(work, task_ids)["train"], _settings(params))
    got = [read_bucket(b, L, "<i4") for b in sp.buckets if b.rows]
    index = np.concatenate([np.zeros(0, np.int64)] + [i for i, _ in got])
    rows = RowBatch.concat([r for _, r in got], L).select(np.argsort(index))
    whole = ConcatPacker(L, EOS, PAD, tail)
    want = run(whole, [chunk_of([d for docs in tasks for d in docs])])
    assert sorted(index.tolist()) == list(range(len(want)))
    assert np.array_equal(rows.tokens, want.tokens)
    assert np.array_equal(rows.seg_ends, want.seg_ends) and np.array_equal(rows.seg_counts, want.seg_counts)
    assert (sp.rows, sp.stats.rows, sp.stats.padding) == (len(want), whole.stats.rows, whole.stats.padding)
    assert (sp.stats.tail_dropped, sp.stats.eos_dropped) == (
        whole.stats.tail_dropped,
        whole.stats.eos_dropped,
    )


def test_a_spool_writer_run_again_replaces_its_files(tmp_path, monkeypatch):
    """A job retried after a partial run (e.g. its worker died) must not append to what the first
    attempt left behind."""
    monkeypatch.setattr(RowSpool, "FLUSH_BYTES", 1)
    rows = rows_numbered(40)
    for _ in range(2):
        spool = RowSpool(tmp_path, "t", 4, "<i4", Buckets(3, 2, 1 << 62))
        for lo in range(0, 40, 10):
            spool.add(rows.select(np.arange(lo, lo + 10)), np.arange(lo, lo + 10))
        buckets = merge_buckets([spool.close()])
    index = np.concatenate([read_bucket(b, 4, "<i4")[0] for b in buckets])
    assert sorted(index.tolist()) == list(range(40))


@pytest.mark.parametrize(
    ("size", "spill", "itemsize"), [(8192, "<u2", 2), (65536, "<u2", 2), (100_000, "<i4", 4)]
)
def test_tasks_spill_tokens_in_uint16_when_every_id_fits(tmp_path, size, spill, itemsize):
    from dataprep.document import Document
    from dataprep.stage import StageContext
    from dataprep.stats import StageStats
    from stages.pack import Pack, PackParams

    stage = Pack(PackParams())
    ctx = StageContext(StageStats(), tmp_path, "t00000", artifacts={"tokenizer": {"size": size}})
    docs = [Document(f"d{i}", "x", "s") for i in range(3)]
    for i, doc in enumerate(docs):
        doc.tokens = np.asarray([0, size - 1, 7 + i], dtype=np.int32)
    stage.begin_task(ctx)
    stage.compute(docs, ctx)
    stage.finish_compute(ctx)
    (train,) = read_spills(tmp_path, ["t00000"])["train"].tasks
    assert (train.dtype, train.documents, train.tokens, train.max_id) == (spill, 3, 12, size - 1)
    assert (tmp_path / "t00000.train.tokens").stat().st_size == 9 * itemsize
    chunk = next(task_chunks(tmp_path, "t00000", "train", False, spill))
    assert chunk.tokens.tolist() == [t for d in docs for t in d.tokens.tolist()]  # 65535 survives


def test_task_counts_are_read_typed_and_a_wrong_meta_json_is_named(tmp_path):
    task_ids = spill_tasks(tmp_path, [[np.arange(5)], [], [np.arange(3), np.arange(4)]], "<u2")
    spills = read_spills(tmp_path, task_ids)
    assert [(t.task_id, t.documents, t.tokens) for t in spills["train"].tasks] == [
        ("t00000", 1, 6),
        ("t00002", 2, 9),
    ]  # tasks without documents are left out; tokens count one EOS a document
    assert spills["validation"].tasks == [] and spills["train"].max_id == 999
    assert spills["train"].totals.doc_tokens == 12
    meta = tmp_path / "t00001.meta.json"
    good = json.loads(meta.read_text())
    for bad in (
        "{",
        json.dumps({**good, "validation": {}}),
        json.dumps({**good, "token_dtype": "<f4"}),
        json.dumps({**good, "train": {**good["train"], "documents": "1"}}),
        json.dumps({**good, "train": {**good["train"], "doc_tokens": -1}}),
    ):
        meta.write_text(bad)
        with pytest.raises(RuntimeError, match=r"t00001\.meta\.json"):
            read_spills(tmp_path, task_ids)
    meta.unlink()
    with pytest.raises(RuntimeError, match=r"t00001\.meta\.json"):
        read_spills(tmp_path, task_ids)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    task_docs=st.lists(st.lists(st.integers(1, 30), max_size=6), min_size=1, max_size=6),
    L=st.integers(2, 12),
    packing=st.sampled_from(["pad", "bestfit"]),
    long_docs=st.sampled_from(["split", "truncate"]),
    shuffle=st.booleans(),
)
def test_pad_and_bestfit_pack_each_task_on_its_own_and_keep_stream_order(
    tmp_path_factory, task_docs, L, packing, long_docs, shuffle
):
    """Every task is packed on its own (bestfit windows end with the task), then its rows are
    numbered after the rows of the tasks before it."""
    from dataprep.stage import DriverContext
    from dataprep.stats import StageStats
    from stages import _pack_jobs
    from stages.pack import PackParams

    work = tmp_path_factory.mktemp("work")
    tasks = [make_docs(lengths, seed=i) for i, lengths in enumerate(task_docs)]
    task_ids = spill_tasks(work, tasks, "<u2")
    if not any(tasks):
        return
    params = PackParams(
        seq_length=L - 1, packing=packing, long_docs=long_docs, shuffle=shuffle, bestfit_window_rows=2
    )
    ctx = DriverContext(work, work, task_ids, 3, {}, StageStats(), quiet=True)
    sp = _pack_jobs.pack_split(ctx, 0, _pack_jobs.read_spills(work, task_ids)["train"], _settings(params))
    got = [read_bucket(b, L, "<i4") for b in sp.buckets if b.rows]
    index = np.concatenate([np.zeros(0, np.int64)] + [i for i, _ in got])
    rows = RowBatch.concat([r for _, r in got], L).select(np.argsort(index))
    want, stats = [], PackStats()
    for docs in tasks:
        if docs:
            packer = params.packer.packer(L, EOS, PAD)
            want.append(run(packer, [chunk_of(docs)]))
            stats.add(packer.stats)
    want = RowBatch.concat(want, L)
    assert sorted(index.tolist()) == list(range(len(want)))
    assert np.array_equal(rows.tokens, want.tokens)
    assert np.array_equal(rows.seg_ends, want.seg_ends) and np.array_equal(rows.seg_counts, want.seg_counts)
    assert sp.stats == stats and sp.rows == stats.rows == len(want)
    assert not (work / "spool-train" / "tasks").exists() or not any(
        (work / "spool-train" / "tasks").iterdir()
    )
