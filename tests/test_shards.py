"""End to end: tokenize + pack + write, read back through dataprep.formats (and MindDataset)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_shards_support import corpus_texts, run_prepare, small_tokenizer, write_corpus

from dataprep.docstore import read_rejected
from dataprep.formats import mindrecord_files, open_bin
from dataprep.formats.mindrecord_shards import iter_mindrecord_file
from dataprep.tokenizers.load import load_tokenizer


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("shards")
    texts = corpus_texts()
    corpus = write_corpus(base / "corpus", texts)
    tok = small_tokenizer(base / "tok", texts)
    return base, texts, corpus, tok


def stream_of(out: Path) -> np.ndarray:
    s = open_bin(out)
    return np.concatenate([s.input_ids(i)[: s.actual_seq_len(i)[-1]] for i in range(len(s))])


def docs_between_eos(stream: np.ndarray, eos: int) -> list[np.ndarray]:
    ends = np.flatnonzero(stream == eos)
    return np.split(stream, ends + 1)[:-1]


def pack_stage(tok: Path, **pack) -> list:
    base = {"shuffle": False, "writers": ["bin", "mindrecord"], "equal_shards": False, "shards": 2}
    return [{"tokenize": {"tokenizer": str(tok)}}, {"pack": {**base, **pack}}]


@pytest.mark.e2e
@pytest.mark.parametrize(
    "pack",
    [
        {"packing": "concat", "seq_length": 64, "tail": "pad"},
        {"packing": "concat", "seq_length": 64, "tail": "drop"},
        {"packing": "pad", "seq_length": 64, "long_docs": "split"},
    ],
    ids=["concat-pad", "concat-drop", "pad-split"],
)
def test_round_trip_in_order(setup, pack):
    base, texts, corpus, tok = setup
    out = base / f"run-{pack['packing']}-{pack.get('tail', pack.get('long_docs'))}"
    manifest = run_prepare(corpus, out, pack_stage(tok, **pack))
    tokenizer = load_tokenizer(out / manifest["tokenizer"]["file"])
    eos = manifest["shards"]["eos_id"]
    docs = docs_between_eos(stream_of(out), eos)
    decoded = [tokenizer.decode(d[:-1]) for d in docs]
    train = manifest["shards"]["splits"]["train"]
    if pack.get("tail") == "drop":
        assert train["dropped"]["tail_tokens"] > 0
        assert decoded == texts[: len(decoded)]
        assert len(decoded) == train["documents"] - train["dropped"]["eos"]
        # a document is in the shards iff its EOS is: the others are dropped, in rejected/
        rejected = list(read_rejected(out / "rejected" / "pack.jsonl.zst"))
        assert [r["text"] for r in rejected] == texts[len(decoded) :] and train["dropped"]["eos"] > 0
        assert {r["reason"] for r in rejected} == {"tail_dropped"}
        assert "tokens end the last row kept" in rejected[0]["detail"]  # its head is in the shards
        stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
        assert stats["totals"]["kept"] == manifest["documents"]["kept"] == len(decoded)
        assert stats["totals"]["dropped_by_reason"]["pack/tail_dropped"] == len(rejected)
        assert stats["length_chars"]["kept"]["counts"] != stats["length_chars"]["read"]["counts"]
        assert sum(stats["length_chars"]["kept"]["counts"]) == len(decoded)
    else:
        assert decoded == texts
    assert train["tokens"] == train["doc_tokens"] + train["documents"] - train["dropped"]["tail_tokens"]
    assert train["eos_tokens"] == train["documents"] - train["dropped"]["eos"]
    # MindRecord holds the same rows, boundaries and (for pad) loss masks as the .bin files
    s = open_bin(out)
    k = 0
    for f in mindrecord_files(out):
        for batch, masks in iter_mindrecord_file(f, manifest["shards"]["row_length"]):
            for i in range(len(batch)):
                row = s[k]
                assert np.array_equal(batch.tokens[i], row["input_ids"])
                assert np.array_equal(batch.boundaries(i), row["actual_seq_len"])
                if masks is not None:
                    assert np.array_equal(masks[i], row["loss_mask"])
                k += 1
    assert k == len(s) == train["rows"]


@pytest.mark.e2e
def test_pad_truncate_keeps_prefix_and_eos(setup):
    base, texts, corpus, tok = setup
    out = base / "run-truncate"
    manifest = run_prepare(corpus, out, pack_stage(tok, packing="pad", seq_length=32, long_docs="truncate"))
    train = manifest["shards"]["splits"]["train"]
    tokenizer = load_tokenizer(out / manifest["tokenizer"]["file"])
    docs = docs_between_eos(stream_of(out), manifest["shards"]["eos_id"])
    assert len(docs) == len(texts) == train["rows"]
    assert train["dropped"]["truncated_tokens"] > 0 and train["packing"]["truncated_docs"] > 0
    for d, text in zip(docs, texts, strict=True):
        full = tokenizer.encode_batch([text])[0]
        assert np.array_equal(d[:-1], full[: len(d) - 1])
    assert "loss_mask" in manifest["shards"]["columns"]


@pytest.mark.e2e
def test_bestfit_keeps_fitting_documents_whole(setup):
    base, texts, corpus, tok = setup
    out = base / "run-bestfit"
    manifest = run_prepare(corpus, out, pack_stage(tok, packing="bestfit", seq_length=128))
    train = manifest["shards"]["splits"]["train"]
    tokenizer = load_tokenizer(out / manifest["tokenizer"]["file"])
    eos = manifest["shards"]["eos_id"]
    s = open_bin(out)
    whole: list[str] = []
    for i in range(len(s)):
        row, start = s[i], 0
        for end in row["actual_seq_len"]:
            piece = row["input_ids"][start:end]
            if piece[-1] == eos:
                whole.append(tokenizer.decode(piece[:-1]))
            start = int(end)
    fitting = [t for t, ids in zip(texts, tokenizer.encode_batch(texts), strict=True) if len(ids) + 1 <= 129]
    for t in fitting:
        assert t in whole
    assert train["eos_tokens"] == len(texts)
    assert train["tokens"] == train["doc_tokens"] + train["documents"]
    assert train["packing"]["rows_vs_concat"] >= 1.0
    assert train["packing"]["padding_fraction"] == pytest.approx(
        train["padding_tokens"] / (train["rows"] * 129), abs=1e-5
    )


@pytest.mark.e2e
def test_shuffled_validation_run_and_minddataset_shards(setup):
    base, texts, corpus, tok = setup
    out = base / "run-default"
    stages = [
        {"tokenize": {"tokenizer": str(tok)}},
        {"pack": {"seq_length": 32, "validation_fraction": 0.2, "shard_multiple": 4}},
    ]
    manifest = run_prepare(corpus, out, stages)
    splits = manifest["shards"]["splits"]
    train = splits["train"]
    assert splits["validation"]["documents"] > 0
    assert train["documents"] + splits["validation"]["documents"] == len(texts)
    mr = [f for f in train["files"] if f["format"] == "mindrecord"]
    equal = [f for f in mr if not f.get("remainder")]
    assert len(equal) % 4 == 0 and len({f["rows"] for f in equal}) == 1  # equal shards, multiple of 4
    assert mr[-1].get("remainder") and 0 < mr[-1]["rows"] < len(equal)  # the rows left over
    assert mr[-1]["path"] == "shards/mindrecord/train/train-remainder.mindrecord"
    assert (
        train["rows"]
        == sum(f["rows"] for f in mr)
        == math.ceil((train["doc_tokens"] + train["documents"]) / 33)
    )
    import mindspore.dataset as ds

    got = []
    for shard_id in range(3):  # an uneven split over ranks: MindDataset pads by repeating rows
        data = ds.MindDataset(
            mindrecord_files(out), columns_list=["input_ids"], num_shards=3, shard_id=shard_id, shuffle=False
        )
        rows = [r["input_ids"].tobytes() for r in data.create_dict_iterator(output_numpy=True, num_epochs=1)]
        assert len(rows) == math.ceil(train["rows"] / 3)
        got += rows
    s = open_bin(out)
    expected = [s.input_ids(i).tobytes() for i in range(len(s))]
    assert sorted(set(got)) == sorted(set(expected)) and len(expected) == train["rows"]
    # the same rows as without the shuffle, moved
    stages[1]["pack"]["shuffle"] = False
    run_prepare(corpus, base / "run-unshuffled", stages)
    u = open_bin(base / "run-unshuffled")
    in_order = [u.input_ids(i).tobytes() for i in range(len(u))]
    assert sorted(in_order) == sorted(expected) and in_order != expected


@pytest.mark.e2e
@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_same_shards_whatever_the_worker_count(setup, packing):
    base, _, corpus, tok = setup
    pack = {"seq_length": 48, "validation_fraction": 0.1, "packing": packing}
    stages = [{"tokenize": {"tokenizer": str(tok)}}, {"pack": pack}]
    digests = []
    for workers in (1, 2):
        m = run_prepare(corpus, base / f"det{packing}{workers}", stages, workers=workers)
        digests.append(
            [
                (f["path"], f["sha256"], f["index"]["sha256"])
                for s in m["shards"]["splits"].values()
                for f in s["files"]
            ]
        )
    assert digests[0] == digests[1]
    assert json.loads((base / f"det{packing}1" / "manifest.json").read_text())["shards"]["dtype"] == "uint16"


@pytest.mark.parametrize("with_loss_mask", [False, True])
def test_mindrecord_bytes_do_not_depend_on_the_frozen_schema(tmp_path, monkeypatch, with_loss_mask):
    from dataprep.formats import mindrecord
    from dataprep.formats.rows import RowBatch

    rng = np.random.default_rng(0)
    counts = rng.integers(1, 4, size=300).astype(np.int32)
    ends = np.concatenate([np.sort(rng.choice(np.arange(1, 33), c, replace=False)) for c in counts])
    batch = RowBatch(rng.integers(0, 1000, size=(300, 33)), ends, counts)

    def write(directory: Path) -> bytes:
        directory.mkdir()
        f = mindrecord.MindRecordFile(directory / "rows.mindrecord", with_loss_mask)
        f.write(batch.select(np.arange(100)))
        f.write(batch.select(np.arange(100, 300)))
        f.commit()
        return (directory / "rows.mindrecord").read_bytes()

    frozen = write(tmp_path / "frozen")
    monkeypatch.setattr(mindrecord, "_freeze_schema", lambda writer: None)
    assert write(tmp_path / "asked") == frozen


@pytest.mark.parametrize("with_loss_mask", [False, True])
@pytest.mark.parametrize("with_source_id", [False, True])
def test_mindrecord_rows_built_per_batch_are_the_bytes_file_writer_writes(
    tmp_path, monkeypatch, with_loss_mask, with_source_id
):
    """Rows handed to MindSpore's native writer as whole-batch blobs give the .mindrecord and .db
    bytes of FileWriter.write_raw_data's row-by-row path (boundaries at or past seq_length
    included)."""
    from dataprep.formats import mindrecord
    from dataprep.formats.rows import RowBatch

    rng = np.random.default_rng(1)
    n, row_length = 1500, 33
    counts = rng.integers(1, 6, size=n).astype(np.int32)
    ends = np.concatenate(
        [np.sort(rng.choice(np.arange(1, row_length + 2), c, replace=False)) for c in counts]
    )
    sources = rng.integers(0, 3, size=n).astype(np.int32) if with_source_id else None
    batch = RowBatch(rng.integers(0, 1000, size=(n, row_length)), ends, counts, sources)

    def write(directory: Path, per_batch: bool) -> tuple[bytes, bytes]:
        directory.mkdir()
        f = mindrecord.MindRecordFile(directory / "rows.mindrecord", with_loss_mask, with_source_id)
        assert (f._blobs is not None) == per_batch  # the MindSpore this runs on has what it needs
        f.write(batch.select(np.arange(100)))
        f.write(batch.select(np.arange(100, n)))  # more than WRITE_BATCH_ROWS
        f.commit()
        return (directory / "rows.mindrecord").read_bytes(), (directory / "rows.mindrecord.db").read_bytes()

    per_batch = write(tmp_path / "blobs", True)
    monkeypatch.setattr(mindrecord._BlobWriter, "of", classmethod(lambda cls, *a: None))
    assert write(tmp_path / "rows", False) == per_batch


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(min_value=1, max_value=300), min_size=1, max_size=140), max_size=6))
def test_compressed_eod_of_a_batch_is_that_of_each_row(rows: list[list[int]]) -> None:
    from dataprep.formats.mindrecord import compressed_eod, compressed_eods

    seq_length = 200
    ends = np.array([e for r in rows for e in sorted(r)], dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    try:
        expected = [
            compressed_eod(ends[offsets[i] : offsets[i + 1]], seq_length, "f") for i in range(len(rows))
        ]
    except ValueError as e:
        with pytest.raises(ValueError, match=re.escape(str(e))):
            compressed_eods(ends, offsets, seq_length, "f")
        return
    got = compressed_eods(ends, offsets, seq_length, "f")
    assert got.shape == (len(rows), 128) and got.dtype == np.int32
    assert [list(r) for r in got] == [list(r) for r in expected]


@pytest.mark.e2e
def test_a_split_too_short_for_one_row_gets_no_files(setup):
    """tail: drop with fewer validation tokens than a row: the validation split is dropped whole
    (counted), the train split is written, and the run verifies."""
    base, _, corpus, tok = setup
    stages = pack_stage(tok, packing="concat", seq_length=1024, tail="drop", validation_fraction=0.02)
    m = run_prepare(corpus, base / "short-validation", stages, workers=2)
    validation = m["shards"]["splits"]["validation"]
    assert validation["documents"] > 0 and validation["rows"] == 0 and validation["files"] == []
    assert validation["dropped"]["tail_tokens"] == validation["doc_tokens"] + validation["documents"]
    assert m["shards"]["splits"]["train"]["rows"] > 0
    dropped = list(read_rejected(base / "short-validation" / "rejected" / "pack.jsonl.zst"))
    assert {r["reason"] for r in dropped} == {"tail_dropped"}
    assert sum(r["extra"]["split"] == "validation" for r in dropped) == validation["documents"]
    assert m["documents"]["kept"] == m["shards"]["splits"]["train"]["eos_tokens"]
    from dataprep.formats.verify import verify

    assert verify(base / "short-validation") == []
