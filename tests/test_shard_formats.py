"""The shard-format registry: a new format is one registry entry (writer, reader, training rows),
and then pack writes it, verify checks it (against .bin too), inspect shows it and training reads
it, without any of them naming it; the typed manifest reads and writes manifest.json byte for byte."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import SMALL_RECIPE, jsonl_bytes, run
from dataprep.formats.manifest import Manifest
from dataprep.formats.registry import (
    FileMeta,
    ShardFormat,
    ShardWriter,
    all_formats,
    format_of_file,
    get_format,
    register_format,
)
from dataprep.formats.rows import RowBatch, loss_mask_from_boundaries
from dataprep.io import file_sha256


class NpzShardWriter(ShardWriter):
    """A toy format: each shard file is one .npz of tokens, boundaries and counts."""

    name = "toy_npz"

    def open_file(self, split: str, k: int) -> Any:
        return {"split": split, "k": k, "batches": []}

    def write(self, handle: Any, rows: RowBatch) -> None:
        handle["batches"].append(rows)

    def close_file(self, handle: Any) -> dict[str, Any]:
        rows = RowBatch.concat(handle["batches"], self.meta.row_length)
        path = Path(self.out_dir) / "npz" / f"{self.meta.stem(handle['split'], handle['k'])}.npz"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            np.savez(f, tokens=rows.tokens.astype(np.int32), ends=rows.seg_ends, counts=rows.seg_counts)
        return {
            "path": f"shards/npz/{path.name}",
            "format": self.name,
            "split": handle["split"],
            "rows": len(rows),
            "tokens": int(rows.real_tokens.sum()),
            "bytes": path.stat().st_size,
            "sha256": file_sha256(path),
        }


def read_npz(data: Path, index: Path | None, meta: FileMeta) -> Iterator[tuple[RowBatch, np.ndarray | None]]:
    with np.load(data) as f:
        yield RowBatch(f["tokens"], f["ends"], f["counts"]), None


class NpzRows:
    columns = ("input_ids", "actual_seq_len", "loss_mask")

    def __init__(self, split: Any):
        batches = [next(read_npz(p, None, FileMeta(split.row_length, "int32")))[0] for p in split.files]
        self.rows = RowBatch.concat(batches, split.row_length)

    def __len__(self) -> int:
        return len(self.rows)

    def batches(self, indices: np.ndarray, batch_size: int) -> Iterator[dict[str, Any]]:
        for k in range(0, len(indices) - batch_size + 1, batch_size):
            idx = indices[k : k + batch_size]
            asl = [self.rows.boundaries(int(i)) for i in idx]
            yield {
                "input_ids": self.rows.tokens[idx],
                "actual_seq_len": asl,
                "loss_mask": np.stack([loss_mask_from_boundaries(a, self.rows.row_length) for a in asl]),
                "row_ids": idx,
            }


NPZ = register_format(
    ShardFormat(
        name="toy_npz",
        writer=NpzShardWriter,
        suffix=".npz",
        companions=(),
        read_file=read_npz,
        training_rows=NpzRows,
        title="npz",
    )
)


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run (one worker: the toy format is registered in this process only) writing the toy
    format next to .bin."""
    root = tmp_path_factory.mktemp("formats")
    poem = "春眠不觉晓，处处闻啼鸟。"
    docs = [{"id": f"d{i}", "text": f"第{i}篇。" + poem * (1 + i % 7)} for i in range(300)]
    (root / "c.jsonl").write_bytes(jsonl_bytes(docs))
    recipe = json.loads(json.dumps(SMALL_RECIPE))
    recipe["stages"][-1]["pack"].update({"seq_length": 32, "writers": ["toy_npz", "bin"]})
    run([root / "c.jsonl"], root / "out", recipe)
    return root / "out"


def test_the_builtin_formats_and_a_new_one_are_registry_entries() -> None:
    assert {"bin", "mindrecord", "toy_npz"} <= {f.name for f in all_formats()}
    assert format_of_file(Path("x/train-00000.idx")) == (get_format("bin"), Path("x/train-00000.bin"))
    assert format_of_file(Path("x/a.mindrecord.db"))[1] == Path("x/a.mindrecord")
    with pytest.raises(ValueError, match="unknown shard format 'nope'"):
        get_format("nope")


@pytest.mark.e2e
def test_pack_writes_a_registered_format_and_verify_checks_it_against_bin(out: Path) -> None:
    from dataprep.formats.verify import verify

    manifest = json.loads((out / "manifest.json").read_text())
    files = manifest["shards"]["splits"]["train"]["files"]
    assert [f["format"] for f in files] == ["toy_npz"] * (len(files) // 2) + ["bin"] * (len(files) // 2)
    assert verify(out) == []
    # a changed token in a toy file, its manifest entry updated: only the formats now differ
    raw = (out / "manifest.json").read_bytes()
    first = out / files[0]["path"]
    kept = first.read_bytes()
    with np.load(first) as f:
        tokens, ends, counts = f["tokens"].copy(), f["ends"], f["counts"]
    tokens[0, 1] = (tokens[0, 1] + 1) % 400
    with open(first, "wb") as fh:
        np.savez(fh, tokens=tokens, ends=ends, counts=counts)
    files[0].update(bytes=first.stat().st_size, sha256=file_sha256(first))
    (out / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False, indent=1))
    try:
        assert verify(out) == ["train: the npz and .bin files differ in input_ids"]
    finally:
        first.write_bytes(kept)
        (out / "manifest.json").write_bytes(raw)
    assert verify(out) == []


@pytest.mark.e2e
def test_inspect_and_training_read_a_registered_format(out: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dataprep.formats.inspect import inspect_shard
    from dataprep.formats.readers_for_training import open_split

    assert inspect_shard(out, rows=1, as_json=True, fmt="toy_npz") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["shard"]["format"] == "toy_npz" and shown["rows"][0]["segments"]
    npz, bins = open_split(out, "train", "toy_npz"), open_split(out, "train", "bin")
    rows = get_format(npz.format).training_rows(npz)
    reference = get_format(bins.format).training_rows(bins)
    assert len(rows) == len(reference) == npz.rows
    idx = np.arange(len(rows))[::-1]
    for got, want in zip(rows.batches(idx, 4), reference.batches(idx, 4), strict=True):
        assert np.array_equal(got["input_ids"], want["input_ids"])
        pairs = zip(got["actual_seq_len"], want["actual_seq_len"], strict=True)
        assert all(np.array_equal(a, b) for a, b in pairs)


@pytest.mark.e2e
def test_the_typed_manifest_writes_what_it_reads_byte_for_byte(out: Path) -> None:
    raw = (out / "manifest.json").read_text(encoding="utf-8")
    manifest = Manifest.from_json(json.loads(raw))
    shards = manifest.shards
    assert shards is not None and shards.row_length == 33 and manifest.schema_version == 1
    manifest.parts["shards"] = shards  # through the dataclasses and back
    assert json.dumps(manifest.to_json(), ensure_ascii=False, indent=1) == raw
    train = shards.splits["train"]
    assert sum(f.rows or 0 for f in train.files_of("bin")) == train.rows
    assert train.formats() == ["toy_npz", "bin"]
