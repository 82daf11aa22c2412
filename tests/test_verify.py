"""`dataprep verify` passes on a fresh run and catches a flipped byte, a missing file and a wrong total."""

from __future__ import annotations

import json
import shutil

import pytest
from test_shards_support import corpus_texts, run_prepare, small_tokenizer, write_corpus

from dataprep.cli import main

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    base = tmp_path_factory.mktemp("verify")
    texts = corpus_texts(60, 40)
    corpus = write_corpus(base / "corpus", texts)
    tok = small_tokenizer(base / "tok", texts)
    out = base / "out"
    stages = [{"tokenize": {"tokenizer": str(tok)}}, {"pack": {"seq_length": 32, "validation_fraction": 0.2}}]
    run_prepare(corpus, out, stages)
    return out


@pytest.fixture
def copy(run, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(run, dst)
    return dst


def test_fresh_run_verifies(run, capsys):
    assert main(["verify", str(run), "--quiet"]) == 0
    assert "ok:" in capsys.readouterr().out


def test_flipped_byte_in_a_bin_shard(copy, capsys):
    target = copy / "shards" / "bin" / "train-00001.bin"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    assert main(["verify", str(copy), "--quiet"]) == 1
    assert "shards/bin/train-00001.bin: sha256 differs" in capsys.readouterr().err


def test_flipped_byte_in_a_mindrecord_shard(copy, capsys):
    manifest = json.loads((copy / "manifest.json").read_text())
    entry = next(f for f in manifest["shards"]["splits"]["train"]["files"] if f["format"] == "mindrecord")
    target = copy / entry["path"]
    data = bytearray(target.read_bytes())
    data[-5000] ^= 0x10
    target.write_bytes(bytes(data))
    assert main(["verify", str(copy), "--quiet"]) == 1
    assert f"{entry['path']}: sha256 differs" in capsys.readouterr().err


def test_missing_file(copy, capsys):
    (copy / "shards" / "bin" / "validation-00000.idx").unlink()
    assert main(["verify", str(copy), "--quiet"]) == 1
    assert "shards/bin/validation-00000.idx: missing" in capsys.readouterr().err


def test_wrong_total_in_the_manifest(copy, capsys):
    path = copy / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["shards"]["splits"]["train"]["tokens"] += 1
    path.write_text(json.dumps(manifest))
    assert main(["verify", str(copy), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "train: tokens" in err and "tokens in the files, manifest says" in err


def test_wrong_eos_accounting(copy, capsys):
    path = copy / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["shards"]["splits"]["validation"]["documents"] += 1
    path.write_text(json.dumps(manifest))
    assert main(["verify", str(copy), "--quiet"]) == 1
    assert "validation: eos_tokens" in capsys.readouterr().err


def test_rewritten_shard_with_matching_checksum_is_still_caught(copy, capsys):
    """A .bin replaced consistently (new checksum in the manifest) no longer matches MindRecord."""
    from dataprep.io import file_sha256

    path = copy / "manifest.json"
    manifest = json.loads(path.read_text())
    entry = next(f for f in manifest["shards"]["splits"]["train"]["files"] if f["format"] == "bin")
    target = copy / entry["path"]
    data = bytearray(target.read_bytes())
    data[0], data[2] = data[2], data[0]  # swap two tokens of the first row
    target.write_bytes(bytes(data))
    entry["sha256"] = file_sha256(target)
    path.write_text(json.dumps(manifest))
    assert main(["verify", str(copy), "--quiet"]) == 1
    assert "the MindRecord and .bin files differ in input_ids" in capsys.readouterr().err
