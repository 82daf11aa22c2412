"""Training reads only verified data: each shard file's size and sha256 are checked against the
manifest before its rows are first read, every batch's token ids against vocab_size; a failure
names the file and row and says to run `dataprep verify`. An intact run is unaffected."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from conftest import SAMPLE, SMALL_RECIPE, run
from dataprep.formats.readers_for_training import CheckedRows, ShardCheck, ShardError, SplitFiles, open_split
from dataprep.formats.registry import get_format
from dataprep.io import file_sha256

pytestmark = pytest.mark.e2e  # every case prepares and trains


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real output: 8 train shards of 1722 rows in each format, vocab_size 400."""
    out = tmp_path_factory.mktemp("verified") / "out"
    run([SAMPLE / "reviews"], out, SMALL_RECIPE)
    return out


def linked_copy(src: Path, dst: Path) -> Path:
    """``dst`` with manifest.json copied and every other file a symlink to ``src``'s (damage a
    file only after :func:`own`)."""
    for p in src.rglob("*"):
        if p.is_file():
            target = dst / p.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            if p.name == "manifest.json":
                target.write_bytes(p.read_bytes())
            else:
                target.symlink_to(p)
    return dst


def own(path: Path) -> Path:
    """Replace the symlink ``path`` by a copy of its file."""
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data)
    return path


def flip_low_bit(path: Path, offset: int) -> None:
    """Flip the lowest bit of the byte at ``offset`` (a token's low byte: the id stays in range)."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 1
    path.write_bytes(bytes(data))


def rehash_in_manifest(out: Path, rel: str) -> None:
    """Record ``rel``'s present sha256 in the manifest (so that only the id check can object)."""
    manifest = json.loads((out / "manifest.json").read_text())
    for split in manifest["shards"]["splits"].values():
        for f in split["files"]:
            if f["path"] == rel:
                f["sha256"] = file_sha256(out / rel)
    (out / "manifest.json").write_text(json.dumps(manifest))


def checked(out: Path, fmt: str, background: bool = False, hashes: bool = True) -> CheckedRows:
    split = open_split(out, "train", fmt)
    check = ShardCheck(split, hashes=hashes)
    check.check_sizes()
    if background:
        check.start()
    return CheckedRows(get_format(fmt).training_rows(split), split, check)


def rows_of_file(split: SplitFiles, k: int) -> np.ndarray:
    starts = np.cumsum([0] + [e.rows for e in split.entries])
    return np.arange(starts[k], starts[k + 1], dtype=np.int64)


@pytest.mark.parametrize("fmt", ["bin", "mindrecord"])
def test_intact_shards_read_the_same_rows_through_the_checks(prepared: Path, fmt: str) -> None:
    rows = checked(prepared, fmt, background=True)
    plain = get_format(fmt).training_rows(open_split(prepared, "train", fmt))
    idx = np.random.default_rng(0).permutation(len(plain))[:256]
    for a, b in zip(rows.batches(idx, 64), plain.batches(idx, 64), strict=True):
        np.testing.assert_array_equal(a["input_ids"], b["input_ids"])
        np.testing.assert_array_equal(a["row_ids"], b["row_ids"])
    assert rows.check.failed() is None


def test_a_flipped_byte_stops_reading_before_the_first_row_of_its_file(
    prepared: Path, tmp_path: Path
) -> None:
    """.bin files are checked one by one: the rows of intact files still read."""
    out = linked_copy(prepared, tmp_path / "out")
    split = open_split(out, "train", "bin")
    damaged = own(split.files[3])
    row_bytes = split.row_length * 2  # uint16
    flip_low_bit(damaged, 5 * row_bytes + 8)  # row 5 of the file, token 4
    rows = checked(out, "bin")
    assert sum(len(b["input_ids"]) for b in rows.batches(rows_of_file(split, 0), 41)) == 1722
    mixed = np.concatenate([rows_of_file(split, 1)[:10], rows_of_file(split, 3)[:10]])
    with pytest.raises(ShardError) as e:
        list(rows.batches(mixed, 20))
    msg = str(e.value)
    assert f"{damaged}: sha256 differs from {out}/manifest.json" in msg
    assert f"row 0 of {damaged} (row {3 * 1722} of split 'train')" in msg
    assert f"`dataprep verify {out}`" in msg and "\n" not in msg


def test_a_damaged_mindrecord_file_stops_the_first_batch(prepared: Path, tmp_path: Path) -> None:
    """MindDataset reads all files of a split as one: all are checked before the first batch."""
    out = linked_copy(prepared, tmp_path / "out")
    split = open_split(out, "train", "mindrecord")
    damaged = own(split.files[6])
    flip_low_bit(damaged, damaged.stat().st_size - 100)
    rows = checked(out, "mindrecord")
    with pytest.raises(ShardError, match=r"train-00006\.mindrecord: sha256 differs") as e:
        next(rows.batches(rows_of_file(split, 0)[:8], 8))
    assert "`dataprep verify" in str(e.value)


def test_a_damaged_file_found_in_the_background_stops_the_next_batch(prepared: Path, tmp_path: Path) -> None:
    out = linked_copy(prepared, tmp_path / "out")
    split = open_split(out, "train", "bin")
    flip_low_bit(own(split.files[7]), 100)
    rows = checked(out, "bin", background=True)
    rows.check.wait()
    assert rows.check.failed() == 7
    with pytest.raises(ShardError, match=r"train-00007\.bin: sha256 differs"):
        next(rows.batches(rows_of_file(split, 0)[:8], 8))


@pytest.mark.parametrize("fmt", ["bin", "mindrecord"])
def test_a_truncated_file_fails_the_size_check_before_anything_opens_it(
    prepared: Path, tmp_path: Path, fmt: str
) -> None:
    out = linked_copy(prepared, tmp_path / "out")
    split = open_split(out, "train", fmt)
    damaged = own(split.files[2])
    size = damaged.stat().st_size
    damaged.write_bytes(damaged.read_bytes()[: size - 130])
    with pytest.raises(ShardError) as e:
        ShardCheck(split, hashes=False).check_sizes()
    msg = str(e.value)
    assert f"{damaged}: {size - 130} bytes, {out}/manifest.json says {size} (truncated" in msg
    assert f"`dataprep verify {out}`" in msg


@pytest.mark.parametrize("hashes", [True, False])
def test_a_token_id_beyond_the_vocabulary_is_caught_naming_file_and_row(
    prepared: Path, tmp_path: Path, hashes: bool
) -> None:
    out = linked_copy(prepared, tmp_path / "out")
    split = open_split(out, "train", "bin")
    damaged = own(split.files[4])
    tokens = np.fromfile(damaged, dtype="<u2").reshape(-1, split.row_length)
    tokens[7, 10] = 400  # == vocab_size
    tokens.tofile(damaged)
    rehash_in_manifest(out, "shards/bin/train-00004.bin")
    rows = checked(out, "bin", hashes=hashes)
    with pytest.raises(ShardError) as e:
        list(rows.batches(rows_of_file(split, 4), 41))
    msg = str(e.value)
    assert f"row 7 of {damaged} (row {4 * 1722 + 7} of split 'train')" in msg
    assert "token id 400 at position 10 is outside [0, 400)" in msg
    assert f"`dataprep verify {out}`" in msg


# ---------------------------------------------------------------- in training

TINY = {
    "seed": 3,
    "model": {"hidden_size": 32, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2},
    "train": {"steps": 3, "batch_size": 4, "mode": "pynative", "data_format": "bin"},
}


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pretrain.synthetic_data import write_dataset

    return write_dataset(tmp_path_factory.mktemp("synthetic"), rows=40, seq_length=16, vocab_size=64)


def train(tmp: Path, data: Path, capsys: pytest.CaptureFixture, *extra: str) -> tuple[int, str, Path]:
    from pretrain.run import main

    tmp.mkdir(exist_ok=True)
    cfg = tmp / "c.yaml"
    cfg.write_text(yaml.safe_dump(TINY))
    out = tmp / "train-out"
    code = main(["--config", str(cfg), "--data", str(data), "--output", str(out), *extra])
    captured = capsys.readouterr()
    return code, captured.out + captured.err, out


def losses(out: Path) -> list[float]:
    return [json.loads(x)["loss"] for x in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("damage", ["flipped_byte", "truncated", "id_beyond_vocab"])
def test_training_on_a_damaged_shard_stops_with_one_line_naming_file_and_verify(
    synthetic: Path, tmp_path: Path, capsys: pytest.CaptureFixture, damage: str
) -> None:
    from pretrain.data import epoch_order

    first = int(epoch_order(40, 0, TINY["seed"], True)[0])  # the first row step 1 reads
    data = linked_copy(synthetic, tmp_path / "data")
    shard = own(data / "shards" / "bin" / "train-00000.bin")
    tokens = np.fromfile(shard, dtype="<i4").reshape(-1, 17)
    if damage == "flipped_byte":
        flip_low_bit(shard, 17 * 4 * first)
    elif damage == "truncated":
        shard.write_bytes(shard.read_bytes()[:-4])
    else:
        tokens[first, 3] = 64  # == vocab_size
        tokens.tofile(shard)
        rehash_in_manifest(data, "shards/bin/train-00000.bin")
    code, text, out = train(tmp_path, data, capsys)
    error = [ln for ln in text.splitlines() if ln.startswith("error:")]
    assert code == 1 and len(error) == 1, text
    assert str(shard) in error[0] and f"`dataprep verify {data}`" in error[0]
    expected: dict[str, Any] = {
        "flipped_byte": "sha256 differs",
        "truncated": "bytes, ",
        "id_beyond_vocab": f"row {first} of {shard} (row {first} of split 'train'): token id 64 at",
    }
    assert expected[damage] in error[0]
    if damage == "flipped_byte":
        assert "found before reading row" in error[0]
    assert not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text()  # no step trained


def test_an_intact_run_is_unaffected_and_a_skipped_check_is_logged(
    synthetic: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    code, text, out = train(tmp_path / "a", synthetic, capsys)
    assert code == 0 and "skipped" not in text
    code2, text2, out2 = train(tmp_path / "b", synthetic, capsys, "--no-verify-shards")
    assert code2 == 0 and "shards: sha256 check against manifest.json skipped" in text2
    assert losses(out) == losses(out2) and len(losses(out)) == 3
