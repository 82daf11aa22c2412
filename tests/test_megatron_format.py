"""The ``megatron`` shard format: the bytes of Megatron-core's own IndexedDatasetBuilder
(tests/data/megatron/, made by bench/megatron_fixtures.py), one sequence per kept document,
verify, inspect, the same bytes at 1 and 2 workers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import SMALL_RECIPE, jsonl_bytes, run
from dataprep.formats.megatron_shards import MegatronShardWriter, megatron_dtype, read_sequences
from dataprep.formats.registry import ShardMeta, format_of_file, get_format
from dataprep.formats.rows import DocumentBatch
from dataprep.io import file_sha256
from dataprep.stage import RecipeError

FIXTURES = Path(__file__).parent / "data" / "megatron"
CASES = json.loads((FIXTURES / "tokens.json").read_text())


def _write(tmp: Path, case: dict[str, Any], split: str, batches: list[list[list[int]]]) -> dict[str, Any]:
    meta = ShardMeta(row_length=1, dtype="int32", vocab_size=case["vocab_size"], eos_id=case["eos_id"])
    writer = MegatronShardWriter(tmp / "shards", meta)
    writer.prepare()
    handle = writer.open_file(split, 0)
    for docs in batches:
        flat = np.asarray([t for d in docs for t in d], dtype=np.int32)
        writer.write(handle, DocumentBatch(flat, np.asarray([len(d) for d in docs])))
    return writer.close_file(handle)


@pytest.mark.parametrize("name", ["uint16", "int32"])
def test_the_writer_writes_the_bytes_of_megatrons_indexed_dataset_builder(tmp_path: Path, name: str) -> None:
    case = CASES[name]
    docs = case["documents"]
    entry = _write(tmp_path, case, name, [docs[:2], [], docs[2:]])  # batches cut anywhere
    ours = tmp_path / "shards" / "megatron"
    for suffix in (".bin", ".idx"):
        got = (ours / f"{name}_text_document{suffix}").read_bytes()
        assert got == (FIXTURES / f"{name}_text_document{suffix}").read_bytes()
    assert megatron_dtype(case["vocab_size"]) == name
    assert entry["documents"] == len(docs) and entry["tokens"] == sum(len(d) + 1 for d in docs)
    assert entry["sha256"] == file_sha256(ours / f"{name}_text_document.bin")
    # and read back: one sequence per document, each ending with the EOS
    tokens, sizes = next(read_sequences(FIXTURES / f"{name}_text_document.bin", None))
    assert sizes.tolist() == [len(d) + 1 for d in docs]
    assert tokens.tolist() == [t for d in docs for t in [*d, case["eos_id"]]]


def test_the_dtype_is_megatrons_optimal_dtype_and_a_vocabulary_beyond_int32_is_refused(
    tmp_path: Path,
) -> None:
    assert megatron_dtype(65499) == "uint16"  # DType.optimal_dtype: cardinality < 65500
    assert megatron_dtype(65500) == "int32"
    assert megatron_dtype(1 << 31) == "int32"  # ids 0 .. 2**31 - 1 all fit
    writer = MegatronShardWriter(
        tmp_path, ShardMeta(row_length=1, dtype="int32", vocab_size=(1 << 31) + 1, eos_id=2)
    )
    with pytest.raises(RecipeError, match=r"vocabulary of 2147483649 ids does not fit .* int32"):
        writer.prepare()
    assert not (tmp_path / "megatron").exists()


def test_a_megatron_file_is_found_by_its_name() -> None:
    fmt, data = format_of_file(Path("o/train_text_document.idx"))
    assert fmt.name == "megatron" and data == Path("o/train_text_document.bin")
    assert format_of_file(Path("o/train-00000.bin"))[0].name == "bin"
    assert get_format("megatron").takes == "documents" and get_format("bin").takes == "rows"


def _corpus(root: Path) -> Path:
    poem = "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。"
    docs = [{"id": f"d{i}", "text": f"第{i}篇。" + poem * (1 + i % 9)} for i in range(400)]
    path = root / "c.jsonl"
    path.write_bytes(jsonl_bytes(docs))
    return path


def _recipe(**pack: Any) -> dict[str, Any]:
    recipe = json.loads(json.dumps(SMALL_RECIPE))
    recipe["stages"][-1]["pack"].update(
        {"seq_length": 48, "writers": ["bin", "megatron"], "validation_fraction": 0.1, **pack}
    )
    return recipe


@pytest.fixture(scope="module")
def outs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """The same run at 1 and 2 workers."""
    root = tmp_path_factory.mktemp("megatron")
    corpus = _corpus(root)
    return {w: (run([corpus], root / f"w{w}", _recipe(), workers=w), root / f"w{w}")[1] for w in (1, 2)}


@pytest.mark.e2e
def test_one_and_two_workers_write_the_same_megatron_bytes(outs: dict[int, Path]) -> None:
    names = sorted(p.name for p in (outs[1] / "shards" / "megatron").iterdir())
    assert names == [
        "train_text_document.bin",
        "train_text_document.idx",
        "validation_text_document.bin",
        "validation_text_document.idx",
    ]
    for name in names:
        one = (outs[1] / "shards" / "megatron" / name).read_bytes()
        assert one == (outs[2] / "shards" / "megatron" / name).read_bytes(), name


def _sequences(out: Path, split: str) -> list[list[int]]:
    data = out / "shards" / "megatron" / f"{split}_text_document.bin"
    seqs: list[list[int]] = []
    for tokens, sizes in read_sequences(data, None):
        seqs += [s.tolist() for s in np.split(tokens, np.cumsum(sizes)[:-1])]
    return seqs


@pytest.mark.e2e
def test_one_sequence_per_kept_document_in_the_packers_order(outs: dict[int, Path]) -> None:
    out = outs[1]
    manifest = json.loads((out / "manifest.json").read_text())
    shards = manifest["shards"]
    eos = shards["eos_id"]
    total = 0
    for split, info in shards["splits"].items():
        seqs = _sequences(out, split)
        (entry,) = [f for f in info["files"] if f["format"] == "megatron"]
        assert len(seqs) == entry["documents"] == info["documents"] - info["dropped"]["eos"] > 0
        assert all(s[-1] == eos and eos not in s[:-1] for s in seqs)
        assert sum(map(len, seqs)) == entry["tokens"] == info["doc_tokens"] + info["documents"]
        total += len(seqs)
    assert total == manifest["documents"]["kept"]


@pytest.mark.e2e
def test_documents_dropped_with_the_tail_are_not_written_and_the_rest_are_the_rows_stream(
    tmp_path: Path,
) -> None:
    """concat, tail: drop, no shuffle: the rows are the stream of documents cut every row, so the
    megatron sequences are those rows' tokens, less the documents whose EOS fell in the tail."""
    out = tmp_path / "out"
    run([_corpus(tmp_path)], out, _recipe(tail="drop", shuffle=False, validation_fraction=0.0))
    info = json.loads((out / "manifest.json").read_text())["shards"]["splits"]["train"]
    assert info["dropped"]["eos"] > 0  # the recipe does drop a tail
    seqs = _sequences(out, "train")
    assert len(seqs) == info["documents"] - info["dropped"]["eos"]
    rows = np.concatenate(
        [np.fromfile(out / f["path"], dtype="<u2") for f in info["files"] if f["format"] == "bin"]
    )
    stream = [t for s in seqs for t in s]
    assert rows[: len(stream)].tolist() == stream  # the kept documents open the rows, in order
    assert len(rows) - len(stream) < info["dropped"]["tail_tokens"] + 48 + 1


@pytest.mark.e2e
def test_verify_checks_the_megatron_files(outs: dict[int, Path], tmp_path: Path) -> None:
    import shutil

    from dataprep.formats.verify import verify

    out = tmp_path / "copy"
    shutil.copytree(outs[1], out)
    assert verify(out) == []
    data = out / "shards" / "megatron" / "train_text_document.bin"
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0x01  # the last document's EOS (uint16, little-endian) changed
    data.write_bytes(bytes(raw))
    found = verify(out)
    assert found == [
        "shards/megatron/train_text_document.bin: sha256 differs from the manifest (the file was changed "
        "or corrupted)"
    ]
    # the manifest "updated" to the corrupted bytes: the format's own checks still catch it
    manifest = json.loads((out / "manifest.json").read_text())
    (entry,) = [f for f in manifest["shards"]["splits"]["train"]["files"] if f["format"] == "megatron"]
    entry["sha256"] = file_sha256(data)
    (out / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False, indent=1))
    found = verify(out)
    assert "shards/megatron/train_text_document.bin: 1 sequences do not end with EOS 2" in found
    assert any("EOS in" in f for f in found)
    # a truncated .bin: the index no longer describes it
    data.write_bytes(bytes(raw[:-2]))
    entry.update(bytes=len(raw) - 2, sha256=file_sha256(data))
    (out / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False, indent=1))
    assert any("unreadable" in f and "the index describes" in f for f in verify(out))


@pytest.mark.e2e
def test_inspect_shows_the_sequences(outs: dict[int, Path], capsys: pytest.CaptureFixture[str]) -> None:
    from dataprep.formats.inspect import inspect_shard

    out = outs[1]
    assert inspect_shard(out, rows=2, fmt="megatron") == 0
    text = capsys.readouterr().out
    assert "(megatron, uint16, one sequence per document)" in text
    assert "── sequence 1" in text and text.count("⟨EOS⟩") == 2
    idx = out / "shards" / "megatron" / "validation_text_document.idx"
    assert inspect_shard(idx, row=0, as_json=True) == 0
    shown = json.loads(capsys.readouterr().out)
    info = json.loads((out / "manifest.json").read_text())["shards"]["splits"]["validation"]
    assert shown["shard"]["sequences"] == shown["shard"]["ending_with_eos"] == info["documents"]
    assert shown["shard"]["dtype"] == "uint16" and shown["sequences"][0]["eos"]
    assert shown["sequences"][0]["text"].startswith("第")


@pytest.mark.e2e
def test_training_does_not_pick_the_megatron_files(outs: dict[int, Path]) -> None:
    from dataprep.formats.readers_for_training import ShardError, open_split

    assert open_split(outs[1], "train").format == "bin"  # auto
    split = open_split(outs[1], "train", "megatron")
    with pytest.raises(ShardError, match="for Megatron-LM's GPTDataset"):
        get_format("megatron").training_rows(split)


@pytest.mark.e2e
def test_documents_stay_whole_where_rows_truncate_them(tmp_path: Path) -> None:
    """pad, long_docs: truncate: the rows lose the documents' tails, the megatron files do not."""
    from dataprep.formats.verify import verify

    out = tmp_path / "out"
    run([_corpus(tmp_path)], out, _recipe(packing="pad", long_docs="truncate", seq_length=16))
    info = json.loads((out / "manifest.json").read_text())["shards"]["splits"]["train"]
    assert info["dropped"]["truncated_tokens"] > 0
    (entry,) = [f for f in info["files"] if f["format"] == "megatron"]
    assert entry["documents"] == info["documents"]
    assert entry["tokens"] == info["doc_tokens"] + info["documents"] > info["tokens"]
    assert verify(out) == []
